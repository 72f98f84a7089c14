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
	var allowed []int // reused: a fresh slice a step is megabytes of garbage
	for range walks {
		m := g.NewMatcher(v)
		for range steps {
			t0 := time.Now()
			mask := m.AllowedBits()
			times = append(times, time.Since(t0))
			allowed = allowed[:0]
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

// CheckMasks walks g as MaskTimes does (walks from a fresh matcher, up
// to steps tokens each) and checks every mask against each token of the
// vocabulary run through a clone of the matcher: a token is in the mask
// exactly when the matcher accepts it.
func CheckMasks(t *testing.T, g *grammar.Grammar, v *jsonconstraint.Vocab, walks, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	var allowed []int
	for range walks {
		m := g.NewMatcher(v)
		var out []byte
		for range steps {
			mask := m.AllowedBits()
			allowed = allowed[:0]
			for id := range v.Size() {
				got := mask[id>>6]&(1<<(id&63)) != 0
				want := m.Clone().Accept(id) == nil
				if got != want {
					t.Fatalf("after %q: token %d (%q): in the mask %v, accepted %v", out, id, v.TokenBytes(id), got, want)
				}
				if got {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("dead end after %q", out)
			}
			id := allowed[rng.IntN(len(allowed))]
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
			if m.Finished() {
				break
			}
			out = append(out, v.TokenBytes(id)...)
		}
	}
}
