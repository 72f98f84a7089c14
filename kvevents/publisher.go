package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Defaults of Config.
const (
	// DefaultEndpoint is where vLLM and the llm-d router expect the events.
	DefaultEndpoint = "tcp://*:5557"
	// DefaultMaxPending bounds the events waiting for the socket.
	DefaultMaxPending = 4096
	// DefaultHighWaterMark bounds the messages the socket queues for its
	// subscribers (ZeroMQ's SNDHWM; past it a PUB socket drops messages,
	// as libzmq's does). vLLM's publisher uses the same number.
	DefaultHighWaterMark = 100000
)

// Topic returns the topic vLLM publishes under: "kv@<pod-id>@<model>".
func Topic(podID, model string) string { return "kv@" + podID + "@" + model }

// Config configures a Publisher.
type Config struct {
	// Endpoint is the ZeroMQ address the PUB socket binds, such as
	// "tcp://*:5557" (port 0 picks a free one; see Publisher.Addr).
	Endpoint string
	// Topic is the first frame of every message. Empty means
	// Topic(hostname, Model).
	Topic string
	// Model is the served model's name: the root of the block hashes, as
	// the router hashes its model name.
	Model string
	// HashSeed is the router's hashSeed (vLLM's PYTHONHASHSEED); "" is
	// both sides' default.
	HashSeed string
	// BlockSize is the number of tokens per block: the prefix cache's
	// snapshot chunk C. It must be positive.
	BlockSize int
	// MaxPending bounds the events waiting for the socket; past it the
	// pending batch is dropped (Stats.DroppedBatches). Zero means
	// DefaultMaxPending.
	MaxPending int
	// Log receives the publisher's rare messages (a failed send); nil
	// discards them.
	Log io.Writer
}

// Stats counts what a Publisher did.
type Stats struct {
	// Batches and Events count what was handed to the socket.
	Batches, Events uint64
	// DroppedBatches counts pending batches dropped because the socket
	// could not keep up (each also costs an AllBlocksCleared).
	DroppedBatches uint64
	// SendErrors counts batches the socket refused.
	SendErrors uint64
}

// Span is a stretch of cached prefix between two snapshot points, as
// SpanStored announced it: its blocks' hashes. The zero Span stands for the
// start of a prompt (no blocks), the parent of a prefix's first span. A
// Span is a value; keep it with the snapshot point it ends at.
type Span struct {
	hashes []uint64
}

// Blocks returns the number of blocks in the span.
func (s Span) Blocks() int { return len(s.hashes) }

// Hashes returns the span's block hashes, in order.
func (s Span) Hashes() []uint64 { return append([]uint64(nil), s.hashes...) }

// Slice returns the span's blocks i to j-1, as a span: Slice(0, n) is the
// parent of a span that branches after n blocks, Slice(i, j) what to
// remove when only those blocks are evicted.
func (s Span) Slice(i, j int) Span {
	if i < 0 || j > len(s.hashes) || i > j {
		return Span{}
	}
	return Span{hashes: s.hashes[i:j:j]}
}

// Last returns the hash of the span's last block, the parent of the span
// that follows it; ok is false for the zero Span.
func (s Span) Last() (hash uint64, ok bool) {
	if len(s.hashes) == 0 {
		return 0, false
	}
	return s.hashes[len(s.hashes)-1], true
}

// sink sends one message of three frames.
type sink interface {
	send(topic string, seq uint64, payload []byte) error
	close() error
}

// Publisher publishes KV-cache events. Its methods are safe for concurrent
// use and never block on the network; a nil *Publisher accepts every call
// and publishes nothing, so that callers need not check whether events
// are on.
type Publisher struct {
	topic      string
	hasher     *Hasher
	maxPending int
	sink       sink
	log        io.Writer
	addr       string

	mu      sync.Mutex
	pending [][]byte
	lost    bool // a batch was dropped: start the next with AllBlocksCleared
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	batches, events, dropped, sendErrors atomic.Uint64
}

