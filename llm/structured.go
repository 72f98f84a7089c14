package llm

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/grammar/gbnf"
	"github.com/govinfer/govinfer/grammar/lark"
	"github.com/govinfer/govinfer/grammar/regex"
	"github.com/govinfer/govinfer/outparse"
)

// Structured constrains the output to a regular expression, a list of
// choices or a grammar: vLLM's structured_outputs (regex, choice, grammar)
// and llama-server's grammar. Exactly one of its fields is set.
type Structured struct {
	// Regex is a regular expression the whole output must match
	// (ECMAScript or Python syntax; see package grammar/regex).
	Regex string
	// Choice lists the strings the output must be exactly one of.
	Choice []string
	// GBNF is a llama.cpp grammar whose root rule the output must match.
	GBNF string
	// Lark is a Lark grammar whose start rule the output must match (a
	// Responses custom tool's format).
	Lark string
	// Field names the request field that set it, for errors
	// ("structured_outputs.regex", "grammar"); empty means the field's
	// kind ("regex", "choice", "grammar").
	Field string
}

// DefaultMaxGrammarBytes bounds a grammar's, pattern's or choice list's
// source unless Options.MaxGrammarBytes sets another bound.
const DefaultMaxGrammarBytes = 64 << 10

// structuredCache is a Model's compiled constraints, kept by content, and
// the bound on their sources (Options.MaxGrammarBytes).
type structuredCache struct {
	grammars lruGrammars
	maxBytes int
}

// limit returns the largest grammar source a request may send.
func (c *structuredCache) limit() int {
	if c.maxBytes <= 0 {
		return DefaultMaxGrammarBytes
	}
	return c.maxBytes
}

// field returns the request field s came from.
func (s *Structured) field() string {
	if s.Field != "" {
		return s.Field
	}
	switch {
	case s.Regex != "":
		return "regex"
	case s.Choice != nil:
		return "choice"
	case s.Lark != "":
		return "lark"
	}
	return "grammar"
}

// compileStructured compiles (or finds in the model's cache) a structured
// constraint.
func (lm *Model) compileStructured(s *Structured) (*grammar.Grammar, error) {
	param := s.field()
	set := 0
	for _, on := range []bool{s.Regex != "", s.Choice != nil, s.GBNF != "", s.Lark != ""} {
		if on {
			set++
		}
	}
	if set != 1 {
		return nil, paramErr(param, "%s: give exactly one of regex, choice or grammar", param)
	}
	kind, src := "regex", s.Regex
	switch {
	case s.Choice != nil:
		kind, src = "choice", strings.Join(s.Choice, "\x00")
	case s.GBNF != "":
		kind, src = "gbnf", s.GBNF
	case s.Lark != "":
		kind, src = "lark", s.Lark
	}
	if limit := lm.structured.limit(); len(src) > limit {
		return nil, paramErr(param, "%s is %d bytes; at most %d are allowed (--max-grammar-bytes)", param, len(src), limit)
	}
	key := kind + "\x01" + src
	if g := lm.structured.grammars.get(key); g != nil {
		return g, nil
	}
	var g *grammar.Grammar
	var err error
	switch kind {
	case "regex":
		g, err = grammar.Regex(s.Regex)
	case "choice":
		g, err = grammar.Choice(s.Choice)
	case "gbnf":
		g, err = gbnf.Parse(s.GBNF)
	case "lark":
		g, err = compileLark(s.Lark)
	}
	if err != nil {
		return nil, grammarErr(param, err)
	}
	lm.structured.grammars.put(key, g)
	return g, nil
}

// grammarErr is the parameter error of a constraint that does not
// compile, with the position where the parser says.
func grammarErr(param string, err error) *ParamError {
	var re *regex.Error
	var ge *grammar.Error
	switch {
	case errors.Is(err, regex.ErrTooComplex):
		return paramErr(param, "%s cannot be enforced: %v", param, err)
	case errors.As(err, &re) || errors.As(err, &ge):
		return paramErr(param, "invalid %s: %v", param, err)
	}
	return paramErr(param, "invalid %s: %v", param, err)
}

// grammarCacheSize bounds the compiled constraints kept by content.
const grammarCacheSize = 32

type lruEntry struct {
	g    *grammar.Grammar
	used uint64
}

// lruGrammars keeps compiled constraints by their source, so that a
// client sending the same grammar with every request (as Codex does)
// compiles it once; the least recently used goes first. The zero value is
// empty and ready.
type lruGrammars struct {
	mu    sync.Mutex
	m     map[string]*lruEntry
	clock uint64
}

