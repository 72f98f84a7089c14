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

	// The budget Budget set for the current state (left is 0 when none
	// is set): the tokens left, the length of the completion, and the
	// tokenizer's encoding to force it with.
	left    int
	compLen int
	encode  func(string) []int

	cache    map[state][]uint64
	ar       arena
	walk     []state  // scratch: the state at each trie depth
	checkAr  arena    // scratch: the stack of one token checked for a budget
	filtered []uint64 // scratch: a mask less the tokens a budget rules out
}

// NewConstraint starts a constrained generation.
func NewConstraint(g *Grammar, v *Vocab) *Constraint {
	return &Constraint{g: g, v: v, s: initialState(g)}
}

// Clone returns an independent copy of c at the same point.
func (c *Constraint) Clone() *Constraint {
	return &Constraint{g: c.g, v: c.v, s: c.s, finished: c.finished, forced: c.forced, forcing: c.forcing,
		left: c.left, compLen: c.compLen, encode: c.encode}
}

// Completion returns the bytes that complete the document from here (see
// Acceptor.Completion).
func (c *Constraint) Completion() []byte {
	out, _ := c.s.completion()
	return out
}

// Budget makes the document end within tokens more tokens, the
// end-of-sequence token included. Call it before each mask with the tokens
// left; the guarantee holds when the budget starts above the completion
// of the empty document (Grammar.Minimal) by one.
//
// The constraint keeps the length of the completion from the current
// position (in bytes, which bounds its tokens), plus one for the
// end-of-sequence token, within the budget: the mask leaves out every
// token after which the completion would no longer fit in the tokens
// left. Once only the completion fits, it is forced (see Vocab.Force: with
// encode, the tokenizer's encoding, its tokens exactly; otherwise any
// tokens spelling it), then an end-of-sequence token.
func (c *Constraint) Budget(tokens int, encode func(string) []int) {
	if c.forcing || c.finished {
		return
	}
	out, ok := c.s.completion()
	if !ok {
		return
	}
	c.left, c.compLen, c.encode = max(tokens, 1), len(out), encode
	if tokens <= len(out)+1 {
		c.force(out)
	}
}

// force starts forcing the completion out.
func (c *Constraint) force(out []byte) {
	f := c.v.Force(out, c.encode)
	if f.Tokens() > len(out) {
		f = c.v.Force(out, nil)
	}
	c.forced, c.forcing = f, true
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
	c.left = 0
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
	m := c.stateMask()
	if c.left == 0 || c.forcing || c.finished {
		return m
	}
	return c.withinBudget(m)
}

// withinBudget returns m less the tokens after which the completion would
// not fit in the budget, or starts forcing the completion if no token is
// left. A token can lengthen the completion by at most the grammar's
// growth for each of its bytes that can open something, and for its
// start; only tokens that could break the budget by that bound are
// checked by running the automaton over them.
func (c *Constraint) withinBudget(m []uint64) []uint64 {
	slack := c.left - 2 - c.compLen // the growth the next token may bring
	g := c.g.growth()
	if slack >= (1+2*c.v.maxStructs)*g {
		return m
	}
	v := c.v
	l := c.s.lx
	inString := l.sub == strBody && (l.mode == lexString || c.s.freeKey()) && !c.s.patterned()
	if len(c.filtered) != len(m) {
		c.filtered = make([]uint64, len(m))
	}
	out := c.filtered
	copy(out, m)
	allowed := 0
	for w, word := range m {
		for z := word; z != 0; z &= z - 1 {
			id := w*64 + bits.TrailingZeros64(z)
			if v.isEOS[id] || inString && v.flat[w]&(1<<(id&63)) != 0 || (1+2*int(v.structs[id]))*g <= slack {
				allowed++
				continue
			}
			s := c.s
			c.checkAr.links = c.checkAr.links[:0]
			fits := true
			for _, b := range v.tokens[id] {
				if !s.step(b, &c.checkAr) {
					fits = false
					break
				}
			}
			if fits {
				after, ok := s.completion()
				fits = ok && len(after) <= c.compLen+slack
			}
			if fits {
				allowed++
			} else {
				out[w] &^= 1 << (id & 63)
			}
		}
	}
	if allowed == 0 {
		out, _ := c.s.completion()
		c.force(out)
		return c.stateMask()
	}
	return out
}

// stateMask returns the allowed tokens of the current state, forced ones
// included, before any budget.
func (c *Constraint) stateMask() []uint64 {
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
	if l := c.s.lx; c.s.patterned() && (l.sub == strBody || l.sub == strUTF8) {
		// Inside a string with a pattern: the tokens without a quote or
		// backslash that the pattern reads on (cached by its state),
		// and those with one, walked.
		copy(m, c.s.target().str.stay(v, l.dfa))
		c.walkTrie(&v.escaped, m)
	} else if l.sub == strBody && (l.mode == lexString || c.s.freeKey()) && !c.s.patterned() {
		switch {
		case l.mode == lexKey:
			copy(m, v.keyStay)
		case l.rule:
			copy(m, v.ruleStay)
			if r := c.s.target().str; r.maxLen >= 0 && int(uint32(r.maxLen)-l.cnt) < v.maxRuleChars {
				// Drop the tokens with more characters than are left.
				left := uint32(r.maxLen) - l.cnt
				if left < ruleUpToLen {
					copy(m, v.ruleUpTo[left])
					break
				}
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

// Masker computes the masks of a grammar's documents as Constraint does,
// for an automaton that reads the document as part of a larger output
// (an answer beside tool calls) and keeps its own Acceptor. Masks are
// cached by state. It is not safe for concurrent use.
type Masker struct{ c Constraint }

// NewMasker returns a Masker of g's documents over v.
func NewMasker(g *Grammar, v *Vocab) *Masker { return &Masker{c: Constraint{g: g, v: v}} }

// Mask returns the tokens that may follow the text a has read as a bit
// set (shared: do not modify), with v's end-of-sequence ids when the
// document is complete.
func (m *Masker) Mask(a *Acceptor) []uint64 {
	m.c.s = a.s
	return m.c.stateMask()
}

// freeKey reports whether the key being read is free: off the declared
// names, in an object without patternProperties, any key characters may
// follow.
func (s *state) freeKey() bool {
	return s.lx.mode == lexKey && s.lx.t < 0 && s.top.n.keyM == nil
}

// patterned reports whether the value being read is a string with a
// pattern: its tokens depend on the pattern's state, so the precomputed
// in-string sets do not apply.
func (s *state) patterned() bool {
	return s.lx.mode == lexString && s.lx.rule && s.target().str.pat != nil
}