// Listen binds a ZeroMQ PUB socket at cfg.Endpoint and starts publishing.
func Listen(cfg Config) (*Publisher, error) {
	if !strings.HasPrefix(cfg.Endpoint, "tcp://") && !strings.HasPrefix(cfg.Endpoint, "ipc://") {
		return nil, fmt.Errorf("kvevents: endpoint %q: want tcp://HOST:PORT (such as %s) or ipc://PATH", cfg.Endpoint, DefaultEndpoint)
	}
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	logger := log.New(io.Discard, "", 0)
	if cfg.Log != nil {
		logger = log.New(cfg.Log, "kvevents: zmq4: ", 0)
	}
	sock := zmq4.NewPub(context.Background(), zmq4.WithLogger(logger))
	if err := sock.SetOption(zmq4.OptionHWM, DefaultHighWaterMark); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: setting the high-water mark: %w", err)
	}
	if err := sock.Listen(cfg.Endpoint); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: binding %s: %w", cfg.Endpoint, err)
	}
	p, err := newPublisher(cfg, zmqSink{sock})
	if err != nil {
		sock.Close()
		return nil, err
	}
	if a := sock.Addr(); a != nil {
		p.addr = a.String()
	}
	return p, nil
}

// validate checks cfg and fills its defaults.
func validate(cfg *Config) error {
	if cfg.BlockSize <= 0 {
		return fmt.Errorf("kvevents: block size must be positive, got %d", cfg.BlockSize)
	}
	if cfg.MaxPending < 0 {
		return fmt.Errorf("kvevents: max pending must not be negative, got %d", cfg.MaxPending)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.Model == "" {
		return errors.New("kvevents: no model name")
	}
	if cfg.Topic == "" {
		return errors.New("kvevents: no topic")
	}
	return nil
}

// newPublisher starts a publisher over a sink.
func newPublisher(cfg Config, s sink) (*Publisher, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	h, err := NewHasher(cfg.HashSeed, cfg.Model, cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		topic: cfg.Topic, hasher: h, maxPending: cfg.MaxPending, sink: s, log: cfg.Log,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go p.run()
	return p, nil
}

// Addr returns the address the socket listens on ("" for a nil
// Publisher).
func (p *Publisher) Addr() string {
	if p == nil {
		return ""
	}
	return p.addr
}

// Topic returns the topic of the publisher's messages.
func (p *Publisher) Topic() string {
	if p == nil {
		return ""
	}
	return p.topic
}

// Hasher returns the publisher's block hasher (nil for a nil Publisher).
func (p *Publisher) Hasher() *Hasher {
	if p == nil {
		return nil
	}
	return p.hasher
}

// SpanStored announces that the engine can now resume a prompt after
// tokens, which follow the span parent (the zero Span at a prompt's
// start): one BlockStored of tokens' blocks, its parent parent's last
// block. len(tokens) must be a multiple of the block size. It returns the
// new span, to be passed as the parent of the next one and to SpanRemoved.
// The tokens are encoded before it returns; the caller keeps the slice.
func (p *Publisher) SpanStored(parent Span, tokens []int) (Span, error) {
	return p.SpanStoredExtra(parent, tokens, nil)
}

// SpanStoredExtra is SpanStored for tokens whose blocks may hold
// multimodal items (images): extra has one entry per block, the MMKeys of
// the items whose tokens fall in it (nil for a block holding none; see
// MMExtraKeys), or is nil. tokens are the real token ids (an image's
// placeholder pads); the blocks holding items are hashed with their keys
// (Hasher.BlocksExtra) and the event carries them as vLLM's extra_keys.
// Without any key the event is SpanStored's, byte for byte.
func (p *Publisher) SpanStoredExtra(parent Span, tokens []int, extra [][]MMKey) (Span, error) {
	return p.SpanStoredAttrs(parent, tokens, Attrs{Extra: extra})
}

// SpanStoredAttrs is SpanStored with the event's optional fields: the
// medium that holds the span and the blocks' multimodal keys (see
// SpanStoredExtra). The block hashes do not depend on the medium: one
// span stored on several media has the same hashes on each.
func (p *Publisher) SpanStoredAttrs(parent Span, tokens []int, a Attrs) (Span, error) {
	if p == nil {
		return Span{}, nil
	}
	if len(tokens) == 0 {
		return Span{}, errors.New("kvevents: a stored span needs tokens")
	}
	prev, hasParent := parent.Last()
	from := prev
	if !hasParent {
		from = p.hasher.Root()
		if a.LoRAName != "" {
			from = p.hasher.RootFor(a.LoRAName)
		}
	}
	if !hasExtra(a.Extra) {
		a.Extra = nil
	}
	hashes, err := p.hasher.BlocksExtra(make([]uint64, 0, len(tokens)/p.hasher.BlockSize()), from, tokens, a.Extra)
	if err != nil {
		return Span{}, err
	}
	p.enqueue(blockStored(hashes, prev, hasParent, tokens, p.hasher.BlockSize(), a))
	return Span{hashes: hashes}, nil
}

// SpanRemoved announces that the engine can no longer resume at the end of
// s (its snapshot was evicted): one BlockRemoved of its blocks.
func (p *Publisher) SpanRemoved(s Span) { p.SpanRemovedAttrs(s, Attrs{}) }

// SpanRemovedAttrs is SpanRemoved from one medium (a.Medium; "" is the
// router's default, MediumGPU): the blocks stay wherever else they were
// stored. Only the medium of a applies to a removal.
func (p *Publisher) SpanRemovedAttrs(s Span, a Attrs) {
	if p == nil || len(s.hashes) == 0 {
		return
	}
	p.enqueue(blockRemoved(s.hashes, a.Medium))
}

// AllCleared announces that the engine holds no cached prefix (at start,
// when draining, after the cache was emptied): one AllBlocksCleared.
func (p *Publisher) AllCleared() {
	if p == nil {
		return
	}
	p.enqueue(allBlocksCleared())
}

// enqueue adds an encoded event to the pending batch, dropping the batch
// if it is full.
func (p *Publisher) enqueue(ev []byte) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if len(p.pending) >= p.maxPending {
		p.pending = p.pending[:0]
		p.lost = true
		p.dropped.Add(1)
	}
	p.pending = append(p.pending, ev)
	select { // under mu: Close closes wake under it
	case p.wake <- struct{}{}:
	default:
	}
	p.mu.Unlock()
}

// Stats returns the publisher's counters (zero for a nil Publisher).
func (p *Publisher) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Batches: p.batches.Load(), Events: p.events.Load(), DroppedBatches: p.dropped.Load(), SendErrors: p.sendErrors.Load()}
}

