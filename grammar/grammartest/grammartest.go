// Package grammartest holds what the grammar front ends' tests share: the
// Qwen3 vocabulary, and random walks through a grammar's masks that time
// each mask.
package grammartest

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

// Qwen3Vocab returns the constraint vocabulary of the Qwen3 tokenizer in
// dir (testdata/tokenizer/qwen3), <|im_end|> its end; it skips the test
// when the tokenizer cannot be read.
func Qwen3Vocab(tb testing.TB, dir string) *jsonconstraint.Vocab {
	tb.Helper()
	tok, err := tokenizer.Load(dir)
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

// MaskTimes walks g with tokens drawn uniformly from each mask, walks
// times from a fresh matcher of up to steps tokens each, and returns the
// sorted time of every mask. A token of a mask that the matcher then
// refuses fails the test.
func MaskTimes(t *testing.T, g *grammar.Grammar, v *jsonconstraint.Vocab, walks, steps int) []time.Duration {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var times []time.Duration
	for range walks {
		m := g.NewMatcher(v)
		for range steps {
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
			if err := m.Accept(allowed[rng.IntN(len(allowed))]); err != nil {
				t.Fatal(err)
			}
			if m.Finished() {
				break
			}
		}
	}
	slices.Sort(times)
	return times
}

// LogTimes logs the median, p90, p99 and largest of sorted mask times.
func LogTimes(t *testing.T, times []time.Duration, states int) {
	t.Helper()
	if len(times) == 0 {
		t.Fatal("no masks timed")
	}
	t.Logf("%d masks: median %v, p90 %v, p99 %v, max %v; %d grammar states", len(times), times[len(times)/2],
		times[len(times)*9/10], times[len(times)*99/100], times[len(times)-1], states)
}
