package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/sample"
)

// MaxSpeculativeTokens is the most draft tokens a speculative round may
// propose (Speculative.Tokens).
const MaxSpeculativeTokens = 4

// DefaultLookup is the n-gram size Speculative.LookupMin and LookupMax
// default to (vLLM's prompt_lookup_min and prompt_lookup_max defaults).
const DefaultLookup = 5

// Speculative configures speculative decoding (Config.Speculative).
//
// With Method "mtp" the model's multi-token-prediction head (a model opened
// with model.Options.MTP) drafts Tokens tokens per round for each request;
// with Method "ngram" the drafts are copied from the request's prompt and
// output: the tokens that followed the latest earlier occurrence of its
// last n tokens, for the largest n from LookupMax down to LookupMin that
// occurred (no weights, no draft steps; up to Tokens drafts, none where
// nothing matches). The main model verifies the drafts in one step of up
// to Tokens+1 positions; the rejected drafts' state is rolled back
// (model.Sequence.Rewind, the accepted tokens fed again ahead of the next
// step's).
//
// Every verified position's logits go through exactly what plain decoding
// would apply at that position, in the same state: logit bias, logprobs,
// the logit processor (a constraint, a thinking budget's forced text),
// min_tokens' masking of the stop tokens, the penalties as of the tokens
// before it; positions are decided one after the other and the state
// advances over each token committed, so a request ends where plain
// decoding would (stop tokens, MaxTokens).
//
// Greedy requests (temperature 0) commit the longest prefix of drafts
// equal to the main model's choices, and the main model's own token after
// it: the output is exactly plain greedy decoding's. The verify rows run on
// the decode kernels (model.Input.Decode), as plain decoding's one row
// does, and on the CPU the model runs their attention one token at a time,
// as plain decoding would, so their logits equal plain decoding's bit for
// bit (TestSpeculativeVerifyLogitsExact, at short and at split long
// contexts). Other backends verify in one attention call per sequence:
// their tokens may differ from plain decoding's only where the last bits
// decide a near tie.
//
// Sampled requests draw each draft from the drafter's distribution q (the
// head's logits with the request's logit bias, penalties and sampling
// parameters) and accept it by the speculative-sampling rule
// (sample.Sampler.Speculate): the output is distributed as plain
// sampling's, and a seed gives the same output every time (all draws come
// from the request's one random source).
//
// With a logit processor that can fork (ForkingProcessor), drafts the
// processor rules out are dropped before verification: a fork is advanced
// over the drafts and the first it masks cuts the round short.
//
// Speculating requests draft and verify alongside other sequences in the
// same steps (the head's drafts of all of them in batched head steps).
// Near the model's context the drafts of a round are cut to fit; where not
// even one fits the request decodes plainly.
//
// Every MTP round drafts Tokens tokens and counts them in full
// (Stream.SpecTokens, Stats), the last round's too even where MaxTokens or
// a stop token cuts the committed tokens; drafts a processor ruled out
// count as rejected.
type Speculative struct {
	// Method is "mtp" or "ngram"; empty turns speculation off.
	Method string
	// Tokens is the number of drafts per round, 1 to
	// MaxSpeculativeTokens (vLLM's num_speculative_tokens).
	Tokens int
	// LookupMin and LookupMax bound the n-grams Method "ngram" looks up
	// (vLLM's prompt_lookup_min and prompt_lookup_max); zero means
	// DefaultLookup.
	LookupMin, LookupMax int
	// Rewrite, when set, may replace the drafts of a round before they
	// are verified: generated is the number of tokens the request has
	// generated so far, so drafts[j] stands for its token generated+j (0
	// based). A replaced draft of a sampled request is taken as drawn
	// from a point mass. It is for benchmarks (bench --draft-acceptance),
	// which set the acceptance rate real weights would give.
	Rewrite func(generated int, drafts []int)
	// NoBackoff keeps a request speculating whatever its acceptance (see
	// Backoff); the zero value backs off.
	NoBackoff bool
	// DraftQuantize is the block format the MTP head drafts in
	// (model.Options.DraftQuantize: "q8_0", "q6_k", "q4_k"; empty for
	// exact drafts). It is a load option: whoever opens the model for
	// this configuration (llm.Open, the govinfer commands) passes it on,
	// and the engine drafts with whatever head the model loaded. The
	// output does not depend on it, only which drafts are accepted and
	// what a draft step costs.
	DraftQuantize string
	// backoffAt, when positive, replaces the cost of a round the back-off
	// weighs its tokens against (tests).
	backoffAt float64
}

