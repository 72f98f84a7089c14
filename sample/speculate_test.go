package sample

import (
	"math"
	"testing"
)

// chiSquare returns Pearson's statistic of counts against probabilities
// p over n draws, and its degrees of freedom (cells with p > 0, less one).
// Cells where p is 0 must be empty: it returns +Inf otherwise.
func chiSquare(counts []int, p []float64, n int) (float64, int) {
	var x float64
	df := -1
	for i, c := range counts {
		if p[i] == 0 {
			if c > 0 {
				return math.Inf(1), df
			}
			continue
		}
		e := p[i] * float64(n)
		x += (float64(c) - e) * (float64(c) - e) / e
		df++
	}
	return x, df
}

// chiCritical holds the chi-square quantiles at 1 - 1e-4 by degrees of
// freedom (1 to 8): a correct rule fails once in 10,000 seeds.
var chiCritical = []float64{0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88, 31.83}

// TestSpeculateKeepsDistribution draws x from q and decides it by the
// speculative-sampling rule against p, for pairs of p and q that disagree
// in every way (mass only one of them has, q peaked where p is flat, q a
// point mass as an n-gram draft's): the tokens follow p (chi-square), and
// the rule accepts as often as the theory says (sum of min(p, q)).
func TestSpeculateKeepsDistribution(t *testing.T) {
	const n = 200000
	for _, c := range []struct {
		name string
		p, q []float64 // over ids 0..len-1
	}{
		{"disjoint mass", []float64{0.5, 0.2, 0.2, 0.1, 0, 0}, []float64{0.1, 0.1, 0.3, 0, 0.2, 0.3}},
		{"peaked q", []float64{0.2, 0.2, 0.2, 0.2, 0.1, 0.1}, []float64{0.9, 0.02, 0.02, 0.02, 0.02, 0.02}},
		{"point q", []float64{0.3, 0.4, 0.1, 0.1, 0.05, 0.05}, []float64{0, 1, 0, 0, 0, 0}},
		{"equal", []float64{0.3, 0.4, 0.1, 0.1, 0.05, 0.05}, []float64{0.3, 0.4, 0.1, 0.1, 0.05, 0.05}},
	} {
		dist := func(pr []float64) Dist {
			var d Dist
			for id, v := range pr {
				if v > 0 {
					d.IDs, d.Probs = append(d.IDs, id), append(d.Probs, v)
				}
			}
			return d
		}
		p, q := dist(c.p), dist(c.q)
		drafter, s := New(Params{Temperature: 1, Seed: 7}), New(Params{Temperature: 1, Seed: 8})
		counts := make([]int, len(c.p))
		accepted := 0
		for range n {
			tok, ok := s.Speculate(p, q, drafter.Draw(q))
			counts[tok]++
			if ok {
				accepted++
			}
		}
		x, df := chiSquare(counts, c.p, n)
		if x > chiCritical[df] {
			t.Errorf("%s: chi-square %.1f over %d degrees of freedom (critical %.1f): counts %v, p %v", c.name, x, df, chiCritical[df], counts, c.p)
		}
		var want float64
		for i := range c.p {
			want += min(c.p[i], c.q[i])
		}
		got := float64(accepted) / n
		if sd := math.Sqrt(want * (1 - want) / n); math.Abs(got-want) > 5*sd+1e-12 {
			t.Errorf("%s: accepted %.4f of drafts, theory %.4f", c.name, got, want)
		}
		t.Logf("%s: chi-square %.1f (df %d), accepted %.4f (theory %.4f)", c.name, x, df, got, want)
	}
}

// TestDistMatchesSample checks that Dist is the distribution Sample draws
// from: the same candidates after top-k, min-p and top-p, and frequencies
// that fit it.
func TestDistMatchesSample(t *testing.T) {
	logits := []float32{0, 3, 1, 2, 2, -5, 1.5}
	for _, p := range []Params{
		{Temperature: 0.8, Seed: 1},
		{Temperature: 1.3, TopK: 4, Seed: 2},
		{Temperature: 1, TopP: 0.8, Seed: 3},
		{Temperature: 1, MinP: 0.2, RepetitionPenalty: 1.3, Seed: 4},
	} {
		s := New(p)
		s.AddPrompt([]int{1})
		d := s.Dist(logits)
		var sum float64
		probs := make([]float64, len(logits))
		for i, id := range d.IDs {
			probs[id] = d.Probs[i]
			sum += d.Probs[i]
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("%+v: probabilities sum to %v", p, sum)
		}
		const n = 100000
		counts := make([]int, len(logits))
		for range n {
			counts[s.Sample(logits)]++
		}
		if x, df := chiSquare(counts, probs, n); x > chiCritical[df] {
			t.Errorf("%+v: chi-square %.1f over %d degrees of freedom: counts %v, dist %v", p, x, df, counts, probs)
		}
	}
	if d := New(Params{}).Dist(logits3()); len(d.IDs) != 1 || d.IDs[0] != 1 || d.Probs[0] != 1 {
		t.Errorf("greedy dist %+v, want token 1 alone", d)
	}
}

func logits3() []float32 { return []float32{1, 3, 3} }
