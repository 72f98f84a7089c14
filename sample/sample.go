// Package sample picks the next token from a row of logits: greedy argmax or
// seeded random sampling with temperature, top-k, top-p and min-p, after
// repetition, presence and frequency penalties.
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/govinfer/govinfer/compute"
)

// Params are the sampling settings of one sequence, as an OpenAI-style
// request gives them. The zero value is greedy decoding.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax, lowest id on
	// ties).
	Temperature float64
	// TopK keeps the K most likely tokens; 0 or negative keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP; 0 or 1 keeps all.
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one.
	MinP float64
	// RepetitionPenalty divides positive logits and multiplies negative ones
	// of every token seen in the prompt or the output; 0 or 1 disables it.
	RepetitionPenalty float64
	// PresencePenalty is subtracted once from the logit of every token
	// that occurs in the output.
	PresencePenalty float64
	// FrequencyPenalty is subtracted from a token's logit once per
	// occurrence in the output.
	FrequencyPenalty float64
	// Seed seeds the random source of this sequence.
	Seed uint64
}

// Validate reports settings outside their meaningful ranges.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("temperature must be a finite number >= 0, got %v", p.Temperature)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("top_p must be in [0, 1], got %v", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP)
	case p.RepetitionPenalty < 0 || math.IsNaN(p.RepetitionPenalty) || math.IsInf(p.RepetitionPenalty, 0):
		return fmt.Errorf("repetition_penalty must be a finite number > 0, got %v", p.RepetitionPenalty)
	case math.Abs(p.PresencePenalty) > 2 || math.IsNaN(p.PresencePenalty):
		return fmt.Errorf("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case math.Abs(p.FrequencyPenalty) > 2 || math.IsNaN(p.FrequencyPenalty):
		return fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	}
	return nil
}

// Greedy reports whether the parameters select argmax decoding.
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Sampler draws tokens for one sequence. It is not safe for concurrent use.
type Sampler struct {
	p       Params
	rng     *rand.Rand
	seen    map[int]bool // prompt and output tokens, for the repetition penalty
	counts  map[int]int  // output tokens, for presence and frequency penalties
	cands   []candidate  // reused between calls
	scratch []float32
}

type candidate struct {
	id    int
	logit float64
}

// New returns a sampler for the given parameters.
func New(p Params) *Sampler {
	return &Sampler{
		p:      p,
		rng:    rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)),
		seen:   map[int]bool{},
		counts: map[int]int{},
	}
}

// AddPrompt records prompt tokens for the repetition penalty.
func (s *Sampler) AddPrompt(ids []int) {
	for _, id := range ids {
		s.seen[id] = true
	}
}

// Accept records a generated token.
func (s *Sampler) Accept(id int) {
	s.seen[id] = true
	s.counts[id]++
}

// Penalize returns the logits after the repetition, presence and frequency
// penalties; it returns logits itself when no penalty applies, otherwise a
// copy owned by the sampler (valid until the next call).
func (s *Sampler) Penalize(logits []float32) []float32 {
	rp := s.p.RepetitionPenalty
	usesRep := rp != 0 && rp != 1 && len(s.seen) > 0
	usesCounts := (s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0) && len(s.counts) > 0
	if !usesRep && !usesCounts {
		return logits
	}
	s.scratch = append(s.scratch[:0], logits...)
	out := s.scratch
	if usesRep {
		for id := range s.seen {
			if id < 0 || id >= len(out) {
				continue
			}
			if out[id] > 0 {
				out[id] = float32(float64(out[id]) / rp)
			} else {
				out[id] = float32(float64(out[id]) * rp)
			}
		}
	}
	if usesCounts {
		for id, n := range s.counts {
			if id < 0 || id >= len(out) {
				continue
			}
			out[id] -= float32(s.p.PresencePenalty + s.p.FrequencyPenalty*float64(n))
		}
	}
	return out
}