// Back-off: a request whose drafts the main model mostly rejects stops
// speculating for a while, so that speculation never costs much more than
// plain decoding. Its rounds are judged in windows of BackoffWindow
// rounds: a window that committed fewer tokens than its rounds cost in
// plain decode steps (roundCost, and a step for each re-feed) pauses
// speculation for BackoffPause plain steps, twice as many after each
// further such window up to BackoffMaxPause, and a window that pays resets
// the pause. A pause costs nothing but the main model's hidden rows of its
// steps, from which the head catches up in one step when it ends.
//
// A window of rounds that accept nothing costs BackoffWindow × (cost − 1)
// plain steps more than plain decoding, against BackoffWindow + pause
// tokens: at a round cost of up to 4.3 plain steps (k = 4 drafts on the
// 4-layer 9B-width test model, whose lm_head makes draft steps dear: about
// 4.2 with re-feeds; the real 9B's about 1.9) the first window and pause
// cost under 10 %, and later ones, with doubled pauses, less. Requests
// shorter than a window and its pause pay more, at most one window's
// worth.
const (
	BackoffWindow   = 4
	BackoffPause    = 128
	BackoffMaxPause = 2048
)

// Per-round costs, in plain decode steps, behind the back-off, from bench
// --speculative-config on the 4-layer 9B-width model (2 threads, CPU, 18
// runs on a shared machine, medians): a main step of n positions costs
// 1 + verifyRowCost × (n − 1) (verify steps of 2, 3 and 4 positions
// measured 1.01, 1.18 and 1.21), and an MTP draft step draftCostPerByte ×
// the share of a decode step's weight bytes it reads (model.DraftBytes
// over DecodeBytes: 0.67 there, where a draft step measured 0.66).
const (
	verifyRowCost    = 0.07
	draftCostPerByte = 1.0
)

// roundCost returns what a round of speculation costs in plain decode
// steps: its verify step of rows positions and, for MTP, the head's
// Tokens draft steps (Tokens-1 chained, one over the committed
// positions).
func (e *Engine) roundCost(rows int) float64 {
	cost := 1 + verifyRowCost*float64(rows-1)
	if e.cfg.Speculative.Method == "mtp" {
		cost += float64(e.cfg.Speculative.Tokens) * draftCostPerByte * float64(e.m.DraftBytes()) / float64(e.m.DecodeBytes())
	}
	return cost
}

// ForkingProcessor is a LogitProcessor that can be copied at its current
// point: speculative decoding advances a fork over a round's drafts to
// drop those the processor rules out before they are verified (the
// processor itself only ever advances over committed tokens).
type ForkingProcessor interface {
	LogitProcessor
	// Fork returns an independent copy at the same point.
	Fork() LogitProcessor
}

// check validates the configuration against the model.
func (sc Speculative) check(m *model.Model) error {
	switch sc.Method {
	case "":
		if sc.Tokens != 0 {
			return fmt.Errorf("engine: %d speculative tokens without a speculative method", sc.Tokens)
		}
		return nil
	case "mtp", "ngram":
	default:
		return fmt.Errorf("engine: unknown speculative method %q (known: mtp, ngram)", sc.Method)
	}
	if sc.Tokens < 1 || sc.Tokens > MaxSpeculativeTokens {
		return fmt.Errorf("engine: speculative tokens must be 1 to %d, got %d", MaxSpeculativeTokens, sc.Tokens)
	}
	if _, err := model.ParseDraftType(sc.DraftQuantize); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if sc.Method == "ngram" {
		if sc.DraftQuantize != "" {
			return errors.New("engine: a draft quantization is for method mtp (n-gram drafts read no weights)")
		}
		lo, hi := sc.lookup()
		if lo < 1 || hi < lo {
			return fmt.Errorf("engine: n-gram lookup sizes must be 1 <= min <= max, got %d and %d", lo, hi)
		}
		return nil
	}
	if !m.HasMTP() {
		return errors.New("engine: mtp speculation needs the model's MTP head (model.Options.MTP; the checkpoint must hold mtp.* weights)")
	}
	return nil
}

