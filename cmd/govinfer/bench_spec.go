package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/model"
)

// specResult is the speculative part of bench --json (--speculative-config).
type specResult struct {
	// SpecMethod and SpecK are the configuration's method and
	// num_speculative_tokens.
	SpecMethod string `json:"spec_method,omitempty"`
	SpecK      int    `json:"spec_num_tokens,omitempty"`
	// SpecDraftDType is the configuration's draft_dtype ("exact",
	// "q8_0", ...) for MTP, and SpecDraftFormat the format the draft
	// steps read lm_head in ("Q8_0", ...; the main model's where it is as
	// small already, "keep" for an unquantized one).
	SpecDraftDType  string `json:"spec_draft_dtype,omitempty"`
	SpecDraftFormat string `json:"spec_draft_format,omitempty"`
	// SpecDecodeTokensPerSecond is the median decode rate of one request
	// through the engine with speculation, SpecPlainTokensPerSecond the
	// same request's without it (same engine settings, same run), and
	// SpecSpeedup their ratio.
	SpecDecodeTokensPerSecond float64 `json:"spec_decode_tokens_per_second,omitempty"`
	SpecPlainTokensPerSecond  float64 `json:"spec_plain_decode_tokens_per_second,omitempty"`
	SpecSpeedup               float64 `json:"spec_speedup,omitempty"`
	// SpecDraftTokens and SpecAcceptedTokens are the drafts of the last
	// timed run and those accepted; SpecAcceptedPerRound is accepted
	// drafts per round (a round drafts spec_num_tokens).
	SpecDraftTokens      int     `json:"spec_draft_tokens,omitempty"`
	SpecAcceptedTokens   int     `json:"spec_accepted_tokens,omitempty"`
	SpecAcceptedPerRound float64 `json:"spec_accepted_per_round,omitempty"`
	// SpecDraftAcceptance is --draft-acceptance (-1 without it).
	SpecDraftAcceptance float64 `json:"spec_draft_acceptance,omitempty"`
	// SpecVerifyCost is the time of a verify step of spec_num_tokens+1
	// positions and SpecDraftCost that of one MTP draft step (0 for
	// n-gram drafts), each over one plain decode step's, medians measured
	// in this run (specCosts).
	SpecVerifyCost float64 `json:"spec_verify_cost,omitempty"`
	SpecDraftCost  float64 `json:"spec_draft_cost,omitempty"`
	// SpecPredictedSpeedup is the speedup the costs predict at the
	// acceptance per draft measured (accepted over drafted) or, with
	// --draft-acceptance, set.
	SpecPredictedSpeedup float64 `json:"spec_predicted_speedup,omitempty"`
	// SpecDraftBytesFraction is the weight bytes of a draft step over a
	// decode step's on this model (model.DraftBytes / DecodeBytes).
	SpecDraftBytesFraction float64 `json:"spec_draft_bytes_fraction,omitempty"`
	// SpecProjected9BDraftFraction is that share for a model of this
	// one's widths and formats with the 9B's 32 layers
	// (model.DraftBytesFraction): on the 9B-width test model, the real
	// 9B's in this run's weight formats (main and draft).
	SpecProjected9BDraftFraction float64 `json:"spec_projected_9b_draft_bytes_fraction,omitempty"`
	// SpecProjected9BSpeedup projects the speedup of a real Qwen3.5-9B
	// in this run's formats (draft steps reading
	// spec_projected_9b_draft_bytes_fraction of its decode bytes) at
	// projectedAcceptance per draft, from this run's costs: the draft
	// cost scaled by the ratio of the byte fractions, the verify cost as
	// measured.
	SpecProjected9BSpeedup float64 `json:"spec_projected_9b_speedup,omitempty"`
	// With --profile: time by operation of the plain decode steps, the
	// verify steps and the draft steps that measured the costs, per step.
	SpecPlainStepProfile  []profileRow `json:"spec_plain_step_profile,omitempty"`
	SpecVerifyStepProfile []profileRow `json:"spec_verify_step_profile,omitempty"`
	SpecDraftStepProfile  []profileRow `json:"spec_draft_step_profile,omitempty"`
}

