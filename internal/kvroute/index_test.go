package kvroute

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/govinfer/govinfer/kvevents"
)

func tokens(from, n int) []int {
	t := make([]int, n)
	for i := range t {
		t[i] = from + i
	}
	return t
}

func stored(hashes []uint64, parent *uint64, toks []int, bs int) kvevents.Event {
	ev := kvevents.Event{Tag: kvevents.TagBlockStored, Hashes: hashes, Tokens: toks, BlockSize: bs}
	if parent != nil {
		ev.Parent, ev.HasParent = *parent, true
	}
	return ev
}

func TestIndexFromEvents(t *testing.T) {
	h, _ := kvevents.NewHasher("", "m", 4)
	x := NewIndex(h)
	prompt := tokens(100, 14) // three whole blocks and a partial one
	// Engine hashes are opaque ids: the index keys blocks by their tokens.
	a, b := []uint64{11, 12}, []uint64{13}
	if err := x.Apply("0", kvevents.Batch{Events: []kvevents.Event{
		stored(a, nil, prompt[:8], 4),
		stored(b, &a[1], prompt[8:12], 4),
	}}); err != nil {
		t.Fatal(err)
	}
	if m := x.Match(prompt); !maps.Equal(m, map[string]int{"0": 3}) {
		t.Errorf("match %v", m)
	}
	if n := x.SpanMatch("0", prompt); n != 12 {
		t.Errorf("span match %d, want 12", n)
	}
	// A prompt that leaves the second span in its middle: the router
	// credits the block inside the span, the engine resumes where the
	// first span ends.
	other := append(append([]int{}, prompt[:8]...), 7, 7, 7, 7, 7)
	if m := x.Match(other); m["0"] != 2 {
		t.Errorf("match %v", m)
	}
	longer := append(append([]int{}, prompt[:4]...), 9, 9, 9, 9)
	if m, n := x.Match(longer), x.SpanMatch("0", longer); m["0"] != 1 || n != 0 {
		t.Errorf("inside the first span: match %v, span match %d", m, n)
	}
	// A second pod holds the first span only.
	x.Apply("1", kvevents.Batch{Events: []kvevents.Event{stored([]uint64{21, 22}, nil, prompt[:8], 4)}})
	if m := x.Match(prompt); !maps.Equal(m, map[string]int{"0": 3, "1": 2}) {
		t.Errorf("two pods: %v", m)
	}
	// Removing the second span ends pod 0's chain at the first.
	x.Apply("0", kvevents.Batch{Events: []kvevents.Event{{Tag: kvevents.TagBlockRemoved, Hashes: b}}})
	if m, n := x.Match(prompt), x.SpanMatch("0", prompt); m["0"] != 2 || n != 8 {
		t.Errorf("after removal: match %v, span match %d", m, n)
	}
	// A span whose parent the index never saw is skipped, as the router
	// skips it.
	lost := uint64(99)
	if err := x.Apply("0", kvevents.Batch{Events: []kvevents.Event{stored([]uint64{31}, &lost, prompt[8:12], 4)}}); err == nil {
		t.Error("a span with an unknown parent was indexed")
	}
	if err := x.Apply("0", kvevents.Batch{Events: []kvevents.Event{stored([]uint64{31}, nil, tokens(0, 16), 16)}}); err == nil {
		t.Error("a span of another block size was indexed")
	}
	x.Apply("0", kvevents.Batch{Events: []kvevents.Event{{Tag: kvevents.TagAllBlocksCleared}}})
	if m := x.Match(prompt); !maps.Equal(m, map[string]int{"1": 2}) || x.SpanMatch("0", prompt) != 0 {
		t.Errorf("after clearing pod 0: %v", m)
	}
}

