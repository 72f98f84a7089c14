package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/sample"
)

type testLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *testLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// diskRequest asks for everything that must not change: sampled tokens
// with logprobs and alternatives, and the prompt's logits.
func diskRequest(prompt []int) Request {
	return Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3, PromptLogits: true,
		Params: sample.Params{Temperature: 0.8, TopP: 0.9, Seed: 7}}
}

// TestPrefixDiskRestart: the states a closing engine writes are read by a
// new engine on the same directory (a restart), which resumes from them
// and answers exactly as a cold engine does; a damaged state is skipped,
// logged and recomputed, with the same answer.
func TestPrefixDiskRestart(t *testing.T) {
	m := openModel(t, "small")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(41, 42))
	v := m.Config().VocabSize
	system := randomPrompt(r, 200, v)
	a := append(append([]int{}, system...), randomPrompt(r, 130, v)...)
	b := append(append([]int{}, system...), randomPrompt(r, 90, v)...)
	cold := newEngine(t, m, Config{})
	tier := func(log *testLog) *DiskTier {
		return &DiskTier{Dir: dir, Budget: 1 << 30, Key: []byte("test"), Logf: log.logf}
	}

	var log testLog
	first, err := New(m, Config{PrefixCache: true, PrefixDisk: tier(&log)})
	if err != nil {
		t.Fatal(err)
	}
	run1(t, first, diskRequest(a))
	run1(t, first, Request{Prompt: b, MaxTokens: 2, CacheHints: []int{200}})
	if _, err := New(m, Config{PrefixCache: true, PrefixDisk: tier(&log)}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second engine on the directory: %v", err)
	}
	first.Close()

	second := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier(&log)})
	got := run1(t, second, diskRequest(a))
	if got.cached != maxResume(len(a)) {
		t.Errorf("after a restart a resumed at %d, want %d", got.cached, maxResume(len(a)))
	}
	sameResult(t, "a after a restart", got, run1(t, cold, diskRequest(a)))
	st := second.Stats()
	if st.PrefixDiskHitTokens != uint64(got.cached) || st.Disk.Reads == 0 {
		t.Errorf("disk hits %d tokens, %d reads; want %d tokens", st.PrefixDiskHitTokens, st.Disk.Reads, got.cached)
	}
	// A prompt sharing only the system prompt resumes at its kept point.
	c := append(append([]int{}, system...), randomPrompt(r, 100, v)...)
	if got := run1(t, second, diskRequest(c)); got.cached != 192 {
		t.Errorf("a third prompt resumed at %d, want 192", got.cached)
	}
	second.Close()

	// Damage every state: the next engine skips them, says so, and
	// recomputes.
	states, _ := filepath.Glob(filepath.Join(dir, "*", "*.st"))
	if len(states) < 2 {
		t.Fatalf("%d states on disk, want at least 2", len(states))
	}
	for _, p := range states {
		data, _ := os.ReadFile(p)
		data[len(data)-1] ^= 0x40
		os.WriteFile(p, data, 0o644)
	}
	third := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier(&log)})
	got = run1(t, third, diskRequest(a))
	if got.cached != 0 {
		t.Errorf("resumed at %d from damaged states", got.cached)
	}
	sameResult(t, "a from damaged states", got, run1(t, cold, diskRequest(a)))
	l := log.String()
	named := false
	for _, p := range states {
		named = named || strings.Contains(l, p)
	}
	if !strings.Contains(l, "corrupt") || !strings.Contains(l, "skipped") || !named {
		t.Errorf("log %q does not report the damaged files", l)
	}
	// The shallower state, damaged too, is skipped as well: a failed read
	// tries the next deepest point.
	if got := third.Stats().Disk.Corrupt; got != 2 {
		t.Errorf("%d files skipped, want a's 2 (at 192 and %d)", got, maxResume(len(a)))
	}
}