// specJSONKeys is the --json help of the speculative keys.
const specJSONKeys = "; with --speculative-config: spec_method, spec_num_tokens, spec_decode_tokens_per_second, spec_plain_decode_tokens_per_second, spec_speedup, " +
	"spec_draft_tokens, spec_accepted_tokens, spec_accepted_per_round, spec_draft_acceptance (--draft-acceptance), " +
	"spec_verify_cost and spec_draft_cost (a verify step of num_speculative_tokens+1 positions and one draft step, each over one plain decode step), " +
	"spec_predicted_speedup (from those costs at the acceptance measured or set), spec_draft_bytes_fraction, " +
	"spec_draft_dtype and spec_draft_format (the format draft steps read lm_head in), spec_projected_9b_draft_bytes_fraction (that share for this model's widths and formats at the 9B's 32 layers: 16 % exact in BF16), " +
	"spec_projected_9b_speedup (a real 9B in this run's formats, from these costs, at 80 % acceptance), " +
	"with --profile spec_plain_step_profile, spec_verify_step_profile and spec_draft_step_profile (rows of op, count and ms per step of those measuring the costs)"

// engineDecode runs one greedy request of gen tokens over ids through an
// engine with the given speculation and returns its decode rate (tokens
// per second from the end of the first step after the prompt's to the
// last, by the engine's commit times: the prompt's and the head's run over
// it left out), its tokens and the stream's draft counts.
func engineDecode(ctx context.Context, m *model.Model, ids []int, gen int, spec engine.Speculative) (rate float64, toks []int, drafted, accepted int, err error) {
	if gen < 2 {
		return 0, nil, 0, 0, errors.New("--gen must be at least 2 to time speculative decoding")
	}
	eng, err := engine.New(m, engine.Config{MaxNumSeqs: 1, ChunkTokens: min(engine.DefaultChunkTokens, m.MaxStepTokens()), Speculative: spec})
	if err != nil {
		return 0, nil, 0, 0, err
	}
	defer eng.Close()
	st, err := eng.Submit(ctx, engine.Request{Prompt: ids, MaxTokens: gen})
	if err != nil {
		return 0, nil, 0, 0, err
	}
	// Steps are timed by when the engine committed their tokens, not by
	// when they arrive here (a busy machine delivers several steps at
	// once). The clock starts at the first step after the prompt's: the
	// prompt's token comes before the head's run over the prompt.
	var at []time.Time // the commit time of each token
	for {
		out, err := st.Next(ctx)
		if err != nil {
			return 0, nil, 0, 0, err
		}
		for _, t := range out.Tokens {
			toks = append(toks, t.ID)
			at = append(at, t.At)
		}
		if out.Finish == engine.FinishError {
			return 0, nil, 0, 0, out.Err
		}
		if out.Finish != engine.FinishNone {
			break
		}
	}
	if len(toks) != gen {
		return 0, nil, 0, 0, fmt.Errorf("the engine generated %d tokens, want %d", len(toks), gen)
	}
	drafted, accepted = st.SpecTokens()
	steps := 0 // steps seen; from is the first token after the second
	from := len(at)
	for i := range at {
		if i == 0 || !at[i].Equal(at[i-1]) {
			steps++
			if steps == 3 {
				from = i
				break
			}
		}
	}
	if from == len(at) {
		return 0, nil, 0, 0, errors.New("--gen too small: the engine committed the tokens in two steps")
	}
	first, last := at[from-1], at[len(at)-1]
	return float64(len(at)-from) / last.Sub(first).Seconds(), toks, drafted, accepted, nil
}