// Sample returns the next token for a row of logits. It does not record it;
// call Accept with the token that is finally used.
func (s *Sampler) Sample(logits []float32) int {
	l := s.Penalize(logits)
	if s.p.Greedy() {
		return compute.Argmax(l)
	}
	probs, total := s.dist(l)
	if len(probs) == 0 {
		return compute.Argmax(l)
	}
	r := s.rng.Float64() * total
	for i, p := range probs {
		r -= p
		if r < 0 {
			return s.cands[i].id
		}
	}
	return s.cands[len(probs)-1].id
}

// Dist is a distribution over token ids: the ids with a positive
// probability, most likely first (lower ids first on ties), and their
// probabilities, which sum to 1.
type Dist struct {
	IDs   []int
	Probs []float64
}

// Prob returns the probability of id (0 where it is not among the IDs).
func (d Dist) Prob(id int) float64 {
	for i, x := range d.IDs {
		if x == id {
			return d.Probs[i]
		}
	}
	return 0
}

// Dist returns the distribution Sample draws from for a row of logits,
// after the penalties as of the tokens accepted so far: the argmax alone
// for greedy parameters, otherwise the temperature's softmax over the
// tokens top-k, min-p and top-p keep. It consumes no randomness.
func (s *Sampler) Dist(logits []float32) Dist {
	l := s.Penalize(logits)
	if s.p.Greedy() {
		return Dist{IDs: []int{compute.Argmax(l)}, Probs: []float64{1}}
	}
	probs, total := s.dist(l)
	if len(probs) == 0 {
		return Dist{IDs: []int{compute.Argmax(l)}, Probs: []float64{1}}
	}
	d := Dist{IDs: make([]int, len(probs)), Probs: make([]float64, len(probs))}
	for i, p := range probs {
		d.IDs[i], d.Probs[i] = s.cands[i].id, p/total
	}
	return d
}

// Draw returns an id of d drawn with the sampler's random source (one
// uniform number).
func (s *Sampler) Draw(d Dist) int {
	r := s.rng.Float64()
	for i, p := range d.Probs {
		r -= p
		if r < 0 {
			return d.IDs[i]
		}
	}
	return d.IDs[len(d.IDs)-1]
}

// Uniform returns a uniform number in [0, 1) from the sampler's random
// source.
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// Speculate decides a draft token x, drawn from the draft distribution q,
// against the target distribution p by the speculative-sampling rule
// (Leviathan et al. 2023; Chen et al. 2023): x is accepted with
// probability min(1, p(x)/q(x)); on rejection a token is drawn from the
// residual, max(0, p - q) normalized. Either way the token returned is
// distributed as p. It uses one uniform number, and a second one on
// rejection.
func (s *Sampler) Speculate(p, q Dist, x int) (tok int, accepted bool) {
	px, qx := p.Prob(x), q.Prob(x)
	if px > 0 && (qx <= 0 || s.rng.Float64()*qx < px) {
		return x, true
	}
	return s.Draw(Residual(p, q)), false
}

// Residual returns max(0, p - q) normalized: what the speculative-sampling
// rule draws from after a rejection. Where q covers p everywhere (p ≤ q,
// so p = q, which a rejection cannot follow except by rounding) it
// returns p.
func Residual(p, q Dist) Dist {
	r := Dist{IDs: make([]int, 0, len(p.IDs)), Probs: make([]float64, 0, len(p.IDs))}
	var sum float64
	for i, id := range p.IDs {
		if v := p.Probs[i] - q.Prob(id); v > 0 {
			r.IDs, r.Probs = append(r.IDs, id), append(r.Probs, v)
			sum += v
		}
	}
	if sum <= 0 {
		return p
	}
	for i := range r.Probs {
		r.Probs[i] /= sum
	}
	return r
}