// lookup returns the n-gram sizes, defaults applied.
func (sc Speculative) lookup() (lo, hi int) {
	lo, hi = cmp.Or(sc.LookupMin, DefaultLookup), cmp.Or(sc.LookupMax, DefaultLookup)
	if sc.LookupMin == 0 && sc.LookupMax != 0 {
		lo = hi
	}
	if sc.LookupMax == 0 && sc.LookupMin != 0 {
		hi = lo
	}
	return lo, hi
}

// ngramDrafts returns up to k tokens of ctx that followed the latest
// earlier occurrence of its last n tokens, for the largest n from hi down
// to lo that occurred before; none where nothing matches.
func ngramDrafts(ctx []int, k, lo, hi int) []int {
	for n := min(hi, len(ctx)-1); n >= lo; n-- {
		suffix := ctx[len(ctx)-n:]
		for i := len(ctx) - n - 1; i >= 0; i-- {
			if ctx[i+n-1] == suffix[n-1] && slices.Equal(ctx[i:i+n], suffix) {
				return ctx[i+n : min(i+n+k, len(ctx))]
			}
		}
	}
	return nil
}

// speculates reports whether a request runs speculative rounds: whenever
// the engine speculates.
func (e *Engine) speculates(*Request) bool {
	return e.cfg.Speculative.Tokens > 0
}

// specState is the speculative state of one running request.
type specState struct {
	ds   *model.DraftSequence // nil for n-gram drafts
	hist []int                // n-gram drafts: the prompt and every token generated
	snap *model.RecurrentState
	// off is the main position of the draft sequence's first entry: the
	// prompt tokens resumed from the prefix cache have no hidden rows, so
	// the head drafts from the positions after them (its rotary delta
	// shifted to match).
	off   int
	ready bool // the head has run over the prompt: draft (or qLogits) and g are set
	// sampled: the request samples (temperature > 0); its drafts are drawn
	// from the head's distribution, kept in qs for the acceptance rule.
	sampled bool
	draft   int       // greedy: the head's argmax at the last committed position, the next d_1
	qLogits []float32 // sampled: the head's logits there, d_1's distribution
	g       []float32
	k       int           // drafts of the current round
	counted int           // drafts the round counts (k before a processor cut them)
	drafts  []int         // d_1..d_k of the current round
	qs      []sample.Dist // sampled: the distribution each draft was drawn from
	row     []float32     // scratch: a row a forked processor masks
	// Back-off: rounds and committed tokens of the current window, plain
	// steps left of a pause, the next pause's length, and the head's
	// input over the positions a pause decoded (their tokens and hidden
	// rows), which it runs when the pause ends.
	winRounds, winTokens int
	winCost              float64
	pause, pauseLen      int
	pendTokens           []int
	pendHidden           []float32
}

// judge counts a round that committed n tokens at the given cost (in plain
// steps) in the back-off window and, once the window is full, pauses
// speculation if it did not pay.
func (e *Engine) judge(sp *specState, n int, cost float64) {
	if e.cfg.Speculative.NoBackoff {
		return
	}
	sp.winRounds++
	sp.winTokens += n
	sp.winCost += cost
	if sp.winRounds < BackoffWindow {
		return
	}
	if sp.pauseLen == 0 {
		sp.pauseLen = BackoffPause
	}
	if at := e.cfg.Speculative.backoffAt; at > 0 {
		sp.winCost = at * float64(sp.winRounds)
	}
	if float64(sp.winTokens) < sp.winCost {
		sp.pause = sp.pauseLen
		sp.pauseLen = min(2*sp.pauseLen, BackoffMaxPause)
	} else {
		sp.pauseLen = BackoffPause
	}
	sp.winRounds, sp.winTokens, sp.winCost = 0, 0, 0
}

