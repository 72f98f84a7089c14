package model

import (
	"context"
	"errors"
	"fmt"

	"github.com/govinfer/govinfer/compute"
)

// A sequence's state at a position is what resuming it there needs: the
// keys and values of every earlier position in each attention layer, and
// each Gated DeltaNet layer's convolution window and recurrent state at the
// position. KVBlock and RecurrentState are copies of those two parts, made
// on the backend (no host round trip), so that a prefix cache can keep a
// prompt's state and start a new sequence from it with Restore instead of
// prefilling the prefix again. Prefill is bitwise independent of cuts at
// multiples of 64 tokens (TestPrefillCutsExact), so a sequence restored at
// such a position continues exactly as the one it was copied from.

// KVBlock holds the keys and values of positions [Start, Start+Len) of every
// attention layer, copied from a sequence, in the model's KV cache type.
// Free releases it.
type KVBlock struct {
	m        *Model
	buf      compute.Buffer // [attention layer][keys | values][Len rows of the cache]
	start, n int
}

// Start returns the first position the block holds.
func (b *KVBlock) Start() int { return b.start }

// Len returns the number of positions the block holds.
func (b *KVBlock) Len() int { return b.n }

// Bytes returns the memory the block occupies.
func (b *KVBlock) Bytes() int64 { return int64(b.n) * b.m.KVBytesPerToken() }

// Free releases the block's memory. It is safe to call more than once.
func (b *KVBlock) Free() {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	if b.buf != nil {
		b.m.be.Free(b.buf)
		b.buf = nil
	}
}

// RecurrentState holds every Gated DeltaNet layer's convolution window and
// recurrent state (float32, as the checkpoint's mamba_ssm_dtype asks) of a
// sequence at position Pos. Free releases it.
type RecurrentState struct {
	m     *Model
	buf   compute.Buffer // [linear layer][conv window | recurrent state]
	pos   int
	delta int       // the sequence's rope delta (Sequence.SetRopeDelta)
	src   *Sequence // the sequence it was copied from (Sequence.Rewind)
}

// Pos returns the position (tokens consumed) the state belongs to.
func (r *RecurrentState) Pos() int { return r.pos }

// RopeDelta returns the rope delta of the sequence the state was copied
// from (Sequence.SetRopeDelta), which Restore gives the restored sequence.
func (r *RecurrentState) RopeDelta() int { return r.delta }

// Bytes returns the memory the state occupies.
func (r *RecurrentState) Bytes() int64 { return r.m.RecurrentBytes() }

// Free releases the state's memory. It is safe to call more than once.
func (r *RecurrentState) Free() {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.buf != nil {
		r.m.be.Free(r.buf)
		r.buf = nil
	}
}

// kvType returns the element type of the KV caches.
func (m *Model) kvType() compute.DType {
	if m.kvDType == 0 {
		return compute.F32
	}
	return m.kvDType
}

// KVCacheType returns the element type of the models' KV caches
// (Options.KVCacheType).
func (m *Model) KVCacheType() compute.DType { return m.kvType() }

// kvWidth returns the elements of one position of one attention layer's
// key (or value) cache.
func (m *Model) kvWidth() int { return m.cfg.NumKVHeads * m.cfg.HeadDim }

// kvSlots returns the float32 slots of tokens positions of one key (or
// value) cache: 16-bit types pack two elements per slot
// (compute.Attention.CacheType).
func (m *Model) kvSlots(tokens int) int {
	return tokens * m.kvWidth() * m.kvType().Size() / 4
}

// attentionLayers returns the number of full-attention layers.
func (m *Model) attentionLayers() int {
	n := 0
	for _, t := range m.cfg.LayerTypes {
		if t == FullAttention {
			n++
		}
	}
	return n
}

// recurrentFloats returns the float32 elements of one linear layer's conv
// window plus recurrent state.
func (m *Model) recurrentFloats() int {
	c := m.cfg
	return (c.LinearConvKernel-1)*c.ConvDim() + c.LinearNumValueHeads*c.LinearKeyHeadDim*c.LinearValueHeadDim
}

// KVBytesPerToken returns the KV-cache memory of one position over all
// attention layers (keys and values), in the model's KV cache type.
func (m *Model) KVBytesPerToken() int64 {
	return int64(m.attentionLayers()) * 2 * int64(m.kvSlots(1)) * 4
}

// RecurrentBytes returns the memory of a sequence's Gated DeltaNet state:
// every linear layer's conv window and recurrent state, whatever its
// length.
func (m *Model) RecurrentBytes() int64 {
	return int64(len(m.cfg.LayerTypes)-m.attentionLayers()) * int64(m.recurrentFloats()) * 4
}