// run sends the pending events as one batch whenever there are some,
// until Close.
func (p *Publisher) run() {
	defer close(p.done)
	var seq uint64
	for {
		_, open := <-p.wake
		for {
			p.mu.Lock()
			batch, lost := p.pending, p.lost
			p.pending, p.lost = nil, false
			p.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if lost {
				batch = append([][]byte{allBlocksCleared()}, batch...)
			}
			ts := float64(time.Now().UnixNano()) / 1e9
			if err := p.sink.send(p.topic, seq, eventBatch(ts, batch)); err != nil {
				p.sendErrors.Add(1)
				p.mu.Lock()
				p.lost = true
				p.mu.Unlock()
				if p.log != nil {
					fmt.Fprintf(p.log, "kvevents: sending batch %d: %v\n", seq, err)
				}
				continue
			}
			seq++
			p.batches.Add(1)
			p.events.Add(uint64(len(batch)))
		}
		if !open {
			return
		}
	}
}

// Close sends what is pending, then closes the socket. Later calls publish
// nothing.
func (p *Publisher) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	close(p.wake)
	p.mu.Unlock()
	<-p.done
	return p.sink.close()
}

// zmqSink sends over a ZeroMQ socket.
type zmqSink struct{ sock zmq4.Socket }

func (z zmqSink) send(topic string, seq uint64, payload []byte) error {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return z.sock.SendMulti(zmq4.NewMsgFrom([]byte(topic), s[:], payload))
}

func (z zmqSink) close() error { return z.sock.Close() }
