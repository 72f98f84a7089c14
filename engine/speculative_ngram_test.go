package engine

import (
	"slices"
	"testing"

	"github.com/govinfer/govinfer/sample"
)

func TestNgramDrafts(t *testing.T) {
	for _, c := range []struct {
		ctx          []int
		k, lo, hi    int
		want         []int
		explanations string
	}{
		{[]int{1, 2, 3, 4, 1, 2}, 2, 1, 3, []int{3, 4}, "suffix 1 2 seen at 0"},
		{[]int{1, 2, 3, 9, 2, 3, 7, 1, 2, 3}, 3, 1, 3, []int{9, 2, 3}, "the longest suffix (3) wins over the later 2 3"},
		{[]int{5, 6, 1, 5, 6, 2, 5, 6}, 1, 2, 2, []int{2}, "the latest occurrence"},
		{[]int{1, 2, 3, 4}, 2, 1, 3, nil, "no match"},
		{[]int{1, 2, 3, 1, 2}, 4, 3, 5, nil, "matches shorter than lo do not count"},
		{[]int{7, 7, 7}, 4, 1, 2, []int{7}, "the drafts stop at the end of the context"},
	} {
		if got := ngramDrafts(c.ctx, c.k, c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("%v k=%d n=%d..%d: %v, want %v (%s)", c.ctx, c.k, c.lo, c.hi, got, c.want, c.explanations)
		}
	}
}

// TestSpeculativeNgram runs n-gram speculation on the tiny model without
// its head: greedy output is plain greedy's, with a logit processor too;
// on a prompt that repeats itself, where the model repeats it (a logit
// bias makes it), drafts are accepted; sampled output is reproducible.
func TestSpeculativeNgram(t *testing.T) {
	m := openModel(t, "tiny") // no MTP head: n-grams need none
	g := loadSpecGolden(t)
	plain := newEngine(t, m, Config{})
	for _, k := range []int{1, 2, 4} {
		e := newEngine(t, m, Config{Speculative: Speculative{Method: "ngram", Tokens: k, LookupMin: 1, LookupMax: 3, NoBackoff: true}})
		for _, mk := range []func() Request{
			func() Request { return Request{Prompt: g.Prompt, MaxTokens: 40, IgnoreEOS: true} },
			func() Request {
				return Request{Prompt: g.Prompt, MaxTokens: 40, IgnoreEOS: true, Processor: &phases{even: 5, forced: 3, banned: map[int]bool{}, forks: new(int)}}
			},
		} {
			want, _, _ := generate(t, plain, mk())
			got, _, s := generate(t, e, mk())
			d, a := s.SpecTokens()
			if !slices.Equal(got, want) {
				t.Errorf("k=%d: %v, plain %v", k, got, want)
			}
			t.Logf("k=%d: %d drafts, %d accepted", k, d, a)
		}
		// A prompt that repeats a cycle of 5 tokens the model is biased
		// towards: the n-grams predict what it generates.
		cycle := []int{11, 22, 33, 44, 55}
		bias := map[int]float32{}
		for _, id := range cycle {
			bias[id] = 30
		}
		var prompt []int
		for range 4 {
			prompt = append(prompt, cycle...)
		}
		req := Request{Prompt: prompt, MaxTokens: 30, IgnoreEOS: true, LogitBias: bias, Params: sample.Params{RepetitionPenalty: 1}}
		want, _, _ := generate(t, plain, req)
		got, _, s := generate(t, e, req)
		d, a := s.SpecTokens()
		if !slices.Equal(got, want) || a == 0 || a*2 < d {
			t.Errorf("k=%d repeating: %v (%d of %d drafts accepted), plain %v", k, got, a, d, want)
		}
		t.Logf("k=%d repeating: %v, %d of %d drafts accepted", k, got, a, d)
		sampled := Request{Prompt: prompt, MaxTokens: 30, IgnoreEOS: true, LogitBias: bias, Params: sample.Params{Temperature: 1, Seed: 9}}
		x, _, _ := generate(t, e, sampled)
		y, _, _ := generate(t, e, sampled)
		if !slices.Equal(x, y) {
			t.Errorf("k=%d sampled: %v then %v", k, x, y)
		}
	}
}
