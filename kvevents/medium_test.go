package kvevents

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// recordSink keeps every payload sent.
type recordSink struct {
	mu   sync.Mutex
	sent [][]byte
}

func (r *recordSink) send(topic string, seq uint64, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, payload)
	return nil
}

func (r *recordSink) close() error { return nil }

// TestMedium: a span stored or removed on a medium carries it where vLLM's
// BlockStored (field 6, after lora_id) and BlockRemoved (field 2) do, as
// the router decodes them; extra keys follow it; without a medium the
// events are the short forms, byte for byte.
func TestMedium(t *testing.T) {
	s := &recordSink{}
	p, err := newPublisher(Config{Topic: "kv@p@m", Model: "m", BlockSize: 4}, s)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 2, 3, 4, 5, 6, 7, 8}
	plain, _ := p.SpanStored(Span{}, toks[:4])
	onFS, _ := p.SpanStoredAttrs(Span{}, toks[:4], Attrs{Medium: MediumFS})
	if !slices.Equal(plain.Hashes(), onFS.Hashes()) {
		t.Errorf("hashes %v on FS, %v without a medium", onFS.Hashes(), plain.Hashes())
	}
	extra := [][]MMKey{{{Hash: "ab", Offset: -2}}}
	p.SpanStoredAttrs(onFS, toks[4:], Attrs{Medium: MediumCPU, Extra: extra})
	p.SpanRemovedAttrs(onFS, Attrs{Medium: MediumFS})
	p.SpanRemoved(plain)
	p.Close()

	var evs [][]any
	var dec []Event
	for _, payload := range s.sent {
		evs = append(evs, routerDecode(t, payload)...)
		b, err := Decode(payload)
		if err != nil {
			t.Fatal(err)
		}
		dec = append(dec, b.Events...)
	}
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5", len(evs))
	}
	wantLen := []int{5, 8, 9, 3, 2}
	wantMedium := []any{nil, "FS", "CPU", "FS", nil}
	for i, ev := range evs {
		if len(ev) != wantLen[i] {
			t.Errorf("event %d has %d fields, want %d: %v", i, len(ev), wantLen[i], ev)
			continue
		}
		var m any
		switch {
		case ev[0] == TagBlockStored && len(ev) > 6:
			m = ev[6]
			if ev[5] != nil || ev[7] != nil {
				t.Errorf("event %d: lora_id %v, lora_name %v", i, ev[5], ev[7])
			}
		case ev[0] == TagBlockRemoved && len(ev) > 2:
			m = ev[2]
		}
		if m != wantMedium[i] {
			t.Errorf("event %d: medium %v, want %v", i, m, wantMedium[i])
		}
		want, _ := wantMedium[i].(string)
		if got := dec[i].Medium; got != want {
			t.Errorf("event %d decodes with medium %q, want %q", i, got, want)
		}
	}
	if len(dec[2].ExtraKeys) != 1 || dec[2].ExtraKeys[0][0] != extra[0][0] {
		t.Errorf("extra keys after a medium: %v", dec[2].ExtraKeys)
	}
}

// tierIndex is what a router keeps: for each medium (lowercased, "" read
// as "gpu"), the blocks it holds.
type tierIndex map[string]map[uint64]bool

func (x tierIndex) apply(evs []Event) {
	for _, ev := range evs {
		m := ev.Medium
		if m == "" {
			m = MediumGPU
		}
		switch ev.Tag {
		case TagBlockStored:
			if x[m] == nil {
				x[m] = map[uint64]bool{}
			}
			for _, h := range ev.Hashes {
				x[m][h] = true
			}
		case TagBlockRemoved:
			for _, h := range ev.Hashes {
				delete(x[m], h)
			}
		case TagAllBlocksCleared:
			clear(x)
		}
	}
}

// TestMediumIndex: a prefix moved from GPU to CPU to FS and back, as the
// engine reports it, is where a router indexing the events by medium
// finds it at each stage.
func TestMediumIndex(t *testing.T) {
	s := &recordSink{}
	p, err := newPublisher(Config{Topic: "kv@p@m", Model: "m", BlockSize: 4}, s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x := tierIndex{}
	sent := 0
	sync := func(events int) {
		t.Helper()
		sent += events
		for deadline := time.Now().Add(5 * time.Second); p.Stats().Events < uint64(sent) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, payload := range s.sent {
			b, err := Decode(payload)
			if err != nil {
				t.Fatal(err)
			}
			x.apply(b.Events)
		}
		s.sent = nil
	}
	where := func(sp Span) []string {
		var out []string
		for _, m := range []string{MediumGPU, MediumCPU, MediumFS} {
			all := true
			for _, h := range sp.Hashes() {
				all = all && x[m][h]
			}
			if all {
				out = append(out, m)
			}
		}
		return out
	}
	toks := []int{1, 2, 3, 4, 5, 6, 7, 8}
	gpu, _ := p.SpanStoredAttrs(Span{}, toks, Attrs{Medium: MediumGPU})
	sync(1)
	p.SpanStoredAttrs(Span{}, toks, Attrs{Medium: MediumCPU}) // offloaded
	p.SpanRemovedAttrs(gpu, Attrs{Medium: MediumGPU})         // evicted from the device
	sync(2)
	if got := where(gpu); !slices.Equal(got, []string{MediumCPU}) {
		t.Errorf("after offloading to host: on %v", got)
	}
	p.SpanStoredAttrs(Span{}, toks, Attrs{Medium: MediumFS})
	p.SpanRemovedAttrs(gpu, Attrs{Medium: MediumCPU})
	sync(2)
	if got := where(gpu); !slices.Equal(got, []string{MediumFS}) {
		t.Errorf("after spilling to disk: on %v", got)
	}
	p.SpanStoredAttrs(Span{}, toks, Attrs{Medium: MediumGPU}) // read back
	sync(1)
	if got := where(gpu); !slices.Equal(got, []string{MediumGPU, MediumFS}) {
		t.Errorf("after reading back: on %v", got)
	}
}
