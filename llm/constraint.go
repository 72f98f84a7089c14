package llm

import (
	"fmt"
	"sync"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

// constraintVocab builds the tokenizer's vocabulary for constrained
// decoding on first use (it costs a trie over every token).
type constraintVocab struct {
	tok  *tokenizer.Tokenizer
	eos  []int
	once sync.Once
	v    *jsonconstraint.Vocab
	err  error
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

// jsonProcessor masks the logits of tokens that cannot continue the JSON
// document.
type jsonProcessor struct{ c *jsonconstraint.Constraint }

func (p jsonProcessor) Process(logits []float32) { p.c.ApplyMask(logits) }

func (p jsonProcessor) Accept(token int) error { return p.c.Accept(token) }

// processorFor returns a factory of JSON processors for a grammar.
func (lm *Model) processorFor(g *jsonconstraint.Grammar) func() (engine.LogitProcessor, error) {
	return func() (engine.LogitProcessor, error) {
		v, err := lm.constraints.get()
		if err != nil {
			return nil, err
		}
		return jsonProcessor{jsonconstraint.NewConstraint(g, v)}, nil
	}
}
