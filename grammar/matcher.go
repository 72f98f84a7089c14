package grammar

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/govinfer/govinfer/jsonconstraint"
)

// Matcher follows one generation under a Grammar, over a vocabulary. It is
// not safe for concurrent use; Clone gives an independent copy.
type Matcher struct {
	g        *Grammar
	v        *jsonconstraint.Vocab
	th       []thread
	finished bool // an end-of-sequence token was accepted

	bufs [][]thread // scratch of the trie walk, by depth
}

// NewMatcher starts a generation.
func (g *Grammar) NewMatcher(v *jsonconstraint.Vocab) *Matcher {
	return &Matcher{g: g, v: v, th: g.initial()}
}

// Clone returns an independent copy at the same point.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{g: m.g, v: m.v, th: m.th, finished: m.finished}
}

// Done reports whether the output so far is complete under the grammar, so
// that an end-of-sequence token is allowed.
func (m *Matcher) Done() bool { return complete(m.th) }

// Finished reports whether an end-of-sequence token was accepted.
func (m *Matcher) Finished() bool { return m.finished }

// CanContinue reports whether some byte may still follow.
func (m *Matcher) CanContinue() bool {
	return len(m.th) > 1 || len(m.th) == 1 && m.th[0].pos >= 0
}

// AcceptBytes advances past text; false (m unchanged) if the grammar does
// not allow it.
func (m *Matcher) AcceptBytes(text []byte) bool {
	if m.finished {
		return false
	}
	th := m.th
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	for _, c := range text {
		if th = m.g.step(th, c, nil); len(th) == 0 {
			return false
		}
	}
	m.th = th
	return true
}

// Accept advances past a sampled token; it fails, leaving m unchanged, if
// the token cannot continue the output.
func (m *Matcher) Accept(token int) error {
	if m.finished {
		return fmt.Errorf("grammar: token %d after the end of the output", token)
	}
	if m.v.IsEOS(token) {
		if !m.Done() {
			return fmt.Errorf("grammar: end-of-sequence token %d before the grammar is complete", token)
		}
		m.finished = true
		return nil
	}
	t := m.v.TokenBytes(token)
	if len(t) == 0 {
		return fmt.Errorf("grammar: special token %d cannot be part of the output", token)
	}
	if !m.AcceptBytes(t) {
		return fmt.Errorf("grammar: token %d (%q) does not follow the grammar", token, t)
	}
	return nil
}

// key encodes a thread set for the mask cache.
func key(th []thread) string {
	buf := make([]byte, 12*len(th))
	for i, t := range th {
		binary.LittleEndian.PutUint32(buf[12*i:], uint32(t.pos))
		binary.LittleEndian.PutUint32(buf[12*i+4:], uint32(t.dfa))
		binary.LittleEndian.PutUint32(buf[12*i+8:], uint32(t.stack))
	}
	return string(buf)
}

// AllowedBits returns the tokens that may come next as a bit set over the
// vocabulary (end-of-sequence ids when the output is complete). The slice
// is shared: do not modify it.
func (m *Matcher) AllowedBits() []uint64 {
	if m.finished {
		return make([]uint64, m.v.Words())
	}
	k := key(m.th)
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maskOf != any(m.v) {
		g.masks, g.maskOf = nil, m.v
	}
	if mask, ok := g.masks[k]; ok {
		return mask
	}
	mask := make([]uint64, m.v.Words())
	m.walk(mask)
	if complete(m.th) {
		m.v.SetEOS(mask)
	}
	if g.masks == nil || len(g.masks) >= maskCache {
		g.masks = make(map[string][]uint64, maskCache)
	}
	g.masks[k] = mask
	return mask
}

// walkState is the state of the trie walk: the threads at a depth.
type walkState struct {
	th    []thread
	depth int
}

// walk adds to mask the tokens the threads accept. g.mu is held.
func (m *Matcher) walk(mask []uint64) {
	g := m.g
	step := func(s *walkState, c byte) bool {
		d := s.depth + 1
		for len(m.bufs) <= d {
			m.bufs = append(m.bufs, nil)
		}
		out := g.step(s.th, c, m.bufs[d][:0])
		m.bufs[d] = out
		s.th, s.depth = out, d
		return len(out) > 0
	}
	jsonconstraint.Walk(m.v.All(), walkState{th: m.th}, step, mask)
}

// ApplyMask sets the logits of the tokens that cannot come next to -Inf
// and returns how many remain allowed.
func (m *Matcher) ApplyMask(logits []float32) int {
	return m.v.MaskLogits(m.AllowedBits(), logits)
}

// Allowed returns how many tokens may come next.
func (m *Matcher) Allowed() int {
	n := 0
	for _, w := range m.AllowedBits() {
		n += bits.OnesCount64(w)
	}
	return n
}
