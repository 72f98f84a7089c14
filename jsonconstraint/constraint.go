package jsonconstraint

import (
	"fmt"
	"math"
	"math/bits"
)

// maskCacheSize bounds the masks a Constraint remembers. Inside a long
// string the state repeats token after token, so a few entries give most of
// the hits.
const maskCacheSize = 32

// Constraint follows one generation under a Grammar. It is not safe for
// concurrent use; Clone gives an independent copy.
type Constraint struct {
	g        *Grammar
	v        *Vocab
	s        state
	finished bool // an end-of-sequence token was accepted
	// forced, once Budget starts forcing, holds what remains of the
	// completion; forcing says whether it does.
	forced  Forced
	forcing bool

	cache map[state][]uint64
	ar    arena
	walk  []state // scratch: the state at each trie depth
}

// NewConstraint starts a constrained generation.
func NewConstraint(g *Grammar, v *Vocab) *Constraint {
	return &Constraint{g: g, v: v, s: initialState(g)}
}

// Clone returns an independent copy of c at the same point.
func (c *Constraint) Clone() *Constraint {
	return &Constraint{g: c.g, v: c.v, s: c.s, finished: c.finished, forced: c.forced, forcing: c.forcing}
}

// Completion returns the bytes that complete the document from here (see
// Acceptor.Completion).
func (c *Constraint) Completion() []byte {
	out, _ := c.s.completion()
	return out
}

// Budget makes the document end within tokens more tokens, the
// end-of-sequence token included: once the completion from the current
// position, plus the most one token can add to it, no longer fits, the
// constraint forces the completion (see Vocab.Force: with encode, the
// tokenizer's encoding, its tokens exactly; otherwise any tokens spelling
// it) and then an end-of-sequence token. Call it before each mask with the
// tokens left; the guarantee holds when the budget starts above the
// completion of an empty document.
func (c *Constraint) Budget(tokens int, encode func(string) []int) {
	if c.forcing || c.finished {
		return
	}
	out, ok := c.s.completion()
	if !ok {
		return
	}
	f := c.v.Force(out, encode)
	if tokens <= f.Tokens()+1+c.g.growth() {
		c.forced, c.forcing = f, true
	}
}

// Forcing reports whether Budget has started forcing the completion.
func (c *Constraint) Forcing() bool { return c.forcing }

// Done reports whether the output so far is a complete document, so that an
// end-of-sequence token is allowed.
func (c *Constraint) Done() bool {
	return c.s.complete()
}

// Finished reports whether an end-of-sequence token has been accepted.
func (c *Constraint) Finished() bool {
	return c.finished
}

// Accept advances past a sampled token. It fails, leaving c unchanged, if
// the token cannot continue the document.
func (c *Constraint) Accept(token int) error {
	if c.finished {
		return fmt.Errorf("jsonconstraint: token %d after the end of the document", token)
	}
	if token < 0 || token >= c.v.size {
		return fmt.Errorf("jsonconstraint: token %d outside the vocabulary of %d tokens", token, c.v.size)
	}
	if c.v.isEOS[token] {
		if !c.s.complete() {
			return fmt.Errorf("jsonconstraint: end-of-sequence token %d before the document is complete", token)
		}
		c.finished = true
		return nil
	}
	t := c.v.tokens[token]
	if len(t) == 0 {
		return fmt.Errorf("jsonconstraint: special token %d is not allowed in a JSON document", token)
	}
	f := c.forced
	if c.forcing {
		if err := f.Accept(c.v, token); err != nil {
			return err
		}
	}
	s := c.s
	for i, b := range t {
		if !s.step(b, nil) {
			return fmt.Errorf("jsonconstraint: token %d (%q) cannot continue the document at its byte %d", token, t, i)
		}
	}
	c.s, c.forced = s, f
	return nil
}

// ApplyMask sets the logits of the tokens that cannot come next to -Inf
// and returns how many remain allowed. Logits past the vocabulary's size
// (padding) are always masked. Zero means nothing can follow: the
// document is finished, or the vocabulary lacks a token the automaton
// needs.
func (c *Constraint) ApplyMask(logits []float32) int {
	return maskLogits(c.maskBits(), logits, c.v.size)
}

var negInf = float32(math.Inf(-1))

// AllowedBits returns the allowed next tokens as a bit set: token id is
// allowed when bits[id/64]&(1<<(id%64)) != 0. A sampler can use it to look
// at the allowed tokens only. The slice is shared: do not modify it, and do
// not keep it past the next call on c.
func (c *Constraint) AllowedBits() []uint64 {
	return c.maskBits()
}

// Allowed sets mask[id] to whether token id may come next, for the ids that
// fit in mask, and returns how many are allowed in all.
func (c *Constraint) Allowed(mask []bool) int {
	m := c.maskBits()
	allowed := 0
	for _, w := range m {
		allowed += bits.OnesCount64(w)
	}
	for i := range mask {
		mask[i] = i < c.v.size && m[i>>6]&(1<<(i&63)) != 0
	}
	return allowed
}

// walkTrie adds to m the tokens of tr that may follow c's state.
func (c *Constraint) walkTrie(tr *tokTrie, m []uint64) {
	if len(c.walk) < tr.maxDepth+1 {
		c.walk = make([]state, tr.maxDepth+1)
	}
	walk := c.walk
	c.ar.links = c.ar.links[:0]
	walk[0] = c.s
	for i := 0; i < len(tr.nodeByte); {
		d := tr.nodeDepth[i]
		walk[d] = walk[d-1]
		if !walk[d].step(tr.nodeByte[i], &c.ar) {
			i = int(tr.nodeSkip[i])
			continue
		}
		for _, id := range tr.ids[tr.idLo[i]:tr.idHi[i]] {
			m[id>>6] |= 1 << (id & 63)
		}
		i++
	}
}

// maskBits returns the allowed tokens as a bit set (shared with the cache:
// do not modify).
func (c *Constraint) maskBits() []uint64 {
	if m, ok := c.cache[c.s]; ok && !c.finished && !c.forcing {
		return m
	}
	v := c.v
	m := make([]uint64, (v.size+63)/64)
	if c.finished {
		return m
	}
	if c.forcing {
		if c.forced.Done() {
			v.SetEOS(m)
			return m
		}
		c.forced.Mask(v, m)
		return m
	}
	if l := c.s.lx; l.sub == strBody && (l.mode == lexString || l.mode == lexKey && l.t < 0) {
		switch {
		case l.mode == lexKey:
			copy(m, v.keyStay)
		case l.rule:
			copy(m, v.ruleStay)
			if r := c.s.target().str; r.maxLen >= 0 {
				// Drop the tokens with more characters than are left.
				left := uint32(r.maxLen) - l.cnt
				for w, word := range m {
					for z := word; z != 0; z &= z - 1 {
						id := w*64 + bits.TrailingZeros64(z)
						if uint32(v.ruleChars[id]) > left {
							m[w] &^= 1 << (id & 63)
						}
					}
				}
			}
		default:
			copy(m, v.strStay)
		}
		c.walkTrie(&v.quoted, m)
	} else {
		c.walkTrie(&v.all, m)
	}
	if c.s.complete() {
		for _, id := range v.eos {
			m[id>>6] |= 1 << (id & 63)
		}
	}
	if c.cache == nil || len(c.cache) >= maskCacheSize {
		c.cache = make(map[state][]uint64, maskCacheSize)
	}
	c.cache[c.s] = m
	return m
}
