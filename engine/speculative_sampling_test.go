package engine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/sample"
)

// chiCriticalWH is the chi-square quantile at 1 - 1e-4 for df degrees of
// freedom, by the Wilson-Hilferty approximation (within 1% from df 2).
func chiCriticalWH(df int) float64 {
	const z = 3.719 // the normal quantile at 1 - 1e-4
	d := float64(df)
	c := 1 - 2/(9*d) + z*math.Sqrt(2/(9*d))
	return d * c * c * c
}

// twoSample returns the chi-square statistic of two samples of the same
// size over the same cells, cells of fewer than 10 draws in both together
// pooled, and its degrees of freedom.
func twoSample(a, b map[int]int) (float64, int) {
	var x float64
	var df int
	var poolA, poolB int
	keys := map[int]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	cell := func(ca, cb int) {
		d := float64(ca - cb)
		x += d * d / float64(ca+cb)
		df++
	}
	for k := range keys {
		if a[k]+b[k] < 10 {
			poolA, poolB = poolA+a[k], poolB+b[k]
			continue
		}
		cell(a[k], b[k])
	}
	if poolA+poolB > 0 {
		cell(poolA, poolB)
	}
	return x, df - 1
}

// TestSpeculativeSamplingDistribution samples the golden prompt of vl-tiny
// (whose head's drafts the main model often accepts) with many seeds, with
// and without MTP speculation (k = 2): the tokens at each of the first
// positions that speculation decides follow the same distribution
// (two-sample chi-square), drafts were accepted and rejected, and a seed
// gives the same tokens every time with speculation on.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	g := loadSpecGolden(t)
	m := openMTPModel(t, "vl-tiny")
	const seeds, n = 1500, 4
	params := func(seed int) sample.Params {
		return sample.Params{Temperature: 1, TopK: 4, Seed: uint64(seed)}
	}
	runAll := func(cfg Config) [][]int {
		cfg.MaxNumSeqs, cfg.MaxQueue = 16, seeds
		e := newEngine(t, m, cfg)
		streams := make([]*Stream, seeds)
		for i := range streams {
			s, err := e.Submit(context.Background(), Request{Prompt: g.Prompt, MaxTokens: n, Params: params(i), IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			streams[i] = s
		}
		out := make([][]int, seeds)
		var drafted, accepted int
		for i, s := range streams {
			toks, o, err := collect(context.Background(), s)
			if err != nil || o.Finish != FinishLength {
				t.Fatalf("seed %d: %v %v %v", i, err, o.Finish, o.Err)
			}
			out[i] = ids(toks)
			d, a := s.SpecTokens()
			drafted, accepted = drafted+d, accepted+a
		}
		if cfg.Speculative.Tokens > 0 {
			t.Logf("%d drafts, %d accepted", drafted, accepted)
			if accepted == 0 || accepted == drafted {
				t.Errorf("%d of %d drafts accepted: the rule's both branches should run", accepted, drafted)
			}
		}
		return out
	}
	plain := runAll(Config{})
	spec := Config{Speculative: Speculative{Method: "mtp", Tokens: 2}}
	got := runAll(spec)
	for pos := 1; pos < n; pos++ {
		a, b := map[int]int{}, map[int]int{}
		for i := range seeds {
			a[plain[i][pos]]++
			b[got[i][pos]]++
		}
		x, df := twoSample(a, b)
		if crit := chiCriticalWH(df); x > crit {
			t.Errorf("token %d: chi-square %.1f over %d degrees of freedom (critical %.1f): plain %v, speculative %v", pos, x, df, crit, a, b)
		} else {
			t.Logf("token %d: chi-square %.1f over %d degrees of freedom (critical %.1f)", pos, x, df, crit)
		}
	}
	// Seeds are reproducible, alone or in a batch.
	again := newEngine(t, m, spec)
	for _, seed := range []int{0, 7, 99} {
		toks, _, _ := generate(t, again, Request{Prompt: g.Prompt, MaxTokens: n, Params: params(seed), IgnoreEOS: true})
		if !slices.Equal(toks, got[seed]) {
			t.Errorf("seed %d: %v alone, %v in the batch", seed, toks, got[seed])
		}
	}
}
