package grammar

import (
	"sync"
	"testing"

	"github.com/govinfer/govinfer/grammar/regex"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

type qwen struct {
	tok   *tokenizer.Tokenizer
	vocab *jsonconstraint.Vocab
	err   error
}

// loadQwen3 builds the constrained-decoding vocabulary of the Qwen3
// tokenizer in testdata, as llm does, once per test binary.
var loadQwen3 = sync.OnceValue(func() qwen {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		return qwen{err: err}
	}
	toks := make([][]byte, tok.VocabSize())
	for id := range toks {
		if !tok.IsAdded(id) {
			toks[id] = tok.TokenBytes(id)
		}
	}
	var eos []int
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(s); ok {
			eos = append(eos, id)
		}
	}
	v, err := jsonconstraint.NewVocab(toks, eos)
	return qwen{tok: tok, vocab: v, err: err}
})

func qwen3(t testing.TB) qwen {
	q := loadQwen3()
	if q.err != nil {
		t.Skipf("Qwen3 tokenizer: %v", q.err)
	}
	return q
}

// mustRegex builds the grammar of a whole-text pattern.
func mustRegex(t testing.TB, pattern string) *Grammar {
	n, err := regex.Parse(pattern, false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build([]Rule{{Name: "root", Body: n}}, "root")
	if err != nil {
		t.Fatal(err)
	}
	return g
}