// benchSpec times decoding with and without speculation through the
// engine, repeat times each, measures the costs of its steps and fills in
// res's speculative keys. With acceptance in [0, 1] (--draft-acceptance),
// drafts are replaced by the plain run's tokens at that rate.
func benchSpec(ctx context.Context, m *model.Model, ids []int, gen, repeat int, spec engine.Speculative, acceptance float64, prof opProfiler, res *specResult) error {
	var plain, specd []float64
	for range repeat {
		p, truth, _, _, err := engineDecode(ctx, m, ids, gen, engine.Speculative{})
		if err != nil {
			return err
		}
		sp := spec
		if acceptance >= 0 {
			sp.Rewrite = acceptanceRewrite(truth, acceptance, m.Config().VocabSize)
		}
		s, _, d, a, err := engineDecode(ctx, m, ids, gen, sp)
		if err != nil {
			return err
		}
		plain, specd = append(plain, p), append(specd, s)
		res.SpecDraftTokens, res.SpecAcceptedTokens = d, a
	}
	res.SpecMethod, res.SpecK = spec.Method, spec.Tokens
	if spec.Method == "mtp" {
		res.SpecDraftDType = cmp.Or(spec.DraftQuantize, "exact")
		res.SpecDraftFormat = m.DraftType().String()
	}
	res.SpecPlainTokensPerSecond, res.SpecDecodeTokensPerSecond = median(plain), median(specd)
	res.SpecSpeedup = res.SpecDecodeTokensPerSecond / res.SpecPlainTokensPerSecond
	if res.SpecDraftTokens > 0 {
		res.SpecAcceptedPerRound = float64(res.SpecAcceptedTokens) / float64(res.SpecDraftTokens/spec.Tokens)
	}
	var err error
	var profs [3][]opTime
	n := max(5, 2*repeat)
	if res.SpecVerifyCost, res.SpecDraftCost, err = specCosts(ctx, m, ids, spec.Tokens, n, prof, &profs); err != nil {
		return fmt.Errorf("measuring step costs: %w", err)
	}
	if prof != nil {
		res.SpecPlainStepProfile = profileRows(profs[0], n)
		res.SpecVerifyStepProfile = profileRows(profs[1], n)
		if m.HasMTP() {
			res.SpecDraftStepProfile = profileRows(profs[2], n)
		}
	}
	p := acceptance
	if p < 0 {
		p = perDraftAcceptance(res.SpecAcceptedPerRound, spec.Tokens)
	} else {
		res.SpecDraftAcceptance = p
	}
	res.SpecPredictedSpeedup = predictedSpeedup(res.SpecVerifyCost, res.SpecDraftCost, p, spec.Tokens)
	if db := m.DraftBytes(); db > 0 {
		res.SpecDraftBytesFraction = float64(db) / float64(m.DecodeBytes())
		res.SpecProjected9BDraftFraction = m.DraftBytesFraction(projectedLayers)
		draft9B := res.SpecDraftCost * res.SpecProjected9BDraftFraction / res.SpecDraftBytesFraction
		res.SpecProjected9BSpeedup = predictedSpeedup(res.SpecVerifyCost, draft9B, projectedAcceptance, spec.Tokens)
	}
	return nil
}

