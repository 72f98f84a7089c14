package engine

import (
	"math"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/randmodel"
)

// TestSpeculativeDraftQuantized runs greedy requests with logprobs through
// engines whose MTP head drafts from a quantized copy of lm_head
// (model.Options.DraftQuantize), k = 1..3: the tokens and every logprob
// are plain decoding's bit for bit (on the CPU the verify rows' logits
// are plain decoding's), on vl-tiny (its 64-value rows quantize to Q8_0)
// and on a random checkpoint whose 256-value rows take Q4_K.
func TestSpeculativeDraftQuantized(t *testing.T) {
	shape, err := randmodel.LookupShape("small")
	if err != nil {
		t.Fatal(err)
	}
	shape.Layers = 4
	small := t.TempDir()
	if err := randmodel.Write(small, shape, randmodel.Options{Seed: 11, MTP: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, draft string
		want       quant.Type
	}{
		{"../testdata/models/vl-tiny", "q8_0", quant.Q8_0},
		{small, "q4_k", quant.Q4_K},
		{small, "q8_0", quant.Q8_0},
	} {
		m, err := model.Open(c.dir, model.Options{Backend: testBackend, MTP: true, DraftQuantize: c.draft})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if m.DraftType() != c.want {
			t.Fatalf("%s %s: drafts in %v, want %v", c.dir, c.draft, m.DraftType(), c.want)
		}
		req := Request{Prompt: []int{3, 141, 59, 26, 535, 89, 79, 32, 38, 46, 26, 43}, MaxTokens: 24, Logprobs: true, TopLogprobs: 3}
		plainToks, _, _ := generateTokens(t, newEngine(t, m, Config{}), req)
		for k := 1; k <= 3; k++ {
			e := newEngine(t, m, Config{Speculative: Speculative{Method: "mtp", Tokens: k, NoBackoff: true, DraftQuantize: c.draft}})
			got, _, s := generateTokens(t, e, req)
			d, a := s.SpecTokens()
			if d == 0 {
				t.Errorf("%s k=%d: no drafts", c.draft, k)
			}
			if !sameTokens(got, plainToks) {
				t.Errorf("%s %s k=%d: tokens or logprobs differ from plain decoding's: %v, plain %v", c.dir, c.draft, k, ids(got), ids(plainToks))
			}
			t.Logf("%s k=%d: %d of %d drafts accepted", c.draft, k, a, d)
		}
	}
}

// generateTokens runs one request to its end and returns its tokens with
// their logprobs.
func generateTokens(t *testing.T, e *Engine, req Request) ([]Token, Output, *Stream) {
	t.Helper()
	s, err := e.Submit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	toks, out, err := collect(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Finish == FinishError {
		t.Fatal(out.Err)
	}
	return toks, out, s
}

// sameTokens reports whether a and b are the same tokens with the same
// logprobs and top alternatives, bit for bit.
func sameTokens(a, b []Token) bool {
	return slices.EqualFunc(a, b, func(x, y Token) bool {
		return x.ID == y.ID && math.Float64bits(x.Logprob) == math.Float64bits(y.Logprob) &&
			slices.EqualFunc(x.Top, y.Top, func(p, q TokenLogprob) bool {
				return p.ID == q.ID && math.Float64bits(p.Logprob) == math.Float64bits(q.Logprob)
			})
	})
}