// pauseCatchUp is the most positions a paused request's head falls
// behind: it runs over them in one step every pauseCatchUp plain steps,
// which bounds the hidden rows kept.
const pauseCatchUp = 64

// paused records a plain step of a request whose speculation is paused:
// the token it chose and the hidden row it was chosen from, for the head.
// It returns the head's run over the positions kept, when there is one
// to run: every pauseCatchUp steps and when the pause ends, after which
// the request drafts again.
func (e *Engine) paused(r *running, tok int, hidden []float32) (specFollowUp, bool) {
	sp := r.spec
	sp.pause--
	if sp.ds == nil {
		return specFollowUp{}, false
	}
	sp.pendTokens = append(sp.pendTokens, tok)
	sp.pendHidden = append(sp.pendHidden, hidden...)
	mode := sp.headMode()
	switch {
	case sp.pause == 0:
		sp.ready = false // until the head has run
	case len(sp.pendTokens) >= pauseCatchUp:
		mode = model.NoLogits
	default:
		return specFollowUp{}, false
	}
	f := specFollowUp{r: r, headLen: -1, draft: model.DraftInput{Seq: sp.ds, Tokens: sp.pendTokens, Hidden: sp.pendHidden, Logits: mode}}
	sp.pendTokens, sp.pendHidden = nil, nil
	return f, true
}

func (sp *specState) close() {
	if sp.ds != nil {
		sp.ds.Close()
	}
	sp.snap.Free()
}

// headMode is what the head's last position gives a request: its argmax
// for greedy drafts, its logits for sampled ones.
func (sp *specState) headMode() model.LogitsMode {
	if sp.sampled {
		return model.LastLogits
	}
	return model.LastArgmax
}

// startSpec gives a request that speculates its draft sequence and
// snapshot; the head starts at the prompt position the request resumes at.
func (e *Engine) startSpec(r *running) error {
	snap, err := r.seq.SaveRecurrent()
	if err != nil {
		return err
	}
	sp := &specState{snap: snap, off: r.fed, sampled: !r.s.req.Params.Greedy()}
	if e.cfg.Speculative.Method == "ngram" {
		sp.hist = slices.Clone(r.s.req.Prompt)
	} else {
		if sp.ds, err = e.m.NewDraftSequence(); err != nil {
			snap.Free()
			return err
		}
		sp.ds.SetRopeDelta(r.s.req.RopeDelta + r.fed)
	}
	r.spec = sp
	return nil
}

// specBytes is the state a speculating request holds besides its sequence:
// the rollback snapshot and the head's cache of one attention layer for
// tokens positions (approximate: the head's cache grows by doubling).
func (e *Engine) specBytes(tokens int) int64 {
	attn := 0
	for _, t := range e.m.Config().LayerTypes {
		if t != model.LinearAttention {
			attn++
		}
	}
	b := e.m.RecurrentBytes()
	if attn > 0 && e.cfg.Speculative.Method == "mtp" {
		b += int64(tokens) * e.m.KVBytesPerToken() / int64(attn)
	}
	return b
}

// verifyInput is the main model's input of a verify step: the committed
// tokens not fed yet (unfed, then last) and the drafts, on the decode
// kernels as plain decoding's one row, with the hidden rows of every
// position and their logits or, where plain decoding would take the argmax
// alone (argmax: a greedy request that nothing else reads the logits of,
// which stays so for the rest of the request), their argmaxes: the logits
// of K+1 positions are megabytes to move that nothing reads.
func verifyInput(seq *model.Sequence, unfed []int, last int, drafts []int, argmax bool) model.Input {
	toks := append(append(slices.Clone(unfed), last), drafts...)
	mode := model.AllLogits
	if argmax {
		mode = model.AllArgmax
	}
	return model.Input{Seq: seq, Tokens: toks, Logits: mode, Hidden: true, Decode: true}
}

