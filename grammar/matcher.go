package grammar

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"github.com/govinfer/govinfer/grammar/regex"
	"github.com/govinfer/govinfer/jsonconstraint"
)

// Matcher follows one generation under a Grammar, over a vocabulary. It is
// not safe for concurrent use; Clone gives an independent copy.
type Matcher struct {
	g        *Grammar
	v        *jsonconstraint.Vocab
	s        State
	finished bool // an end-of-sequence token was accepted
}

// NewMatcher starts a generation.
func (g *Grammar) NewMatcher(v *jsonconstraint.Vocab) *Matcher {
	return &Matcher{g: g, v: v, s: g.start}
}

// Clone returns an independent copy at the same point.
func (m *Matcher) Clone() *Matcher { c := *m; return &c }

// State returns the grammar state the output so far leads to.
func (m *Matcher) State() State { return m.s }

// Done reports whether the output so far is complete under the grammar, so
// that an end-of-sequence token is allowed.
func (m *Matcher) Done() bool { return m.g.Complete(m.s) }

// Finished reports whether an end-of-sequence token was accepted.
func (m *Matcher) Finished() bool { return m.finished }

// CanContinue reports whether some byte may still follow.
func (m *Matcher) CanContinue() bool { return m.g.CanContinue(m.s) }

// AcceptBytes advances past text; false (m unchanged) if the grammar does
// not allow it.
func (m *Matcher) AcceptBytes(text []byte) bool {
	if m.finished {
		return false
	}
	s := m.g.Run(m.s, text)
	if s == Dead {
		return false
	}
	m.s = s
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

// key encodes a thread set for interning.
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
	return m.g.Mask(m.v, m.s)
}

// Mask returns the tokens of v allowed in state s as a bit set (shared:
// do not modify), with the end-of-sequence ids when s is complete. Masks
// are cached by state.
func (g *Grammar) Mask(v *jsonconstraint.Vocab, s State) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maskOf != any(v) {
		g.masks, g.threadMasks, g.infos, g.maskOf = nil, nil, nil, v
	}
	if mask, ok := g.masks[s]; ok {
		return mask
	}
	mask := make([]uint64, v.Words())
	if s >= 0 {
		step := func(st *State, b byte) bool {
			*st = g.stepLocked(*st, b)
			return *st >= 0
		}
		// The mask of a set of threads is the union of each thread's:
		// the tokens its terminal reads whole (precomputed per terminal
		// state), and those among its candidates (tokens that leave the
		// terminal after an accepting prefix) the grammar accepts from
		// the thread alone. Leaving before the first byte needs no
		// check: a thread at an accepting state always has its
		// continuation's threads beside it.
		th := g.sets[s]
		for _, t := range th {
			if t.pos < 0 {
				continue
			}
			in := g.info(v, g.elemTerm[t.pos], t.dfa)
			if in.cand.Empty() {
				for w, x := range in.stay {
					mask[w] |= x
				}
				continue
			}
			// A thread's own mask is kept: the thread recurs in other
			// states (the same terminal and stack beside other threads).
			one := s
			if len(th) > 1 {
				if one = g.intern([]thread{t}); one < 0 {
					continue
				}
			}
			tm, ok := g.threadMasks[one]
			if !ok {
				tm = slices.Clone(in.stay)
				jsonconstraint.WalkExits(in.cand, one, step, g.stateLoops, tm)
				if g.threadMasks == nil || len(g.threadMasks) >= maskCache {
					g.threadMasks = make(map[State][]uint64, maskCache)
				}
				g.threadMasks[one] = tm
			}
			for w, x := range tm {
				mask[w] |= x
			}
		}
		if complete(g.sets[s]) {
			v.SetEOS(mask)
		}
	}
	if g.masks == nil || len(g.masks) >= maskCache {
		g.masks = make(map[State][]uint64, maskCache)
	}
	g.masks[s] = mask
	return mask
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

// termInfo is what a terminal state contributes to masks: stay, the
// tokens the terminal's DFA reads whole from it, and cand, the tokens it
// refuses after passing an accepting state (which may leave the terminal
// there and go on in the grammar).
type termInfo struct {
	stay []uint64
	cand jsonconstraint.Exits
}

// maxInfos bounds the terminal states whose token sets a grammar keeps.
const maxInfos = 256

// info returns the token sets of terminal term at DFA state dfa over v.
// g.mu is held.
func (g *Grammar) info(v *jsonconstraint.Vocab, term, dfa int32) *termInfo {
	k := [2]int32{term, dfa}
	if in, ok := g.infos[k]; ok {
		return in
	}
	d := g.terms[term]
	in := &termInfo{stay: make([]uint64, v.Words())}
	in.cand = jsonconstraint.SplitDFA(v.All(), d, dfa, nil, in.stay)
	if g.infos == nil || len(g.infos) >= maxInfos {
		g.infos = make(map[[2]int32]*termInfo)
	}
	g.infos[k] = in
	return in
}

// stateLoop is what a walk needs to take whole a subtree of tokens that
// cannot change a state: the bytes that lead it back to itself, and
// whether every non-ASCII character does.
type stateLoop struct {
	bytes [4]uint64
	chars bool
}

// maxLoops bounds the states whose loops a grammar keeps.
const maxLoops = 4096

// stateLoops returns the bytes that lead state *s back to itself and
// whether every non-ASCII character does (for jsonconstraint.WalkExits),
// computed a byte class at a time the first time. g.mu is held.
func (g *Grammar) stateLoops(s *State) (*[4]uint64, bool) {
	if *s < 0 {
		return nil, false
	}
	if l, ok := g.loops[*s]; ok {
		return &l.bytes, l.chars
	}
	l := &stateLoop{}
	for c, b := range g.classRep {
		if g.stepLocked(*s, b) == *s {
			for k, w := range g.classBytes[c] {
				l.bytes[k] |= w
			}
		}
	}
	l.chars = g.readsEveryChar(*s)
	if g.loops == nil || len(g.loops) >= maxLoops {
		g.loops = make(map[State]*stateLoop)
	}
	g.loops[*s] = l
	return &l.bytes, l.chars
}

// readsEveryChar reports whether every non-ASCII character (valid UTF-8,
// surrogates excluded) leads state s back to itself through live states.
// g.mu is held.
func (g *Grammar) readsEveryChar(s State) bool {
	return regex.ReadsEveryChar(s, func(b byte) uint8 { return g.classOf[b] }, g.stepLocked)
}