// SequenceBytes returns the memory of a sequence whose KV caches hold
// tokens positions: RecurrentBytes plus tokens times KVBytesPerToken. A
// sequence reserved with Reserve(tokens) occupies exactly that (see
// Sequence.StateBytes).
func (m *Model) SequenceBytes(tokens int) int64 {
	return m.RecurrentBytes() + int64(tokens)*m.KVBytesPerToken()
}

// Reserve sizes the sequence's KV caches to hold exactly tokens positions
// (when they hold fewer), so that the sequence never allocates during a
// step while it stays within them. A sequence grows its caches by itself
// otherwise, doubling their size.
func (s *Sequence) Reserve(tokens int) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if tokens > s.m.cfg.MaxContext() {
		return fmt.Errorf("model: reserving %d tokens exceeds the context of %d", tokens, s.m.cfg.MaxContext())
	}
	return s.grow(tokens)
}

// usable returns an error when s cannot be stepped or copied.
func (s *Sequence) usable() error {
	switch {
	case s.closed:
		return errors.New("model: sequence is closed")
	case s.broken != nil:
		return fmt.Errorf("model: sequence unusable after an earlier error: %w", s.broken)
	}
	return nil
}

// SaveKV copies the keys and values of positions [start, start+n) of every
// attention layer into a new block. The positions must have been consumed.
func (s *Sequence) SaveKV(start, n int) (*KVBlock, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if start < 0 || n <= 0 || start+n > s.n {
		return nil, fmt.Errorf("model: saving KV of positions [%d, %d) of a sequence of %d tokens", start, start+n, s.n)
	}
	per := m.kvSlots(n)
	blk := &KVBlock{m: m, start: start, n: n}
	if size := 2 * m.attentionLayers() * per; size > 0 {
		var err error
		if blk.buf, err = m.be.NewBuffer(size); err != nil {
			return nil, fmt.Errorf("model: allocating a KV block of %d tokens: %w", n, err)
		}
	}
	off := 0
	for l, t := range m.cfg.LayerTypes {
		if t != FullAttention {
			continue
		}
		m.be.Copy(blk.buf, off, s.kc[l], m.kvSlots(start), per)
		m.be.Copy(blk.buf, off+per, s.vc[l], m.kvSlots(start), per)
		off += 2 * per
	}
	return blk, nil
}

// SaveRecurrent copies the sequence's Gated DeltaNet state (every linear
// layer's conv window and recurrent state) at its current position.
func (s *Sequence) SaveRecurrent() (*RecurrentState, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	rs := &RecurrentState{m: m, pos: s.n, delta: s.ropeDelta, src: s}
	if size := m.RecurrentBytes() / 4; size > 0 {
		var err error
		if rs.buf, err = m.be.NewBuffer(int(size)); err != nil {
			return nil, fmt.Errorf("model: allocating a recurrent state: %w", err)
		}
	}
	off := 0
	for l, t := range m.cfg.LayerTypes {
		if t != LinearAttention {
			continue
		}
		nc, nr := s.conv[l].Len(), s.rec[l].Len()
		m.be.Copy(rs.buf, off, s.conv[l], 0, nc)
		m.be.Copy(rs.buf, off+nc, s.rec[l], 0, nr)
		off += nc + nr
	}
	return rs, nil
}

// Restore sets an empty sequence to the state of another at position
// rs.Pos(): blocks must hold the keys and values of positions [0, rs.Pos())
// in order (each starting where the previous ends), copied from sequences
// of the same model that agree on those positions. The sequence then
// continues from rs.Pos() exactly as the one the state was copied from,
// with its rope delta (Sequence.SetRopeDelta).
func (s *Sequence) Restore(blocks []*KVBlock, rs *RecurrentState) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if s.n != 0 {
		return fmt.Errorf("model: restoring into a sequence that has consumed %d tokens", s.n)
	}
	if rs == nil || rs.m != m || (rs.buf == nil && m.RecurrentBytes() > 0) {
		return errors.New("model: restoring from a missing or freed recurrent state")
	}
	pos := 0
	for i, b := range blocks {
		if b == nil || b.m != m || (b.buf == nil && m.KVBytesPerToken() > 0) {
			return fmt.Errorf("model: restoring from a missing or freed KV block %d", i)
		}
		if b.start != pos {
			return fmt.Errorf("model: KV block %d starts at %d, want %d", i, b.start, pos)
		}
		pos += b.n
	}
	if pos != rs.pos {
		return fmt.Errorf("model: KV blocks cover %d positions, the recurrent state is at %d", pos, rs.pos)
	}
	if err := s.grow(pos); err != nil {
		return err
	}
	for _, b := range blocks {
		per := m.kvSlots(b.n)
		off := 0
		for l, t := range m.cfg.LayerTypes {
			if t != FullAttention {
				continue
			}
			m.be.Copy(s.kc[l], m.kvSlots(b.start), b.buf, off, per)
			m.be.Copy(s.vc[l], m.kvSlots(b.start), b.buf, off+per, per)
			off += 2 * per
		}
	}
	off := 0
	for l, t := range m.cfg.LayerTypes {
		if t != LinearAttention {
			continue
		}
		nc, nr := s.conv[l].Len(), s.rec[l].Len()
		m.be.Copy(s.conv[l], 0, rs.buf, off, nc)
		m.be.Copy(s.rec[l], 0, rs.buf, off+nc, nr)
		off += nc + nr
	}
	s.n = pos
	s.ropeDelta = rs.delta
	return nil
}

