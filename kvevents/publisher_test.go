package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// routerBatch decodes a payload the way the llm-d router's vLLM adapter
// does (llm-d-kv-cache pkg/kvevents/engineadapter/vllm_adapter.go): a
// positional struct for the batch, each event as []any, hashes accepted
// only as uint64 or int64.
type routerBatch struct {
	_                struct{} `msgpack:",array"`
	TS               float64
	Events           []msgpack.RawMessage
	DataParallelRank *int `msgpack:",omitempty"`
}

func routerHashes(t *testing.T, v any) []uint64 {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("block_hashes are %T", v)
	}
	var hs []uint64
	for _, h := range a {
		switch x := h.(type) {
		case uint64:
			hs = append(hs, x)
		case int64:
			hs = append(hs, uint64(x))
		default:
			t.Fatalf("a hash of type %T, which the router rejects", h)
		}
	}
	return hs
}

// routerDecode returns each event's fields as the router sees them.
func routerDecode(t *testing.T, payload []byte) [][]any {
	t.Helper()
	var b routerBatch
	if err := msgpack.Unmarshal(payload, &b); err != nil {
		t.Fatalf("router decode: %v", err)
	}
	if b.TS < 1e9 {
		t.Errorf("timestamp %v is not seconds since the epoch", b.TS)
	}
	var evs [][]any
	for _, raw := range b.Events {
		var f []any
		if err := msgpack.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, f)
	}
	return evs
}