// dist leaves in s.cands the candidates of penalized logits l, most
// likely first, and returns the probabilities of those that survive top-k,
// min-p and top-p (the first len(probs) of s.cands), unnormalized, and
// their sum. It returns no probabilities when every logit is -Inf or NaN.
func (s *Sampler) dist(l []float32) ([]float64, float64) {
	byLogit := func(a, b candidate) int {
		if c := cmp.Compare(b.logit, a.logit); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	}
	k := s.p.TopK
	if k > 0 && k <= 1024 {
		s.cands = topK(s.cands[:0], l, k)
	} else {
		s.cands = s.cands[:0]
		for id, v := range l {
			if v == v && !math.IsInf(float64(v), -1) {
				s.cands = append(s.cands, candidate{id, float64(v)})
			}
		}
		if k <= 0 || k > len(s.cands) {
			k = len(s.cands)
		}
		if k < len(s.cands) {
			// Keep only values at or above the k-th largest before sorting.
			kth := kthLargest(s.cands, k)
			j := 0
			for _, c := range s.cands {
				if c.logit >= kth {
					s.cands[j] = c
					j++
				}
			}
			s.cands = s.cands[:j]
		}
	}
	if len(s.cands) == 0 {
		return nil, 0
	}
	for i := range s.cands {
		s.cands[i].logit /= s.p.Temperature
	}
	slices.SortFunc(s.cands, byLogit)
	s.cands = s.cands[:min(k, len(s.cands))]
	// Softmax over the survivors.
	maxL := s.cands[0].logit
	probs := make([]float64, len(s.cands))
	var sum float64
	for i, c := range s.cands {
		probs[i] = math.Exp(c.logit - maxL)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	n := len(probs)
	if s.p.MinP > 0 {
		floor := s.p.MinP * probs[0]
		for n > 1 && probs[n-1] < floor {
			n--
		}
	}
	if s.p.TopP > 0 && s.p.TopP < 1 {
		var cum float64
		for i := 0; i < n; i++ {
			cum += probs[i]
			if cum >= s.p.TopP {
				n = i + 1
				break
			}
		}
	}
	var total float64
	for _, p := range probs[:n] {
		total += p
	}
	return probs[:n], total
}

// topK appends to dst the k largest finite logits (ties toward lower ids),
// in no particular order, using a min-heap of size k: one comparison per
// logit for most of a large vocabulary.
func topK(dst []candidate, logits []float32, k int) []candidate {
	// worse reports whether a ranks below b.
	worse := func(a, b candidate) bool { return a.logit < b.logit || (a.logit == b.logit && a.id > b.id) }
	h := dst
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && worse(h[c+1], h[c]) {
				c++
			}
			if !worse(h[c], h[i]) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	// Fill the heap with the first k tokens that may come.
	id := 0
	for ; id < len(logits) && len(h) < k; id++ {
		v := logits[id]
		if v != v || math.IsInf(float64(v), -1) {
			continue
		}
		h = append(h, candidate{id, float64(v)})
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !worse(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	if len(h) < k {
		return h
	}
	// Then one comparison with the heap's worst decides, and is false
	// for a masked (-Inf) or NaN logit too: testing those apart would be
	// a branch taken at random under a constraint's mask (half the
	// vocabulary inside a JSON string), five times slower.
	for ; id < len(logits); id++ {
		v := float64(logits[id])
		if v > h[0].logit || v == h[0].logit && id < h[0].id {
			h[0] = candidate{id, v}
			down(0)
		}
	}
	return h
}

// kthLargest returns the k-th largest logit (1-based) of cands, by
// quickselect on a copy of the values: linear time on average, so top-k over
// a 250k vocabulary costs well under a millisecond.
func kthLargest(cands []candidate, k int) float64 {
	vals := make([]float64, len(cands))
	for i, c := range cands {
		vals[i] = c.logit
	}
	lo, hi, want := 0, len(vals)-1, k-1 // index of the answer in descending order
	for lo < hi {
		pivot := vals[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for vals[i] > pivot {
				i++
			}
			for vals[j] < pivot {
				j--
			}
			if i <= j {
				vals[i], vals[j] = vals[j], vals[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return vals[want]
		}
	}
	return vals[want]
}

// LogSoftmax returns log(softmax(logits)) in float64.
func LogSoftmax(logits []float32) []float64 {
	out := make([]float64, len(logits))
	maxL := math.Inf(-1)
	for _, v := range logits {
		maxL = max(maxL, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - maxL)
	}
	lse := maxL + math.Log(sum)
	for i, v := range logits {
		out[i] = float64(v) - lse
	}
	return out
}