// drafting reports whether r drafts at this step: it decodes, its head is
// ready and its speculation is not paused (back-off).
func (r *running) drafting() bool {
	return r.spec != nil && r.spec.ready && r.spec.pause == 0 && r.fed == len(r.s.req.Prompt)
}

// draftAll runs the head's draft chains of every drafting request, batched:
// d_1 is left by the previous round, d_j comes from d_{j-1} and the head's
// g (greedy requests take the head's argmax, sampled ones draw from its
// distribution). Each request's drafts are then rewritten (Rewrite), cut
// where its processor rules one out, and its recurrent state snapshotted
// for the rollback. Requests that fail are ended and marked in ended; it
// returns false when the engine is shutting down.
func (e *Engine) draftAll(ctx context.Context, run []*running, ended map[*running]bool) bool {
	maxCtx := e.m.Config().MaxContext()
	var rs []*running
	for _, r := range run {
		if !r.drafting() {
			continue
		}
		sp := r.spec
		// The verify step writes positions n..n+len(unfed)+k.
		sp.k = min(e.cfg.Speculative.Tokens, maxCtx-r.seq.Len()-len(r.unfed)-1)
		if sp.k < 1 {
			// No room for a draft: decode plainly from here.
			sp.close()
			r.spec = nil
			continue
		}
		sp.drafts, sp.qs = sp.drafts[:0], sp.qs[:0]
		switch {
		case sp.ds == nil:
			lo, hi := e.cfg.Speculative.lookup()
			for _, d := range ngramDrafts(sp.hist, sp.k, lo, hi) {
				sp.drafts = append(sp.drafts, d)
				if sp.sampled {
					sp.qs = append(sp.qs, sample.Dist{IDs: []int{d}, Probs: []float64{1}})
				}
			}
		case sp.sampled:
			e.drawDraft(r, sp.qLogits)
		default:
			sp.drafts = append(sp.drafts, sp.draft)
		}
		rs = append(rs, r)
	}
	for {
		var ins []model.DraftInput
		var who []*running
		for _, r := range rs {
			sp := r.spec
			if !ended[r] && sp.ds != nil && len(sp.drafts) < sp.k {
				ins = append(ins, model.DraftInput{Seq: sp.ds, Tokens: sp.drafts[len(sp.drafts)-1:], Hidden: sp.g, Logits: sp.headMode()})
				who = append(who, r)
			}
		}
		if len(ins) == 0 {
			break
		}
		outs, err := e.m.DraftStep(ctx, ins)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			for _, r := range who {
				e.finish(r, FinishError, -1, fmt.Errorf("engine: draft step: %w", err))
				ended[r] = true
			}
			continue
		}
		for i, r := range who {
			sp := r.spec
			if sp.sampled {
				e.drawDraft(r, outs[i].Logits)
			} else {
				sp.drafts = append(sp.drafts, outs[i].Argmax[0])
			}
			sp.g = outs[i].Hidden
		}
	}
	for _, r := range rs {
		if ended[r] {
			continue
		}
		e.settleDrafts(r)
		if err := r.seq.SaveRecurrentTo(r.spec.snap); err != nil {
			e.finish(r, FinishError, -1, fmt.Errorf("engine: %w", err))
			ended[r] = true
		}
	}
	return true
}

// drawDraft draws the next draft of a sampled request from the head's
// logits: from q, their distribution under the request's logit bias,
// penalties and sampling parameters, which is kept for the acceptance
// rule.
func (e *Engine) drawDraft(r *running, logits []float32) {
	l := slices.Clone(logits)
	for id, b := range r.s.req.LogitBias {
		l[id] += b
	}
	q := r.sampler.Dist(l)
	r.spec.drafts = append(r.spec.drafts, r.sampler.Draw(q))
	r.spec.qs = append(r.spec.qs, q)
}