// subscribe dials p and returns its messages' frames; it publishes
// AllBlocksCleared until the subscription is live (ZeroMQ drops messages
// sent before a subscriber joins) and skips those.
func subscribe(t *testing.T, p *Publisher) <-chan [][]byte {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close() })
	if err := sub.Dial("tcp://" + p.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	frames := make(chan [][]byte, 100)
	go func() {
		for {
			msg, err := sub.Recv()
			if err != nil {
				close(frames)
				return
			}
			frames <- msg.Frames
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		p.AllCleared()
		select {
		case <-frames:
			// Drain the sync messages still in flight.
			for {
				select {
				case <-frames:
				case <-time.After(200 * time.Millisecond):
					return frames
				}
			}
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message reached the subscriber")
		}
	}
}

func next(t *testing.T, frames <-chan [][]byte) [][]byte {
	t.Helper()
	select {
	case f, ok := <-frames:
		if !ok {
			t.Fatal("subscription ended")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return nil
}

func TestPublishOverZMQ(t *testing.T) {
	p, err := Listen(Config{Endpoint: "tcp://127.0.0.1:0", Topic: Topic("pod-a", "m"), Model: "m", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	frames := subscribe(t, p)

	prompt := []int{10, 11, 12, 13, 14, 15, 16, 17, 70000, 19, 20, 21}
	first, err := p.SpanStored(Span{}, prompt[:8])
	if err != nil {
		t.Fatal(err)
	}
	f := next(t, frames)
	if len(f) != 3 || string(f[0]) != "kv@pod-a@m" || len(f[1]) != 8 {
		t.Fatalf("frames %q", f)
	}
	seq := binary.BigEndian.Uint64(f[1])
	evs := routerDecode(t, f[2])
	if len(evs) != 1 || evs[0][0] != TagBlockStored || len(evs[0]) != 5 {
		t.Fatalf("events %v", evs)
	}
	stored := evs[0]
	if hs := routerHashes(t, stored[1]); !slices.Equal(hs, first.Hashes()) || len(hs) != 2 {
		t.Errorf("hashes %v, span %v", hs, first.Hashes())
	}
	if stored[2] != nil {
		t.Errorf("a first span has parent %v", stored[2])
	}
	if got, _ := Decode(f[2]); !slices.Equal(got.Events[0].Tokens, prompt[:8]) || got.Events[0].BlockSize != 4 {
		t.Errorf("decoded %+v", got.Events[0])
	}

	// The next span names the first's last block as its parent; removing
	// it and clearing arrive in order, one batch each or together.
	second, err := p.SpanStored(first, prompt[8:12])
	if err != nil {
		t.Fatal(err)
	}
	p.SpanRemoved(second)
	p.AllCleared()
	var tags []string
	for len(tags) < 3 {
		f := next(t, frames)
		s := binary.BigEndian.Uint64(f[1])
		if s != seq+1 {
			t.Errorf("sequence %d after %d", s, seq)
		}
		seq = s
		for _, ev := range routerDecode(t, f[2]) {
			tags = append(tags, ev[0].(string))
			switch ev[0] {
			case TagBlockStored:
				last, _ := first.Last()
				if parent, ok := ev[2].(uint64); !ok || parent != last {
					t.Errorf("parent %v (%T), want %d", ev[2], ev[2], last)
				}
			case TagBlockRemoved:
				if hs := routerHashes(t, ev[1]); !slices.Equal(hs, second.Hashes()) {
					t.Errorf("removed %v, want %v", hs, second.Hashes())
				}
			}
		}
	}
	if !slices.Equal(tags, []string{TagBlockStored, TagBlockRemoved, TagAllBlocksCleared}) {
		t.Errorf("events %v", tags)
	}
	// The engine's hashes are the keys a router recomputes from the tokens.
	if keys := p.Hasher().Keys(prompt); !slices.Equal(keys, append(first.Hashes(), second.Hashes()...)) {
		t.Errorf("router keys %v, engine hashes %v %v", keys, first.Hashes(), second.Hashes())
	}
	if st := p.Stats(); st.DroppedBatches != 0 || st.SendErrors != 0 || st.Events < 4 {
		t.Errorf("stats %+v", st)
	}
}

// blockingSink holds every send until released.
type blockingSink struct {
	release chan struct{}
	entered chan struct{} // receives once per send, if not nil
	mu      sync.Mutex
	sent    [][]byte
}

func (b *blockingSink) send(topic string, seq uint64, payload []byte) error {
	if b.entered != nil {
		b.entered <- struct{}{}
	}
	<-b.release
	b.mu.Lock()
	b.sent = append(b.sent, payload)
	b.mu.Unlock()
	return nil
}

func (b *blockingSink) close() error { return nil }

func TestStuckSocketDropsBatches(t *testing.T) {
	s := &blockingSink{release: make(chan struct{}), entered: make(chan struct{}, 1000)}
	p, err := newPublisher(Config{Topic: "kv@p@m", Model: "m", BlockSize: 2, MaxPending: 8}, s)
	if err != nil {
		t.Fatal(err)
	}
	// The first event is taken by the sender, which then blocks; the
	// rest pile up, and nothing waits for the socket.
	span, _ := p.SpanStored(Span{}, []int{1, 2})
	<-s.entered
	start := time.Now()
	for i := range 100 {
		if _, err := p.SpanStored(span, []int{i, i}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("101 events took %v with the socket stuck", d)
	}
	if st := p.Stats(); st.DroppedBatches == 0 {
		t.Errorf("no batch dropped with the socket stuck: %+v", st)
	}
	close(s.release)
	p.Close()
	if len(s.sent) < 2 {
		t.Fatalf("%d batches sent", len(s.sent))
	}
	first, _ := Decode(s.sent[0])
	if len(first.Events) != 1 || first.Events[0].Tag != TagBlockStored {
		t.Errorf("first batch %+v", first)
	}
	after, _ := Decode(s.sent[1])
	if after.Events[0].Tag != TagAllBlocksCleared || len(after.Events) > 9 {
		t.Errorf("the batch after a drop starts with %s and has %d events", after.Events[0].Tag, len(after.Events))
	}
}

func TestPublisherErrors(t *testing.T) {
	var nilp *Publisher
	if sp, err := nilp.SpanStored(Span{}, []int{1}); err != nil || sp.Blocks() != 0 {
		t.Errorf("nil publisher: %v %v", sp, err)
	}
	nilp.SpanRemoved(Span{})
	nilp.AllCleared()
	if nilp.Close() != nil || nilp.Stats() != (Stats{}) {
		t.Error("nil publisher close or stats")
	}
	for _, cfg := range []Config{
		{Endpoint: "tcp://127.0.0.1:0", Topic: "kv@p@m", Model: "m"},
		{Endpoint: "127.0.0.1:5557", Topic: "kv@p@m", Model: "m", BlockSize: 64},
		{Endpoint: "tcp://127.0.0.1:0", Topic: "kv@p@m", BlockSize: 64},
		{Endpoint: "tcp://256.0.0.1:1", Topic: "kv@p@m", Model: "m", BlockSize: 64},
	} {
		if p, err := Listen(cfg); err == nil {
			p.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
	s := &blockingSink{release: make(chan struct{})}
	close(s.release)
	p, _ := newPublisher(Config{Topic: "kv@p@m", Model: "m", BlockSize: 4}, s)
	if _, err := p.SpanStored(Span{}, []int{1, 2, 3}); !errors.Is(err, errPartial) {
		t.Errorf("a partial block: %v", err)
	}
	if _, err := p.SpanStored(Span{}, nil); err == nil {
		t.Error("an empty span accepted")
	}
	p.Close()
	p.AllCleared() // after Close: ignored
	if err := p.Close(); err != nil {
		t.Error(err)
	}
}