// TestPrefixDiskOverflow: six agent-like sessions, sharing a system
// prompt, take turns over a memory that holds about one of them; each
// turn resends the session's whole conversation plus a few tokens. With
// the disk tier every turn after a session's first finds at least 90 % of
// its prompt cached, and answers as a cold engine does.
func TestPrefixDiskOverflow(t *testing.T) {
	m := openModel(t, "tiny")
	r := rand.New(rand.NewPCG(43, 44))
	v := m.Config().VocabSize
	const sessions, turns, maxTokens = 6, 3, 4
	system := randomPrompt(r, 640, v)
	hist := make([][]int, sessions)
	for i := range hist {
		hist[i] = append(append([]int{}, system...), randomPrompt(r, 300+10*i, v)...)
	}
	longest := len(hist[sessions-1]) + turns*(maxTokens+12)
	seq := m.SequenceBytes(longest + maxTokens)
	budget := seq + m.SequenceBytes(longest) + m.SequenceBytes(0)
	obs := &observer{}
	e := newEngine(t, m, Config{PrefixCache: true, StateMemory: budget, MaxNumSeqs: 1, PrefixObserver: obs,
		PrefixDisk: &DiskTier{Dir: t.TempDir(), Budget: 1 << 30}})
	cold := newEngine(t, m, Config{})
	for turn := range turns {
		for s := range sessions {
			req := Request{Prompt: hist[s], MaxTokens: maxTokens, IgnoreEOS: true, CacheHints: []int{len(system)}}
			got := run1(t, e, req)
			if turn > 0 {
				if frac := float64(got.cached) / float64(len(req.Prompt)); frac < 0.9 {
					t.Errorf("turn %d of session %d: %d of %d tokens cached (%.0f %%)", turn, s, got.cached, len(req.Prompt), 100*frac)
				}
			}
			if s == 0 {
				sameResult(t, fmt.Sprintf("turn %d of session %d", turn, s), got, run1(t, cold, req))
			}
			for _, tok := range got.toks {
				hist[s] = append(hist[s], tok.ID)
			}
			hist[s] = append(hist[s], randomPrompt(r, 12, v)...)
		}
	}
	st := e.Stats()
	if st.PrefixDiskHitTokens == 0 || st.State.Peak > budget {
		t.Errorf("disk hits %d tokens, peak %d of a budget of %d", st.PrefixDiskHitTokens, st.State.Peak, budget)
	}
	obs.mu.Lock()
	if obs.bytes != st.State.Cached {
		t.Errorf("the observer was told of %d bytes; the memory tier holds %d", obs.bytes, st.State.Cached)
	}
	obs.mu.Unlock()
	t.Logf("hits %d tokens (%d from disk) of %d; disk %+v", st.PrefixHitTokens, st.PrefixDiskHitTokens, st.PrefixQueryTokens, st.Disk)
}

// TestEvictionByValue: a kept point many requests resumed from (a shared
// system prompt) outlives one-off prompts stored after it, which plain
// least-recently-used eviction would keep instead.
func TestEvictionByValue(t *testing.T) {
	m := openModel(t, "tiny")
	r := rand.New(rand.NewPCG(45, 46))
	v := m.Config().VocabSize
	point := m.RecurrentBytes() + 128*m.KVBytesPerToken()
	e := newEngine(t, m, Config{PrefixCache: true, StateMemory: m.SequenceBytes(200) + 2*point + point/2, MaxNumSeqs: 1})
	system := randomPrompt(r, 128, v)
	withSystem := func() []int { return append(append([]int{}, system...), randomPrompt(r, 20, v)...) }
	run := func(p []int) int {
		return run1(t, e, Request{Prompt: p, MaxTokens: 2, IgnoreEOS: true, CacheHints: []int{128}}).cached
	}
	run(withSystem())
	for range 3 {
		if got := run(withSystem()); got != 128 {
			t.Fatalf("a prompt with the system prompt resumed at %d, want 128", got)
		}
	}
	for range 4 {
		run(randomPrompt(r, 150, v)) // one-offs, each stored after the system prompt was last used
	}
	if got := run(withSystem()); got != 128 {
		t.Errorf("after one-offs the system prompt resumed at %d, want 128 (evicted instead of them)", got)
	}
}