// settleDrafts fixes the drafts of r's round: it counts them, lets
// Speculative.Rewrite replace them, and cuts them before the first its
// processor rules out, when the processor can fork.
func (e *Engine) settleDrafts(r *running) {
	sp := r.spec
	sp.counted = len(sp.drafts)
	if rw := e.cfg.Speculative.Rewrite; rw != nil {
		before := slices.Clone(sp.drafts)
		rw(r.generated, sp.drafts)
		for j, d := range sp.drafts {
			if sp.sampled && d != before[j] {
				sp.qs[j] = sample.Dist{IDs: []int{d}, Probs: []float64{1}}
			}
		}
	}
	if fp, ok := r.s.req.Processor.(ForkingProcessor); ok && len(sp.drafts) > 0 {
		f := fp.Fork()
		sp.row = slices.Grow(sp.row[:0], e.m.Config().VocabSize)[:e.m.Config().VocabSize]
		for j, d := range sp.drafts {
			clear(sp.row)
			f.Process(sp.row)
			if math.IsInf(float64(sp.row[d]), -1) || (j < len(sp.drafts)-1 && f.Accept(d) != nil) {
				sp.drafts = sp.drafts[:j]
				break
			}
		}
	}
	sp.k = len(sp.drafts)
	if sp.sampled {
		sp.qs = sp.qs[:sp.k]
	}
}

// specFollowUp is the work a speculating request leaves after the main
// step: a re-feed of the accepted tokens after a rollback, when they are
// too many to wait for the next step (maxUnfed), and the head's run over
// the positions the step committed.
//
// A round whose drafts were not all accepted rewinds the sequence to its
// state before the verify step; its committed tokens (the ones fed before
// the drafts, and the accepted drafts) are not fed again at once, in a
// step of their own, but ahead of the next step's tokens (running.unfed):
// one pass over the weights per round, not two.
type specFollowUp struct {
	r       *running
	rewind  bool  // rewind the sequence to its snapshot
	refeed  []int // tokens to feed again after the rewind, in a step of their own
	headLen int   // the head's cache length before this round's positions; -1: keep it
	draft   model.DraftInput
}

// maxUnfed bounds the committed tokens a request defers to its next step
// (running.unfed) after a rollback: past it they are fed at once.
func (e *Engine) maxUnfed() int { return e.cfg.Speculative.Tokens + 1 }

// verify decides the tokens of r's verify step, one position after the
// other, each by what plain decoding would do there (Engine.sample on the
// position's logits, in the state the tokens before it left): a greedy
// request accepts a draft its choice equals, a sampled one by the
// speculative-sampling rule; the first position that does not accept its
// draft, or the one after the last draft, commits its own token and ends
// the round. Each token is emitted as it is decided; it reports whether r
// ended, and otherwise returns the follow-up work (the re-feed and the
// head's run).
func (e *Engine) verify(r *running, in model.Input, out model.Output, now time.Time) (bool, specFollowUp) {
	sp := r.spec
	v, h := e.m.Config().VocabSize, e.m.Config().HiddenSize
	// The rows of the tokens fed before last come first.
	off := len(r.unfed)
	fed := in.Tokens[:off+1] // unfed, then last
	base := r.seq.Len() - len(in.Tokens)
	hidden := out.Hidden[off*h:]
	// pick is the main model's token at verified position i as plain
	// decoding would choose it: the backend's argmax where the step gave
	// argmaxes (in.Logits is AllArgmax), else sampled from its logits row.
	pick := func(i int) (Token, error) {
		if out.Argmaxes != nil {
			return r.takeArgmax(out.Argmaxes[off+i]), nil
		}
		return e.sample(r, out.Logits[(off+i)*v:(off+i+1)*v])
	}
	committed := make([]int, 0, sp.k+1)
	a := 0
	ended := false
	for i := 0; i <= sp.k; i++ {
		if ended {
			// The round counts in full: a greedy request's acceptance
			// goes on as if nothing had ended it.
			if sp.sampled || i == sp.k {
				break
			}
			if tok, err := pick(i); err != nil || tok.ID != sp.drafts[i] {
				break
			}
			a++
			continue
		}
		var tok Token
		var err error
		accepted := false
		switch {
		case i == sp.k:
			tok, err = pick(i)
		case sp.sampled:
			row := out.Logits[(off+i)*v : (off+i+1)*v]
			tok, accepted, err = e.sampleDraft(r, row, sp.qs[i], sp.drafts[i])
		default:
			tok, err = pick(i)
			accepted = tok.ID == sp.drafts[i]
		}
		if err != nil {
			e.finish(r, FinishError, -1, err)
			ended = true
			break
		}
		committed = append(committed, tok.ID)
		if e.emit(r, tok, nil, now) {
			ended = true
			if !accepted {
				break
			}
			a++
			continue
		}
		if !accepted {
			break
		}
		a++
	}
	r.s.specDrafted.Add(int64(sp.counted))
	r.s.specAccepted.Add(int64(a))
	e.metrics.specDrafted.Add(uint64(sp.counted))
	e.metrics.specAccepted.Add(uint64(a))
	cost := e.roundCost(len(in.Tokens))
	if ended {
		e.judge(sp, a+1, cost)
		return true, specFollowUp{}
	}
	f := specFollowUp{r: r, headLen: base + off - sp.off,
		draft: model.DraftInput{Seq: sp.ds, Tokens: committed, Hidden: hidden[:len(committed)*h], Logits: sp.headMode()}}
	r.unfed = nil
	if a < sp.k {
		f.rewind = true
		if keep := append(slices.Clone(fed), sp.drafts[:a]...); len(keep) <= e.maxUnfed() {
			r.unfed = keep
		} else {
			f.refeed = keep
			cost += 1 + verifyRowCost*float64(len(keep)-1)
		}
	}
	e.judge(sp, a+1, cost)
	return false, f
}