// perDraftAcceptance returns the acceptance p per draft for which a round
// of k drafts accepts perRound on average (p + p^2 + ... + p^k), by
// bisection.
func perDraftAcceptance(perRound float64, k int) float64 {
	lo, hi := 0.0, 1.0
	for range 50 {
		mid := (lo + hi) / 2
		sum, pi := 0.0, 1.0
		for range k {
			pi *= mid
			sum += pi
		}
		if sum < perRound {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// projectedLayers is the real Qwen3.5-9B's number of decoder layers: on
// the 9B-width test model, whose layers are the 9B's (three Gated
// DeltaNet to one attention layer), a draft step reads
// model.DraftBytesFraction(projectedLayers) of the 9B's decode bytes
// (lm_head and the MTP head in BF16: ~16 % of 15.9 GB, issue 37); and
// projectedAcceptance is the acceptance per draft the projection assumes
// (published first-draft acceptance of the 9B: 72-85 %).
const (
	projectedLayers     = 32
	projectedAcceptance = 0.8
)

// specCosts measures, on one sequence after prefilling ids, the time of a
// verify step of k+1 positions (the argmax and hidden row of each, as the
// engine verifies a greedy request) and of one MTP draft step (zero
// without a head), each over the
// time of a plain greedy decode step at the same position, medians of n
// interleaved trials (the sequence is rewound after each). With prof, it
// adds the operations of the plain, verify and draft steps to profs[0],
// profs[1] and profs[2].
func specCosts(ctx context.Context, m *model.Model, ids []int, k, n int, prof opProfiler, profs *[3][]opTime) (verify, draft float64, err error) {
	seq, err := m.NewSequence()
	if err != nil {
		return 0, 0, err
	}
	defer seq.Close()
	if err := seq.Reserve(len(ids) + k + 1); err != nil {
		return 0, 0, err
	}
	out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: ids, Logits: model.LastLogits, Hidden: true}})
	if err != nil {
		return 0, 0, err
	}
	tok := compute.Argmax(out[0].Logits)
	snap, err := seq.SaveRecurrent()
	if err != nil {
		return 0, 0, err
	}
	defer snap.Free()
	var ds *model.DraftSequence
	var g []float32
	if m.HasMTP() {
		if ds, err = m.NewDraftSequence(); err != nil {
			return 0, 0, err
		}
		defer ds.Close()
		d, err := m.DraftStep(ctx, []model.DraftInput{{Seq: ds, Tokens: append(slices.Clone(ids[1:]), tok), Hidden: out[0].Hidden, Logits: model.LastArgmax}})
		if err != nil {
			return 0, 0, err
		}
		g = d[0].Hidden
	}
	rows := make([]int, k+1)
	for i := range rows {
		rows[i] = (tok + i) % m.Config().VocabSize
	}
	var plain, ver, dr []float64
	timed := func(f func() error) (float64, error) {
		if prof != nil {
			prof.take()
		}
		start := time.Now()
		err := f()
		return time.Since(start).Seconds(), err
	}
	profiled := func(i int) {
		if prof != nil {
			profs[i] = addProfile(profs[i], prof.take())
		}
	}
	for range n {
		t, err := timed(func() error {
			_, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: rows[:1], Logits: model.LastArgmax, Decode: true}})
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		plain = append(plain, t)
		profiled(0)
		if err := seq.Rewind(snap); err != nil {
			return 0, 0, err
		}
		if t, err = timed(func() error {
			_, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: rows, Logits: model.AllArgmax, Hidden: true, Decode: true}})
			return err
		}); err != nil {
			return 0, 0, err
		}
		ver = append(ver, t)
		profiled(1)
		if err := seq.Rewind(snap); err != nil {
			return 0, 0, err
		}
		if ds == nil {
			continue
		}
		if t, err = timed(func() error {
			_, err := m.DraftStep(ctx, []model.DraftInput{{Seq: ds, Tokens: rows[:1], Hidden: g, Logits: model.LastArgmax}})
			return err
		}); err != nil {
			return 0, 0, err
		}
		dr = append(dr, t)
		profiled(2)
		if err := ds.Truncate(len(ids)); err != nil {
			return 0, 0, err
		}
	}
	p := median(plain)
	verify = median(ver) / p
	if ds != nil {
		draft = median(dr) / p
	}
	return verify, draft, nil
}

// predictedSpeedup is what the costs predict for speculation with k drafts
// per round, each accepted with probability p given the ones before it
// were: a round commits 1 + p + ... + p^k tokens on average for one verify
// step and k draft steps (k-1 chained, one over the committed positions),
// against one plain step per token; a rejected round defers its accepted
// tokens to the next step, and past k+1 deferred tokens (the engine's
// bound) feeds them in a step of their own, costed as a plain step. The
// rounds are simulated (a fixed seed, 10^5 rounds) to count those steps.
func predictedSpeedup(verify, draft, p float64, k int) float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	var tokens, cost float64
	unfed := 0
	for range 100000 {
		a := 0
		for a < k && rng.Float64() < p {
			a++
		}
		tokens += float64(a + 1)
		cost += verify + float64(k)*draft
		switch keep := unfed + 1 + a; {
		case a == k:
			unfed = 0
		case keep <= k+1:
			unfed = keep
		default:
			cost++ // the re-feed step
			unfed = 0
		}
	}
	return tokens / cost
}

// acceptanceRewrite returns a Speculative.Rewrite that replaces each draft
// by the true token (truth: the tokens of a plain greedy run of the same
// request) with probability p, and by another token otherwise, drawn from
// a fixed seed.
func acceptanceRewrite(truth []int, p float64, vocab int) func(int, []int) {
	rng := rand.New(rand.NewPCG(37, 38))
	return func(generated int, drafts []int) {
		for j := range drafts {
			i := generated + j
			if i >= len(truth) {
				return
			}
			if rng.Float64() < p {
				drafts[j] = truth[i]
			} else {
				drafts[j] = (truth[i] + 1) % vocab
			}
		}
	}
}