// KV blocks and recurrent states leave the backend as float32 slots and
// come back from them unchanged (a prefix cache's disk tier stores them):
// the slots of a KV block are its buffer, 16-bit cache types two elements
// to a slot, so a block read back holds the very bits it was saved with.

// KVBlockFloats returns the float32 slots of a KV block of n positions:
// the length of KVBlock.Floats and of NewKVBlock's data.
func (m *Model) KVBlockFloats(n int) int { return 2 * m.attentionLayers() * m.kvSlots(n) }

// RecurrentFloats returns the float32 slots of a recurrent state: the
// length of RecurrentState.Floats and of NewRecurrentState's data.
func (m *Model) RecurrentFloats() int { return int(m.RecurrentBytes() / 4) }

// Floats returns a copy of the block's contents (KVBlockFloats(Len())
// slots).
func (b *KVBlock) Floats(ctx context.Context) ([]float32, error) {
	m := b.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]float32, m.KVBlockFloats(b.n))
	if len(out) == 0 {
		return out, nil
	}
	if b.buf == nil {
		return nil, errors.New("model: reading a freed KV block")
	}
	if err := m.be.Download(ctx, out, b.buf, 0); err != nil {
		return nil, fmt.Errorf("model: reading a KV block: %w", err)
	}
	return out, nil
}

// NewKVBlock makes a KV block of positions [start, start+n) from the
// contents a KVBlock.Floats of this model returned.
func (m *Model) NewKVBlock(start, n int, data []float32) (*KVBlock, error) {
	if start < 0 || n <= 0 || len(data) != m.KVBlockFloats(n) {
		return nil, fmt.Errorf("model: a KV block of %d positions at %d from %d values, want %d", n, start, len(data), m.KVBlockFloats(n))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	blk := &KVBlock{m: m, start: start, n: n}
	if len(data) > 0 {
		var err error
		if blk.buf, err = m.be.NewBuffer(len(data)); err != nil {
			return nil, fmt.Errorf("model: allocating a KV block of %d tokens: %w", n, err)
		}
		if err := m.be.Upload(blk.buf, 0, data); err != nil {
			m.be.Free(blk.buf)
			return nil, fmt.Errorf("model: loading a KV block: %w", err)
		}
	}
	return blk, nil
}

// Floats returns a copy of the state's contents (RecurrentFloats slots).
func (r *RecurrentState) Floats(ctx context.Context) ([]float32, error) {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]float32, m.RecurrentFloats())
	if len(out) == 0 {
		return out, nil
	}
	if r.buf == nil {
		return nil, errors.New("model: reading a freed recurrent state")
	}
	if err := m.be.Download(ctx, out, r.buf, 0); err != nil {
		return nil, fmt.Errorf("model: reading a recurrent state: %w", err)
	}
	return out, nil
}

// NewRecurrentState makes the recurrent state of a sequence at position
// pos with rope delta delta from the contents a RecurrentState.Floats of
// this model returned.
func (m *Model) NewRecurrentState(pos, delta int, data []float32) (*RecurrentState, error) {
	if pos < 0 || len(data) != m.RecurrentFloats() {
		return nil, fmt.Errorf("model: a recurrent state at %d from %d values, want %d", pos, len(data), m.RecurrentFloats())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := &RecurrentState{m: m, pos: pos, delta: delta}
	if len(data) > 0 {
		var err error
		if rs.buf, err = m.be.NewBuffer(len(data)); err != nil {
			return nil, fmt.Errorf("model: allocating a recurrent state: %w", err)
		}
		if err := m.be.Upload(rs.buf, 0, data); err != nil {
			m.be.Free(rs.buf)
			return nil, fmt.Errorf("model: loading a recurrent state: %w", err)
		}
	}
	return rs, nil
}
