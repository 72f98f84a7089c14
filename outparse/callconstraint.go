package outparse

import (
	"fmt"

	"github.com/govinfer/govinfer/jsonconstraint"
)

// DefaultThinkingBudget is the most reasoning tokens before a forced call
// when the request sets no budget: the reasoning is then closed and the
// call begins (and at most half of the request's tokens).
const DefaultThinkingBudget = 512

// maskCacheSize bounds the masks a CallConstraint remembers.
const maskCacheSize = 32

// CallConstraint follows one generation under a CallGrammar; it is the
// logit processor of a request (Process masks, Accept advances). It also
// keeps two budgets:
//   - thinking: once the reasoning has taken its budget of tokens, the
//     text "\n</think>" is forced (then, for a forced call, the call);
//   - the request's: once what finishes the call in progress (its
//     completion: the value being written ended, the missing required
//     parameters given their smallest values, the call closed) no longer
//     fits comfortably in the tokens left, exactly that is forced, so a
//     constrained call always ends within max_tokens.
//
// It is not safe for concurrent use.
type CallConstraint struct {
	g           *CallGrammar
	s           callState
	maxTokens   int
	generated   int
	thinkBudget int
	thought     int                   // tokens generated while reasoning
	forced      jsonconstraint.Forced // what the next tokens must spell
	final       bool                  // the request's budget forced the completion
	cache       map[callState][]uint64
	content     *jsonconstraint.Masker // the masks of a JSON answer
}

// NewConstraint starts a generation of at most maxTokens tokens under g.
// thinkBudget bounds its reasoning (0: no bound; see DefaultThinkingBudget
// for forced calls).
func (g *CallGrammar) NewConstraint(maxTokens, thinkBudget int) *CallConstraint {
	c := &CallConstraint{g: g, s: g.start(), maxTokens: maxTokens, thinkBudget: thinkBudget}
	if g.contentJSON != nil {
		c.content = jsonconstraint.NewMasker(g.contentJSON, g.v)
	}
	return c
}

// Clone returns an independent copy of c at the same point (speculative
// decoding checks drafts on a copy); the two share the cache of masks,
// which depends on the state alone.
func (c *CallConstraint) Clone() *CallConstraint {
	d := *c
	return &d
}

// Process masks the logits of the tokens that cannot come next.
func (c *CallConstraint) Process(logits []float32) {
	c.plan()
	c.g.v.MaskLogits(c.mask(), logits)
}

// plan starts forcing when a budget requires it.
func (c *CallConstraint) plan() {
	if !c.forced.Done() || c.final {
		return
	}
	var close []byte
	if c.s.phase == phThink && c.thinkBudget > 0 && c.thought >= c.thinkBudget {
		close = []byte("\n" + thinkClose)
		switch {
		case c.g.force:
			close = append(close, literals[litAfterThink].text...)
		case c.g.content():
			close = append(close, literals[litAfterThinkContent].text...)
		default:
			close = append(close, afterThink...)
		}
	}
	s := c.s
	for _, b := range close {
		c.g.step(&s, b)
	}
	comp := append(close, c.g.completion(s)...)
	all := c.g.v.Force(comp, c.g.cv.encode)
	if len(comp) > len(close) && c.maxTokens-c.generated <= all.Tokens()+1+c.g.margin {
		c.forced, c.final = all, true
		return
	}
	c.forced = c.g.v.Force(close, c.g.cv.encode)
}

// mask returns the allowed next tokens as a bit set.
func (c *CallConstraint) mask() []uint64 {
	v := c.g.v
	m := make([]uint64, v.Words())
	if !c.forced.Done() {
		c.forced.Mask(v, m)
		return m
	}
	if cached, ok := c.cache[c.s]; ok {
		return cached
	}
	g, s, cv := c.g, c.s, c.g.cv
	step := func(st *callState, b byte) bool { return g.step(st, b) }
	switch {
	case s.phase == phEnd:
	case s.phase == phContent && s.pos < 0:
		// Past the point where a call could open: the answer's own
		// masks (its end of sequence included).
		if g.contentGram != nil {
			copy(m, g.contentGram.Mask(v, s.gs))
		} else {
			copy(m, c.content.Mask(&s.json))
		}
	case s.phase == phFree && !g.watch:
		copy(m, cv.all)
	// (A raw value under a grammar has no text rule, which Boundary
	// reads: the grammar is tested first.)
	case (s.phase == phThink || s.phase == phFree || s.phase == phFreeCall) && s.ac == 0,
		s.phase == phRaw && s.ac == 0 && s.pos == 0 && !s.dead && g.tools[s.tool].params[s.param].gram == nil && s.text.Boundary():
		// Tokens without '<' cannot complete a tag from here, and a raw
		// value takes any text: only the others need the automaton.
		if s.phase == phRaw {
			copy(m, cv.rawStay)
		} else {
			copy(m, cv.stay)
		}
		jsonconstraint.Walk(cv.lt, s, step, m)
	default:
		jsonconstraint.Walk(v.All(), s, step, m)
	}
	if c.eosAllowed() {
		v.SetEOS(m)
	}
	if c.cache == nil || len(c.cache) >= maskCacheSize {
		c.cache = make(map[callState][]uint64, maskCacheSize)
	}
	c.cache[c.s] = m
	return m
}

// eosAllowed reports whether the turn may end here: after a forced call,
// or outside a constrained call when none is forced.
func (c *CallConstraint) eosAllowed() bool {
	if !c.forced.Done() {
		return false
	}
	switch c.s.phase {
	case phEnd:
		return true
	case phAfter:
		return c.s.pos == 0
	case phThink, phFree, phFreeCall:
		return !c.g.force && (c.s.phase != phFreeCall || !c.g.content())
	case phContent:
		return c.g.contentComplete(&c.s)
	}
	return false
}

// Accept advances past the sampled token; it fails on a token Process
// ruled out.
func (c *CallConstraint) Accept(token int) error {
	v := c.g.v
	if v.IsEOS(token) {
		if !c.eosAllowed() {
			return fmt.Errorf("outparse: end of sequence in the middle of a tool call")
		}
		return nil
	}
	tb := v.TokenBytes(token)
	if len(tb) == 0 {
		return fmt.Errorf("outparse: token %d is not allowed in a constrained tool call", token)
	}
	forced := c.forced
	if !forced.Done() {
		if err := forced.Accept(v, token); err != nil {
			return fmt.Errorf("outparse: %w", err)
		}
	}
	thinking := c.s.phase == phThink
	s := c.s
	for i, b := range tb {
		if !c.g.step(&s, b) {
			return fmt.Errorf("outparse: token %d (%q) breaks the tool call at its byte %d", token, tb, i)
		}
	}
	c.s, c.forced = s, forced
	c.generated++
	if thinking {
		c.thought++
	}
	return nil
}