func (c *lruGrammars) get(key string) *grammar.Grammar {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return nil
	}
	c.clock++
	e.used = c.clock
	return e.g
}

func (c *lruGrammars) put(key string, g *grammar.Grammar) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= grammarCacheSize {
		oldest, at := "", uint64(0)
		for k, e := range c.m {
			if oldest == "" || e.used < at {
				oldest, at = k, e.used
			}
		}
		delete(c.m, oldest)
	}
	c.clock++
	if c.m == nil {
		c.m = map[string]*lruEntry{}
	}
	c.m[key] = &lruEntry{g: g, used: c.clock}
}

// grammarProcessor masks the logits of tokens the grammar does not allow;
// it forks (engine.ForkingProcessor), so speculative drafts outside the
// grammar are dropped before verification.
type grammarProcessor struct{ m *grammar.Matcher }

func (p grammarProcessor) Process(logits []float32) { p.m.ApplyMask(logits) }

func (p grammarProcessor) Accept(token int) error { return p.m.Accept(token) }

// Fork returns a copy at the same point.
func (p grammarProcessor) Fork() engine.LogitProcessor { return grammarProcessor{p.m.Clone()} }

// structuredFor returns a factory of grammar processors.
func (lm *Model) structuredFor(g *grammar.Grammar) processorFactory {
	return func(int) (engine.LogitProcessor, error) {
		v, err := lm.constraints.get()
		if err != nil {
			return nil, err
		}
		return grammarProcessor{g.NewMatcher(v)}, nil
	}
}

func compileLark(src string) (*grammar.Grammar, error) { return lark.Parse(src) }

// customGrammars compiles the grammars of custom tools into their calls'
// constraints (calls are prepareTools's, by name).
func (lm *Model) customGrammars(tools []Tool, calls []outparse.CallTool) error {
	for i, t := range tools {
		if !t.Custom || t.Grammar == "" || t.raw != nil {
			continue
		}
		field := fmt.Sprintf("tools[%d].format.definition", i)
		st := &Structured{Lark: t.Grammar, Field: field}
		switch t.GrammarSyntax {
		case "", "lark":
		case "regex":
			st = &Structured{Regex: t.Grammar, Field: field}
		default:
			return paramErr(fmt.Sprintf("tools[%d].format.syntax", i), "tools[%d].format.syntax must be lark or regex, got %q", i, t.GrammarSyntax)
		}
		g, err := lm.compileStructured(st)
		if err != nil {
			return err
		}
		for j := range calls {
			if calls[j].Name == t.Name {
				calls[j].Grammar, calls[j].GrammarParam = g, CustomInputParam
			}
		}
	}
	return nil
}

// stepMasker is a processor whose mask can be computed apart from
// applying it (for measurements).
type stepMasker interface {
	engine.LogitProcessor
	maskBits() []uint64
}

func (p *jsonProcessor) maskBits() []uint64 {
	p.c.Budget(p.maxTokens-p.generated, p.encode)
	return p.c.AllowedBits()
}

func (p grammarProcessor) maskBits() []uint64 { return p.m.AllowedBits() }

// StepTimes are the costs of a constraint's steps: Mask computes the
// allowed tokens as a bit set, Apply sets the others' logits to -Inf in a
// row of the vocabulary's size.
type StepTimes struct{ Mask, Apply []time.Duration }

