package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDiskReadStall: a request whose prefix is on disk does not stall the
// other sequences' steps while its state is read. A long prompt's state
// is written by one engine and read back by the next (a restart) while
// another request decodes there: the decoding request's longest gap
// between tokens, around the other's start, stays below the time the
// disk tier spent reading (which is what it was before the reads left
// the engine goroutine), and the resumed request answers as a cold one.
func TestDiskReadStall(t *testing.T) {
	m := openModel(t, "small")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(47, 48))
	v := m.Config().VocabSize
	long := randomPrompt(r, 6*1024+1, v)
	tier := func() *DiskTier { return &DiskTier{Dir: dir, Budget: 1 << 30, Key: []byte("stall")} }
	first := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	run1(t, first, Request{Prompt: long, MaxTokens: 1})
	first.Close()

	e := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	ctx := context.Background()
	bg, err := e.Submit(ctx, Request{Prompt: randomPrompt(r, 8, v), MaxTokens: 400, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for len(times) < 20 {
		out, err := bg.Next(ctx)
		if err != nil || out.Finish != FinishNone {
			t.Fatalf("background request: %v %v", out.Finish, err)
		}
		for _, tok := range out.Tokens {
			times = append(times, tok.At)
		}
	}
	submitted := time.Now()
	s, err := e.Submit(ctx, Request{Prompt: long, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := collectResult(t, s)
	answered := time.Now()
	for {
		out, err := bg.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range out.Tokens {
			times = append(times, tok.At)
		}
		if out.Finish != FinishNone {
			break
		}
	}
	if got.cached != maxResume(len(long)) {
		t.Fatalf("resumed at %d, want %d (from disk)", got.cached, maxResume(len(long)))
	}
	var gaps []time.Duration
	var worst time.Duration
	for i := 1; i < len(times); i++ {
		d := times[i].Sub(times[i-1])
		gaps = append(gaps, d)
		if !times[i].Before(submitted) && !times[i-1].After(answered) {
			worst = max(worst, d)
			if testing.Verbose() && d > 4*time.Millisecond {
				t.Logf("gap %v from %v after the submission", d, times[i-1].Sub(submitted))
			}
		}
	}
	slices.Sort(gaps)
	read := time.Duration(e.Stats().Disk.ReadSeconds * 1e9)
	t.Logf("disk read %v (%d bytes); background gaps: median %v, longest around the resumed request's start %v",
		read, e.Stats().Disk.ReadBytes, gaps[len(gaps)/2], worst)
	if worst >= read {
		t.Errorf("a gap of %v between the background request's tokens, longer than the %v of disk reads: the reads stalled its steps", worst, read)
	}
	sameResult(t, "the resumed request", got, run1(t, newEngine(t, m, Config{}), Request{Prompt: long, MaxTokens: 1}))
}
