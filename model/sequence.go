package model

import (
	"fmt"

	"github.com/govinfer/govinfer/compute"
)

// minKVCapacity is the KV-cache capacity, in tokens, a sequence starts with;
// it doubles as the sequence grows.
const minKVCapacity = 256

// Sequence is the state of one conversation: for each Gated DeltaNet layer
// the convolution window and the recurrent state, for each attention layer
// the key/value cache. Sequences are not safe for concurrent use; Model.Step
// serialises the steps that update them.
type Sequence struct {
	m        *Model
	n        int              // tokens consumed so far
	conv     []compute.Buffer // per layer: [kernel-1, conv_dim] raw inputs (linear layers)
	rec      []compute.Buffer // per layer: [value heads, dk, dv] (linear layers)
	kc, vc   []compute.Buffer // per layer: [capacity, kv_heads*head_dim] in the KV cache type (attention layers)
	capacity int              // KV-cache capacity in tokens
	// ropeDelta is added to the cache index of tokens given without
	// 3-D positions (Input.Positions): Hugging Face's rope_deltas of a
	// prompt with images.
	ropeDelta int
	closed    bool
	broken    error // set when a step failed midway
	// adapters are the LoRA adapters its steps run with (SetAdapters).
	adapters []AdapterUse
}

// NewSequence returns an empty sequence.
func (m *Model) NewSequence() (*Sequence, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cfg
	s := &Sequence{
		m:    m,
		conv: make([]compute.Buffer, c.NumLayers),
		rec:  make([]compute.Buffer, c.NumLayers),
		kc:   make([]compute.Buffer, c.NumLayers),
		vc:   make([]compute.Buffer, c.NumLayers),
	}
	for l, t := range c.LayerTypes {
		if t != LinearAttention {
			continue
		}
		var err error
		if s.conv[l], err = m.be.NewBuffer((c.LinearConvKernel - 1) * c.ConvDim()); err == nil {
			s.rec[l], err = m.be.NewBuffer(c.LinearNumValueHeads * c.LinearKeyHeadDim * c.LinearValueHeadDim)
		}
		if err != nil {
			s.free()
			return nil, fmt.Errorf("model: allocating sequence state: %w", err)
		}
	}
	return s, nil
}

// Len returns the number of tokens the sequence has consumed.
func (s *Sequence) Len() int { return s.n }

// SetRopeDelta sets the offset between the cache index and the rotary
// position of the tokens fed without 3-D positions (Input.Positions):
// after a prompt with images, the token at cache index i has position
// i+delta in all three rows (vision.RopeIndex's ropeDelta). It is 0 for a
// new sequence; Restore sets it to the saved state's.
func (s *Sequence) SetRopeDelta(delta int) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.ropeDelta = delta
}

// RopeDelta returns the sequence's rope delta (SetRopeDelta).
func (s *Sequence) RopeDelta() int {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.ropeDelta
}

// Close frees the sequence's memory. It is safe to call more than once.
func (s *Sequence) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.free()
}

func (s *Sequence) free() {
	for _, bufs := range [][]compute.Buffer{s.conv, s.rec, s.kc, s.vc} {
		for i, b := range bufs {
			if b != nil {
				s.m.be.Free(b)
				bufs[i] = nil
			}
		}
	}
	s.releaseAdapters()
	s.closed = true
}

// StateBytes returns the memory the sequence's state occupies.
func (s *Sequence) StateBytes() int64 {
	var n int64
	for _, bufs := range [][]compute.Buffer{s.conv, s.rec, s.kc, s.vc} {
		for _, b := range bufs {
			if b != nil {
				n += int64(b.Len()) * 4
			}
		}
	}
	return n
}

// reserve grows the KV caches to hold at least n tokens, doubling their
// capacity. The caller holds the model lock.
func (s *Sequence) reserve(n int) error {
	if n <= s.capacity {
		return nil
	}
	capacity := max(s.capacity, minKVCapacity)
	for capacity < n {
		capacity *= 2
	}
	return s.grow(min(capacity, max(s.m.cfg.MaxContext(), n)))
}

// grow makes the KV caches hold exactly capacity tokens when they hold
// fewer, keeping their contents. The caller holds the model lock.
func (s *Sequence) grow(capacity int) error {
	if capacity <= s.capacity {
		return nil
	}
	m := s.m
	be := m.be
	for l, t := range m.cfg.LayerTypes {
		if t != FullAttention {
			continue
		}
		for _, cache := range []*compute.Buffer{&s.kc[l], &s.vc[l]} {
			nb, err := be.NewBuffer(m.kvSlots(capacity))
			if err != nil {
				return fmt.Errorf("model: growing KV cache to %d tokens: %w", capacity, err)
			}
			if *cache != nil {
				be.Copy(nb, 0, *cache, 0, m.kvSlots(s.n))
				be.Free(*cache)
			}
			*cache = nb
		}
	}
	s.capacity = capacity
	return nil
}
