package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestDiskReadStall: a request whose prefix is on disk does not stall the
// other sequences' steps while its state is read. Two long prompts' states
// are written by one engine and read back by the next (a restart) while
// another request decodes there. With the first read held, the decoding
// request keeps getting tokens; once released, the resumed request
// answers as a cold one. The second read runs freely, and the test logs
// the decoding request's longest gap between tokens around it against
// the time the read took.
func TestDiskReadStall(t *testing.T) {
	m := openModel(t, "small")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(47, 48))
	v := m.Config().VocabSize
	long := [2][]int{randomPrompt(r, 6*1024+1, v), randomPrompt(r, 6*1024+1, v)}
	tier := func() *DiskTier { return &DiskTier{Dir: dir, Budget: 1 << 30, Key: []byte("stall")} }
	first := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	for _, p := range long {
		run1(t, first, Request{Prompt: p, MaxTokens: 1})
	}
	first.Close()

	e := newEngine(t, m, Config{PrefixCache: true, PrefixDisk: tier()})
	hold := make(chan struct{})
	var held atomic.Int32
	e.fetchHook = func() {
		if held.Add(1) == 1 {
			<-hold
		}
	}
	ctx := context.Background()
	bg, err := e.Submit(ctx, Request{Prompt: randomPrompt(r, 8, v), MaxTokens: 2000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	next := func() {
		t.Helper()
		out, err := bg.Next(ctx)
		if err != nil || out.Finish != FinishNone {
			t.Fatalf("background request: %v %v", out.Finish, err)
		}
		for _, tok := range out.Tokens {
			times = append(times, tok.At)
		}
	}
	for len(times) < 20 {
		next()
	}
	want := newEngine(t, m, Config{})
	for i, p := range long {
		req := Request{Prompt: p, MaxTokens: 1}
		submitted := time.Now()
		s, err := e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		from := len(times)
		if i == 0 {
			for held.Load() == 0 {
				next()
			}
			// The read is held: the other request steps on.
			for n := len(times); len(times) < n+10; {
				next()
			}
			close(hold)
		}
		got := collectResult(t, s)
		answered := time.Now()
		for len(times) < from+40 || !times[len(times)-1].After(answered) {
			next()
		}
		if got.cached != maxResume(len(p)) {
			t.Fatalf("prompt %d resumed at %d, want %d (from disk)", i, got.cached, maxResume(len(p)))
		}
		sameResult(t, "the resumed request", got, run1(t, want, req))
		if i == 0 {
			continue
		}
		var gaps []time.Duration
		var worst time.Duration
		for j := from + 1; j < len(times); j++ {
			d := times[j].Sub(times[j-1])
			gaps = append(gaps, d)
			if !times[j].Before(submitted) && !times[j-1].After(answered) {
				worst = max(worst, d)
			}
		}
		slices.Sort(gaps)
		st := e.Stats().Disk
		t.Logf("disk reads %v in all (%d bytes); background gaps: median %v, longest around the second read %v",
			time.Duration(st.ReadSeconds*1e9), st.ReadBytes, gaps[len(gaps)/2], worst)
	}
}
