package httpapi

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
func (s *Server) processorFor(g *jsonconstraint.Grammar) func() (engine.LogitProcessor, error) {
	return func() (engine.LogitProcessor, error) {
		v, err := s.constraints.get()
		if err != nil {
			return nil, err
		}
		return jsonProcessor{jsonconstraint.NewConstraint(g, v)}, nil
	}
}

// parseResponseFormat reads response_format: nil for free text.
func parseResponseFormat(o object) (*jsonconstraint.Grammar, *apiError) {
	rf, ok, err := o.obj("response_format")
	if err != nil || !ok {
		return nil, err
	}
	typ, _, err := rf.str("type")
	if err != nil {
		return nil, err
	}
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return jsonconstraint.AnyObject(), nil
	case "json_schema":
		js, ok, err := rf.obj("json_schema")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, badRequest("response_format.json_schema", "response_format.json_schema is required when type is json_schema")
		}
		v, ok := js.get("schema")
		if !ok {
			return jsonconstraint.AnyJSON(), nil
		}
		raw, merr := marshalValue(v)
		if merr != nil {
			return nil, badRequest("response_format.json_schema.schema", "response_format.json_schema.schema: %v", merr)
		}
		g, cerr := jsonconstraint.Compile(raw)
		if cerr != nil {
			return nil, badRequest("response_format.json_schema.schema", "invalid response_format.json_schema.schema: %v", cerr)
		}
		return g, nil
	}
	return nil, badRequest("response_format.type", "response_format.type must be text, json_object or json_schema, got %q", typ)
}
