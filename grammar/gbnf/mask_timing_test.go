package gbnf

import (
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

func qwen3Vocab(tb testing.TB) *jsonconstraint.Vocab {
	tok, err := tokenizer.Load("../../testdata/tokenizer/qwen3")
	if err != nil {
		tb.Skip(err)
	}
	toks := make([][]byte, tok.VocabSize())
	for id := range toks {
		if !tok.IsAdded(id) {
			toks[id] = tok.TokenBytes(id)
		}
	}
	id, _ := tok.TokenID("<|im_end|>")
	v, err := jsonconstraint.NewVocab(toks, []int{id})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// TestJSONMaskTimes walks the JSON grammar with tokens drawn uniformly
// from each mask, on a fresh grammar, and reports the mask times.
func TestJSONMaskTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	v := qwen3Vocab(t)
	src, _ := os.ReadFile("testdata/json.gbnf")
	g, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var times []time.Duration
	for walk := range 3 {
		m := g.NewMatcher(v)
		for range 200 {
			t0 := time.Now()
			mask := m.AllowedBits()
			times = append(times, time.Since(t0))
			var allowed []int
			for w, x := range mask {
				for ; x != 0; x &= x - 1 {
					allowed = append(allowed, w*64+bits.TrailingZeros64(x))
				}
			}
			if len(allowed) == 0 {
				break
			}
			id := allowed[rng.IntN(len(allowed))]
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
			if m.Finished() {
				break
			}
		}
		_ = walk
	}
	slices.Sort(times)
	t.Logf("%d masks: median %v, p90 %v, p99 %v, max %v; %d grammar states", len(times), times[len(times)/2], times[len(times)*9/10], times[len(times)*99/100], times[len(times)-1], g.States())
}