// TestIndexFromPublisher feeds the index what a Publisher sends over
// ZeroMQ for the spans a prefix cache announces.
func TestIndexFromPublisher(t *testing.T) {
	p, err := kvevents.Listen(kvevents.Config{Endpoint: "tcp://127.0.0.1:0", Topic: "kv@p@m", Model: "m", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := kvevents.Subscribe(ctx, "tcp://"+p.Addr(), "kv@")
	if err != nil {
		t.Fatal(err)
	}
	// Publish until the subscription is live, then drain.
	for synced := false; !synced; {
		p.AllCleared()
		select {
		case <-msgs:
			synced = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	for quiet := false; !quiet; {
		select {
		case <-msgs:
		case <-time.After(200 * time.Millisecond):
			quiet = true
		}
	}
	h, _ := kvevents.NewHasher("", "m", 4)
	x := NewIndex(h)
	prompt := tokens(1, 14)
	first, _ := p.SpanStored(kvevents.Span{}, prompt[:4])
	second, _ := p.SpanStored(first, prompt[4:12])
	for seen := 0; seen < 2; {
		select {
		case m := <-msgs:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if err := x.Apply("p", m.Batch); err != nil {
				t.Fatal(err)
			}
			seen += len(m.Batch.Events)
		case <-time.After(10 * time.Second):
			t.Fatal("no events")
		}
	}
	if m, n := x.Match(prompt), x.SpanMatch("p", prompt); m["p"] != 3 || n != 12 {
		t.Errorf("match %v, span match %d", m, n)
	}
	p.SpanRemoved(second)
	select {
	case m := <-msgs:
		x.Apply("p", m.Batch)
	case <-time.After(10 * time.Second):
		t.Fatal("no removal")
	}
	if n := x.SpanMatch("p", prompt); n != 4 {
		t.Errorf("after removing the second span: %d", n)
	}
}

// TestIndexMergedSpans follows the contract of kvevents' package doc when
// a middle snapshot point is evicted: its span and the next are removed
// and announced again as one, so the chain ends only where the engine can
// still resume.
func TestIndexMergedSpans(t *testing.T) {
	h, _ := kvevents.NewHasher("", "m", 4)
	x := NewIndex(h)
	prompt := tokens(50, 12)
	a, _ := encodeSpan(h, nil, prompt[:4])
	b, _ := encodeSpan(h, a.Hashes[len(a.Hashes)-1:], prompt[4:8])
	c, _ := encodeSpan(h, b.Hashes[len(b.Hashes)-1:], prompt[8:12])
	x.Apply("p", kvevents.Batch{Events: []kvevents.Event{a, b, c}})
	divergent := append(append([]int{}, prompt[:10]...), 1, 1)
	if n := x.SpanMatch("p", divergent); n != 8 {
		t.Fatalf("before: %d", n)
	}
	merged, _ := encodeSpan(h, a.Hashes[len(a.Hashes)-1:], prompt[4:12])
	if err := x.Apply("p", kvevents.Batch{Events: []kvevents.Event{
		{Tag: kvevents.TagBlockRemoved, Hashes: b.Hashes}, {Tag: kvevents.TagBlockRemoved, Hashes: c.Hashes}, merged,
	}}); err != nil {
		t.Fatal(err)
	}
	if n, full := x.SpanMatch("p", divergent), x.SpanMatch("p", prompt); n != 4 || full != 12 {
		t.Errorf("after the merge: %d and %d, want 4 and 12", n, full)
	}
	if m := x.Match(divergent); m["p"] != 2 {
		t.Errorf("the router still credits the blocks inside the span: %v", m)
	}
}

// encodeSpan is the BlockStored a Publisher sends for toks after the block
// parent (none: a prompt's start).
func encodeSpan(h *kvevents.Hasher, parent []uint64, toks []int) (kvevents.Event, error) {
	from := h.Root()
	if len(parent) > 0 {
		from = parent[0]
	}
	hs, err := h.Blocks(nil, from, toks)
	ev := kvevents.Event{Tag: kvevents.TagBlockStored, Hashes: hs, Tokens: toks, BlockSize: h.BlockSize()}
	if len(parent) > 0 {
		ev.Parent, ev.HasParent = parent[0], true
	}
	return ev, err
}
