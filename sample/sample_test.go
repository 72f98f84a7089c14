package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestGreedyLowestIDOnTies(t *testing.T) {
	s := New(Params{})
	if got := s.Sample([]float32{1, 3, 3, float32(math.NaN()), 2}); got != 1 {
		t.Errorf("got %d, want 1", got)
	}
}

// TestTemperatureMatchesSoftmax draws many samples and compares the
// frequencies with softmax(logits / T).
func TestTemperatureMatchesSoftmax(t *testing.T) {
	logits := []float32{1, 2, 0.5, -1, 2.5}
	const temp, draws = 0.7, 200000
	s := New(Params{Temperature: temp, Seed: 42})
	counts := make([]int, len(logits))
	for i := 0; i < draws; i++ {
		counts[s.Sample(logits)]++
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) / temp)
	}
	for i, l := range logits {
		p := math.Exp(float64(l)/temp) / z
		got := float64(counts[i]) / draws
		// 5 standard deviations of a binomial proportion.
		if sd := math.Sqrt(p * (1 - p) / draws); math.Abs(got-p) > 5*sd {
			t.Errorf("token %d: frequency %.4f, softmax %.4f", i, got, p)
		}
	}
}

func distinctDraws(p Params, logits []float32, n int) []int {
	s := New(p)
	seen := map[int]bool{}
	for i := 0; i < n; i++ {
		seen[s.Sample(logits)] = true
	}
	var ids []int
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func TestTopKTopPMinP(t *testing.T) {
	logits := []float32{0, 3, 1, 2, 2, -5} // by rank: 1, then 3 and 4 tied, 2, 0, 5
	cases := []struct {
		name string
		p    Params
		want []int
	}{
		{"top-k 1", Params{Temperature: 1, TopK: 1}, []int{1}},
		{"top-k 3 keeps ties by id", Params{Temperature: 1, TopK: 3}, []int{1, 3, 4}},
		{"top-k 2 breaks the tie toward the lower id", Params{Temperature: 1, TopK: 2}, []int{1, 3}},
		// softmax: p1 = .521, p3 = p4 = .191, p2 = .070, p0 = .026
		{"top-p 0.5", Params{Temperature: 1, TopP: 0.5}, []int{1}},
		{"top-p 0.6", Params{Temperature: 1, TopP: 0.6}, []int{1, 3}},
		{"top-p 0.85", Params{Temperature: 1, TopP: 0.85}, []int{1, 3, 4}},
		{"top-p 0.95", Params{Temperature: 1, TopP: 0.95}, []int{1, 2, 3, 4}},
		{"min-p 0.3", Params{Temperature: 1, MinP: 0.3}, []int{1, 3, 4}},
	}
	for _, c := range cases {
		c.p.Seed = 7
		if got := distinctDraws(c.p, logits, 20000); !slices.Equal(got, c.want) {
			t.Errorf("%s: drew %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSeededReproducible(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	draw := func(seed uint64) []int {
		s := New(Params{Temperature: 1, TopK: 50, TopP: 0.9, Seed: seed})
		var out []int
		for i := 0; i < 50; i++ {
			tok := s.Sample(logits)
			s.Accept(tok)
			out = append(out, tok)
		}
		return out
	}
	if a, b := draw(3), draw(3); !slices.Equal(a, b) {
		t.Error("same seed, different draws")
	}
	if a, b := draw(3), draw(4); slices.Equal(a, b) {
		t.Error("different seeds, same 50 draws")
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 0.5}
	s := New(Params{RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25})
	s.AddPrompt([]int{0})
	s.Accept(1)
	s.Accept(2)
	s.Accept(2)
	got := s.Penalize(logits)
	want := []float32{
		2.0 / 2,              // prompt token: repetition only
		-2*2 - 0.5 - 0.25,    // output once
		1.0/2 - 0.5 - 2*0.25, // output twice
		0.5,                  // unseen
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Errorf("logit %d: %v, want %v", i, got[i], want[i])
		}
	}
	if logits[0] != 2 {
		t.Error("Penalize modified its input")
	}
	if New(Params{}).Penalize(logits)[0] != 2 {
		t.Error("no penalties should leave logits alone")
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(50)
		cands := make([]candidate, n)
		vals := make([]float64, n)
		for i := range cands {
			v := float64(r.IntN(10)) // many ties
			cands[i], vals[i] = candidate{i, v}, v
		}
		slices.Sort(vals)
		k := 1 + r.IntN(n)
		if got, want := kthLargest(cands, k), vals[n-k]; got != want {
			t.Fatalf("n=%d k=%d: got %v want %v", n, k, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{{Temperature: -1}, {TopP: 1.5}, {MinP: -0.1}, {RepetitionPenalty: -1}, {PresencePenalty: 3}, {FrequencyPenalty: math.NaN()}}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if err := (Params{Temperature: 0.6, TopK: 20, TopP: 0.95}).Validate(); err != nil {
		t.Error(err)
	}
}

func BenchmarkSampleTopK(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	logits := make([]float32, 248320)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	s := New(Params{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 1})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Sample(logits)
	}
}

func TestTopKHeapMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for trial := 0; trial < 100; trial++ {
		n := 1 + r.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(r.IntN(20)) // many ties
			switch r.IntN(8) {              // and a constraint's mask
			case 0:
				logits[i] = float32(math.Inf(-1))
			case 1:
				logits[i] = float32(math.NaN())
			}
		}
		k := 1 + r.IntN(n)
		got := topK(nil, logits, k)
		ids := make([]int, 0, len(got))
		for _, c := range got {
			ids = append(ids, c.id)
		}
		slices.Sort(ids)
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		order = slices.DeleteFunc(order, func(i int) bool {
			return logits[i] != logits[i] || math.IsInf(float64(logits[i]), -1)
		})
		slices.SortStableFunc(order, func(a, b int) int { return -cmpF(logits[a], logits[b]) })
		want := slices.Clone(order[:min(k, len(order))])
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("n=%d k=%d: heap %v, sort %v", n, k, ids, want)
		}
	}
}

func cmpF(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BenchmarkSampleTopKMasked is BenchmarkSampleTopK under a constraint's
// mask that allows a random half of the vocabulary (as inside a JSON
// string), the rest at -Inf.
func BenchmarkSampleTopKMasked(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	logits := make([]float32, 248320)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
		if r.IntN(2) == 0 {
			logits[i] = float32(math.Inf(-1))
		}
	}
	s := New(Params{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 1})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Sample(logits)
	}
}
