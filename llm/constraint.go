package llm

import (
	"fmt"
	"sync"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/outparse"
	"github.com/govinfer/govinfer/tokenizer"
)

// constraintVocab builds the tokenizer's vocabularies for constrained
// decoding on first use (each costs a trie over every token): the JSON one
// (ordinary tokens) and the tool-call one (with the added tags).
type constraintVocab struct {
	tok *tokenizer.Tokenizer
	eos []int

	once sync.Once
	v    *jsonconstraint.Vocab
	err  error

	callOnce sync.Once
	calls    *outparse.CallVocab
	callErr  error
}

func newConstraintVocab(tok *tokenizer.Tokenizer, eos []int) *constraintVocab {
	return &constraintVocab{tok: tok, eos: eos}
}

func (c *constraintVocab) get() (*jsonconstraint.Vocab, error) {
	c.once.Do(func() {
		toks := make([][]byte, c.tok.VocabSize())
		for id := range toks {
			if !c.tok.IsAdded(id) {
				toks[id] = c.tok.TokenBytes(id)
			}
		}
		var eos []int
		for _, id := range c.eos {
			if id >= 0 && id < len(toks) {
				eos = append(eos, id)
			}
		}
		c.v, c.err = jsonconstraint.NewVocab(toks, eos)
		if c.err != nil {
			c.err = fmt.Errorf("building the constrained-decoding vocabulary: %w", c.err)
		}
	})
	return c.v, c.err
}

func (c *constraintVocab) callVocab() (*outparse.CallVocab, error) {
	c.callOnce.Do(func() { c.calls, c.callErr = outparse.NewCallVocab(c.tok, c.eos) })
	return c.calls, c.callErr
}

// processorFactory makes the logit processor of one choice of at most
// maxTokens tokens.
type processorFactory func(maxTokens int) (engine.LogitProcessor, error)

// jsonProcessor masks the logits of tokens that cannot continue the JSON
// document, and ends it within the choice's tokens.
type jsonProcessor struct {
	c         *jsonconstraint.Constraint
	encode    func(string) []int
	maxTokens int
	generated int
}

func (p *jsonProcessor) Process(logits []float32) {
	p.c.Budget(p.maxTokens-p.generated, p.encode)
	p.c.ApplyMask(logits)
}

func (p *jsonProcessor) Accept(token int) error {
	p.generated++
	return p.c.Accept(token)
}

// Fork returns a copy at the same point (engine.ForkingProcessor: drafts
// outside the document are dropped before they are verified).
func (p *jsonProcessor) Fork() engine.LogitProcessor {
	c := *p
	c.c = p.c.Clone()
	return &c
}

// callProcessor is a tool-call constraint as the engine's processor; it
// forks (engine.ForkingProcessor).
type callProcessor struct{ *outparse.CallConstraint }

// Fork returns a copy at the same point.
func (p callProcessor) Fork() engine.LogitProcessor { return callProcessor{p.Clone()} }

// processorFor returns a factory of JSON processors for a grammar.
func (lm *Model) processorFor(g *jsonconstraint.Grammar) processorFactory {
	return func(maxTokens int) (engine.LogitProcessor, error) {
		v, err := lm.constraints.get()
		if err != nil {
			return nil, err
		}
		return &jsonProcessor{c: jsonconstraint.NewConstraint(g, v), encode: lm.tok.Encode, maxTokens: maxTokens}, nil
	}
}