// ConstraintSteps walks at most steps tokens under the constraint p sets
// (ResponseFormat or Structured), through the same logit processor a
// generation gets, drawing each token uniformly from those its mask
// allows (seeded), and returns the time of each step until the
// constraint ends the output or steps are taken. The constraint's budget
// is p.MaxTokens (steps when unset). It measures the constraint's cost
// without a model.
func (lm *Model) ConstraintSteps(p Params, steps int, seed uint64) (StepTimes, error) {
	var st StepTimes
	r, err := lm.resolve(p)
	if err != nil {
		return st, err
	}
	var f processorFactory
	switch {
	case r.grammar != nil:
		f = lm.processorFor(r.grammar)
	case r.structured != nil:
		f = lm.structuredFor(r.structured)
	default:
		return st, paramErr("", "no constraint to measure")
	}
	proc, err := f(max(steps, p.MaxTokens))
	if err != nil {
		return st, err
	}
	pm := proc.(stepMasker)
	v, err := lm.constraints.get()
	if err != nil {
		return st, err
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	logits := make([]float32, lm.VocabSize())
	var allowed []int
	for range steps {
		t0 := time.Now()
		m := pm.maskBits()
		t1 := time.Now()
		v.MaskLogits(m, logits)
		st.Mask, st.Apply = append(st.Mask, t1.Sub(t0)), append(st.Apply, time.Since(t1))
		allowed = allowed[:0]
		for w, x := range m {
			for ; x != 0; x &= x - 1 {
				allowed = append(allowed, w*64+bits.TrailingZeros64(x))
			}
		}
		if len(allowed) == 0 {
			break
		}
		id := allowed[rng.IntN(len(allowed))]
		if err := proc.Accept(id); err != nil {
			return st, err
		}
		if v.IsEOS(id) {
			break
		}
	}
	return st, nil
}

// thinkFirst wraps the factory of an answer's constraint for a prompt
// that leaves the model thinking: the reasoning is free (but for the end
// of sequence), "</think>" and the "\n\n" the template writes after it
// end it, and the constraint starts there. Once budget reasoning tokens
// are spent (lowered as a call's budget is; half the answer, at most
// outparse.DefaultThinkingBudget, when none is set) "\n</think>\n\n" is
// forced.
func (lm *Model) thinkFirst(inner processorFactory, budget, asked int) processorFactory {
	closeID, ok := lm.tok.TokenID("</think>")
	if !ok {
		return inner
	}
	closing := lm.tok.Encode("\n</think>\n\n")
	after := lm.tok.Encode("\n\n")
	if !slices.Contains(closing, closeID) {
		return inner
	}
	eos := lm.constraints.eos
	return func(maxTokens int) (engine.LogitProcessor, error) {
		if _, err := inner(maxTokens); err != nil { // fail now, not mid-answer
			return nil, err
		}
		b := lowerBudget(budget, asked, maxTokens)
		if b == 0 {
			b = min(outparse.DefaultThinkingBudget, maxTokens/2)
		}
		return &thinkingProcessor{factory: inner, maxTokens: maxTokens, closeID: closeID, closing: closing, after: after, eos: eos,
			budget: b, thinking: true}, nil
	}
}

// thinkingProcessor is thinkFirst's processor.
type thinkingProcessor struct {
	// inner is the answer's constraint, made when the reasoning is over
	// with the tokens left then, so that its budget is the answer's.
	inner     engine.LogitProcessor
	factory   processorFactory
	maxTokens int
	used      int // tokens accepted so far
	closeID   int
	closing   []int // "\n</think>\n\n", forced at the budget
	after     []int // "\n\n", forced after a "</think>" the model wrote
	eos       []int
	force     []int // tokens still forced (shared, never written)
	budget    int
	thought   int
	thinking  bool
}

func (p *thinkingProcessor) Process(logits []float32) {
	if len(p.force) == 0 && p.thinking && p.thought >= p.budget {
		p.force = p.closing
	}
	switch {
	case len(p.force) > 0:
		id := p.force[0]
		keep := logits[id]
		fillNegInf(logits)
		logits[id] = keep
	case p.thinking:
		for _, id := range p.eos {
			if id >= 0 && id < len(logits) {
				logits[id] = float32(math.Inf(-1))
			}
		}
	default:
		p.inner.Process(logits)
	}
}

func (p *thinkingProcessor) Accept(token int) error {
	switch {
	case len(p.force) > 0:
		if token != p.force[0] {
			return fmt.Errorf("token %d where %d was forced", token, p.force[0])
		}
		p.force = p.force[1:]
		if token == p.closeID {
			p.thinking = false
		}
	case p.thinking:
		p.thought++
		if token == p.closeID {
			p.thinking, p.force = false, p.after
		}
	default:
		p.used++
		return p.inner.Accept(token)
	}
	p.used++
	if !p.thinking && len(p.force) == 0 {
		in, err := p.factory(max(1, p.maxTokens-p.used))
		if err != nil {
			return err
		}
		p.inner = in
	}
	return nil
}

// Fork returns a copy at the same point (engine.ForkingProcessor).
func (p *thinkingProcessor) Fork() engine.LogitProcessor {
	c := *p
	if f, ok := p.inner.(engine.ForkingProcessor); ok && p.inner != nil {
		c.inner = f.Fork()
	}
	return &c
}

// maskBits reports the inner constraint's mask once thinking is over (for
// measurements; the reasoning allows every token).
func (p *thinkingProcessor) maskBits() []uint64 {
	if m, ok := p.inner.(stepMasker); ok {
		return m.maskBits()
	}
	return nil
}

func fillNegInf(l []float32) {
	ninf := float32(math.Inf(-1))
	for i := range l {
		l[i] = ninf
	}
}
