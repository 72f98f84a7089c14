package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/model"
)

// deviceMemory presents the CPU backend as one with its own memory
// (compute.MemoryReporter), so that the host tier can be tested without a
// device: the memory tier is then TierDevice.
type deviceMemory struct{ compute.Backend }

func (deviceMemory) FreeMemory() int64 { return 1 << 40 }

// openDeviceModel opens a test checkpoint on deviceMemory.
func openDeviceModel(t *testing.T, name string) *model.Model {
	t.Helper()
	m, err := model.Open("../testdata/models/"+name, model.Options{Backend: deviceMemory{testBackend}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// checkHostSessions: six agent-like sessions, sharing a system prompt,
// take turns over a device memory that holds about one of them, with a
// host tier that holds them all; each turn resends the session's whole
// conversation plus a few tokens. Every turn after a session's first finds
// at least 90 % of its prompt cached, most of it copied back from host
// memory, and answers as a cold engine does (tokens, logprobs, prompt
// logits).
func checkHostSessions(t *testing.T, m *model.Model) {
	r := rand.New(rand.NewPCG(51, 52))
	v := m.Config().VocabSize
	const sessions, turns, maxTokens = 6, 3, 4
	system := randomPrompt(r, 640, v)
	hist := make([][]int, sessions)
	for i := range hist {
		hist[i] = append(append([]int{}, system...), randomPrompt(r, 300+10*i, v)...)
	}
	longest := len(hist[sessions-1]) + turns*(maxTokens+12)
	budget := m.SequenceBytes(longest+maxTokens) + m.SequenceBytes(longest) + m.SequenceBytes(0)
	obs := &observer{tier: TierDevice}
	e := newEngine(t, m, Config{PrefixCache: true, StateMemory: budget, MaxNumSeqs: 1, PrefixObserver: obs,
		PrefixHost: int64(sessions+1) * m.SequenceBytes(longest)})
	cold := newEngine(t, m, Config{})
	for turn := range turns {
		for s := range sessions {
			req := diskRequest(hist[s])
			req.CacheHints = []int{len(system)}
			before := e.Stats().PrefixHostHitTokens
			got := run1(t, e, req)
			if turn > 0 {
				if frac := float64(got.cached) / float64(len(req.Prompt)); frac < 0.9 {
					t.Errorf("turn %d of session %d: %d of %d tokens cached (%.0f %%)", turn, s, got.cached, len(req.Prompt), 100*frac)
				}
				if e.Stats().PrefixHostHitTokens == before && s > 0 {
					t.Errorf("turn %d of session %d: nothing from the host tier", turn, s)
				}
			}
			if s == 0 || turn == turns-1 {
				sameResult(t, fmt.Sprintf("turn %d of session %d", turn, s), got, run1(t, cold, req))
			}
			for _, tok := range got.toks {
				hist[s] = append(hist[s], tok.ID)
			}
			hist[s] = append(hist[s], randomPrompt(r, 12, v)...)
		}
	}
	st := e.Stats()
	if st.PrefixHostHitTokens == 0 || st.State.Peak > budget || st.Host.Bytes > st.Host.Budget || st.Host.ReadBytes == 0 {
		t.Errorf("host hits %d tokens, peak %d of a budget of %d, host %+v", st.PrefixHostHitTokens, st.State.Peak, budget, st.Host)
	}
	obs.mu.Lock()
	if obs.bytes != st.State.Cached {
		t.Errorf("the observer was told of %d bytes in device memory; it holds %d", obs.bytes, st.State.Cached)
	}
	if obs.tiers[TierHost] != st.Host.Bytes {
		t.Errorf("the observer was told of %d bytes in host memory; it holds %d", obs.tiers[TierHost], st.Host.Bytes)
	}
	obs.mu.Unlock()
	t.Logf("hits %d tokens (%d from host memory) of %d; host %+v", st.PrefixHitTokens, st.PrefixHostHitTokens, st.PrefixQueryTokens, st.Host)
}

// TestHostTier runs checkHostSessions on the CPU backend presented as a
// device.
func TestHostTier(t *testing.T) {
	checkHostSessions(t, openDeviceModel(t, "tiny"))
}

// TestHostTierRefusedOnCPU: on the CPU backend the memory tier is host
// memory already; a host tier is refused with a message saying so.
func TestHostTierRefusedOnCPU(t *testing.T) {
	_, err := New(openModel(t, "tiny"), Config{PrefixCache: true, PrefixHost: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "host memory already") {
		t.Fatalf("a host tier on the CPU backend: %v", err)
	}
}

// tierIndex is a router's view of the observer's reports: the blocks each
// tier holds.
type tierIndex struct {
	mu sync.Mutex
	at map[Tier]map[uint64]bool
}

func (x *tierIndex) PrefixStored(sp PrefixSpan) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.at == nil {
		x.at = map[Tier]map[uint64]bool{}
	}
	if x.at[sp.Tier] == nil {
		x.at[sp.Tier] = map[uint64]bool{}
	}
	for _, h := range sp.BlockHashes {
		x.at[sp.Tier][h] = true
	}
}

func (x *tierIndex) PrefixRemoved(sp PrefixSpan) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range sp.BlockHashes {
		delete(x.at[sp.Tier], h)
	}
}

// where returns the tiers that hold every block of the prompt's prefix up
// to its last kept point.
func (x *tierIndex) where(prompt []int) []Tier {
	x.mu.Lock()
	defer x.mu.Unlock()
	hashes := BlockHashes(prompt[:maxResume(len(prompt))])
	var out []Tier
	for _, t := range []Tier{TierDevice, TierHost, TierDisk} {
		all := len(hashes) > 0
		for _, h := range hashes {
			all = all && x.at[t][h]
		}
		if all {
			out = append(out, t)
		}
	}
	return out
}

// TestTierEvents: what the observer is told lets a router tell where each
// prefix is as it moves down the tiers and back: evicted from device
// memory it is removed there and stored in host memory, evicted from host
// memory it is removed there and stored on disk, read back it is stored in
// device memory again (and stays on disk), and removed from disk to stay
// within its budget it is removed there.
func TestTierEvents(t *testing.T) {
	m := openDeviceModel(t, "tiny")
	r := rand.New(rand.NewPCG(53, 54))
	v := m.Config().VocabSize
	const n = 400
	point := m.SequenceBytes(maxResume(n))
	x := &tierIndex{}
	e := newEngine(t, m, Config{PrefixCache: true, MaxNumSeqs: 1, PrefixObserver: x,
		StateMemory: m.SequenceBytes(n) + point + point/2, PrefixHost: point + point/2,
		PrefixDisk: &DiskTier{Dir: t.TempDir(), Budget: 2*point + point/2, Key: []byte("events")}})
	var prompts [][]int
	for range 5 {
		prompts = append(prompts, randomPrompt(r, n, v))
	}
	run := func(i int) int { return run1(t, e, Request{Prompt: prompts[i], MaxTokens: 1}).cached }
	want := func(what string, i int, tiers ...Tier) {
		t.Helper()
		// Removals from disk are reported at the engine's next turn.
		e.cache.disk.Flush()
		run1(t, e, Request{Prompt: randomPrompt(r, 10, v), MaxTokens: 1})
		if got := x.where(prompts[i]); !slices.Equal(got, tiers) {
			t.Errorf("%s: prompt %d is in %v, want %v", what, i, got, tiers)
		}
	}
	run(0)
	want("stored", 0, TierDevice)
	run(1)
	want("evicted from device memory", 0, TierHost)
	want("stored next", 1, TierDevice)
	run(2)
	want("evicted from host memory", 0, TierDisk)
	want("evicted from device memory next", 1, TierHost)
	if got := run(0); got != maxResume(n) {
		t.Fatalf("prompt 0 resumed at %d from disk, want %d", got, maxResume(n))
	}
	want("read back", 0, TierDevice, TierDisk)
	// The disk holds about two points: writing three more removes the
	// oldest ones there.
	for i := 2; i < 5; i++ {
		run(i)
	}
	for i := range 5 {
		t.Logf("prompt %d: %v", i, x.where(prompts[i]))
	}
	want("removed from disk to stay within its budget", 1)
}

// TestDiskSpans: after a restart, DiskSpans names what the disk tier
// holds as spans between kept points, parents first, with the prompts'
// block hashes and tokens, so that a new observer can announce them.
func TestDiskSpans(t *testing.T) {
	m := openModel(t, "tiny")
	r := rand.New(rand.NewPCG(55, 56))
	v := m.Config().VocabSize
	dir := t.TempDir()
	tier := func() *DiskTier { return &DiskTier{Dir: dir, Budget: 1 << 30, Key: []byte("spans")} }
	system := randomPrompt(r, 200, v)
	prompts := [][]int{append(slices.Clone(system), randomPrompt(r, 150, v)...), append(slices.Clone(system), randomPrompt(r, 90, v)...)}
	first := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	if got := first.DiskSpans(); len(got) != 0 {
		t.Fatalf("an empty directory has spans %+v", got)
	}
	for _, p := range prompts {
		run1(t, first, Request{Prompt: p, MaxTokens: 1, CacheHints: []int{200}})
	}
	first.Close()

	e := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	spans := e.DiskSpans()
	seen := map[uint64]bool{0: true}
	points := map[int]int{}
	for _, sp := range spans {
		if sp.Tier != TierDisk || !sp.Point || !seen[sp.ParentHash] || len(sp.Tokens) != sp.End-sp.Start || len(sp.BlockHashes)*PrefixBlock != len(sp.Tokens) {
			t.Fatalf("span %+v (parent seen %v)", sp, seen[sp.ParentHash])
		}
		for _, h := range sp.BlockHashes {
			seen[h] = true
		}
		points[sp.End]++
	}
	for _, p := range prompts {
		hashes := BlockHashes(p)
		for i, h := range hashes[:maxResume(len(p))/PrefixBlock] {
			if !seen[h] {
				t.Errorf("block %d of a prompt is not announced", i)
			}
		}
		for _, sp := range spans {
			if sp.End <= len(p) && slices.Equal(sp.BlockHashes, hashes[sp.Start/PrefixBlock:sp.End/PrefixBlock]) && !slices.Equal(sp.Tokens, p[sp.Start:sp.End]) {
				t.Errorf("span [%d, %d): tokens differ from the prompt's", sp.Start, sp.End)
			}
		}
	}
	// The shared point at 192, and each prompt's last (320, 256).
	if points[192] != 1 || points[320] != 1 || points[256] != 1 || len(spans) != 3 {
		t.Errorf("spans end at %v, want one each at 192, 256 and 320", points)
	}
}

// TestLoRAThroughDisk: a request with a LoRA adapter resumes from its own
// state on disk after a restart, with the adapter's tokens, while the base
// model's request with the same prompt does not; DiskSpans announces the
// base model's chains only (an event would name the adapter's blocks as
// the base model's).
func TestLoRAThroughDisk(t *testing.T) {
	m := openModel(t, "small")
	a := attachLoRA(t, m, "lora-small-a", 1)
	ca := loadLoRACase(t, "lora-small-a")
	prompt := slices.Clone(ca.Prompt)
	for len(prompt) < 3*PrefixBlock+1 {
		prompt = append(prompt, ca.Prompt...)
	}
	dir := t.TempDir()
	tier := func() *DiskTier { return &DiskTier{Dir: dir, Budget: 1 << 30, Key: []byte("lora")} }
	req := func(uses ...LoRA) Request {
		return Request{Prompt: prompt, MaxTokens: 4, IgnoreEOS: true, Logprobs: true, LoRA: uses}
	}
	first := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	run1(t, first, req(a))
	first.Close()

	e := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	if spans := e.DiskSpans(); len(spans) != 0 {
		t.Errorf("the adapter's chain announced as %d spans", len(spans))
	}
	cold := newEngine(t, m, Config{})
	if got := run1(t, e, req()); got.cached != 0 {
		t.Errorf("the base model resumed at %d from the adapter's state", got.cached)
	}
	got := run1(t, e, req(a))
	if got.cached != maxResume(len(prompt)) || e.Stats().PrefixDiskHitTokens == 0 {
		t.Errorf("with the adapter: resumed at %d, want %d from disk", got.cached, maxResume(len(prompt)))
	}
	sameResult(t, "the adapter's request from disk", got, run1(t, cold, req(a)))
}