// followUp rolls back the rejected drafts of the requests in fs (Rewind to
// the snapshot, then the accepted tokens fed again, batched) and runs the
// head over the committed positions (batched): its argmax at the last one
// is the next round's d_1. For a request whose prompt was just prefilled,
// draft holds the prompt chunk's head input. Failed requests are ended;
// it returns false when the engine is shutting down.
func (e *Engine) followUp(ctx context.Context, fs []specFollowUp, ended map[*running]bool) bool {
	var ins []model.Input
	var who []*running
	for _, f := range fs {
		if !f.rewind || ended[f.r] {
			continue
		}
		if err := f.r.seq.Rewind(f.r.spec.snap); err != nil {
			e.finish(f.r, FinishError, -1, fmt.Errorf("engine: %w", err))
			ended[f.r] = true
			continue
		}
		if f.refeed != nil {
			ins = append(ins, model.Input{Seq: f.r.seq, Tokens: f.refeed, Logits: model.NoLogits, Decode: true})
			who = append(who, f.r)
		}
	}
	if len(ins) > 0 {
		start := time.Now()
		_, err := e.m.Step(ctx, ins)
		e.metrics.observeStep(time.Since(start))
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			for _, r := range who {
				e.finish(r, FinishError, -1, fmt.Errorf("engine: model step: %w", err))
				ended[r] = true
			}
		}
	}
	var dins []model.DraftInput
	who = who[:0]
	for _, f := range fs {
		if ended[f.r] {
			continue
		}
		if f.draft.Seq == nil {
			continue // n-gram drafts: no head
		}
		if f.r.drafting() && f.headLen >= 0 {
			// A round: cut the head's cache back to where this round's
			// positions start (its drafts' entries go).
			if err := f.r.spec.ds.Truncate(f.headLen); err != nil {
				e.finish(f.r, FinishError, -1, fmt.Errorf("engine: %w", err))
				ended[f.r] = true
				continue
			}
		}
		dins = append(dins, f.draft)
		who = append(who, f.r)
	}
	if len(dins) == 0 {
		return true
	}
	outs, err := e.m.DraftStep(ctx, dins)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		for _, r := range who {
			e.finish(r, FinishError, -1, fmt.Errorf("engine: draft step: %w", err))
			ended[r] = true
		}
		return true
	}
	for i, r := range who {
		if dins[i].Logits == model.NoLogits {
			continue // a prompt chunk before the last
		}
		sp := r.spec
		sp.ready, sp.g = true, outs[i].Hidden
		if sp.sampled {
			sp.qLogits = outs[i].Logits
		} else {
			sp.draft = outs[i].Argmax[0]
		}
	}
	return true
}
