package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/model"
)

// MaxSpeculativeTokens is the most draft tokens a speculative round may
// propose (Speculative.Tokens).
const MaxSpeculativeTokens = 4

// Speculative configures speculative decoding (Config.Speculative).
//
// With Method "mtp" the model's multi-token-prediction head (a model opened
// with model.Options.MTP) drafts Tokens tokens per round for each greedy
// request, and the main model verifies them in one step of Tokens+1
// positions: the longest prefix of drafts the main model agrees with is
// committed, with the main model's own token after it, and the rejected
// drafts' state is rolled back (model.Sequence.Rewind, then the accepted
// tokens fed again). The output is exactly plain greedy decoding's: the
// verify rows run on the decode kernels (model.Input.Decode), as plain
// decoding's one row does, and on the CPU the model runs their attention
// one token at a time, as plain decoding would, so their logits equal
// plain decoding's bit for bit (TestSpeculativeVerifyLogitsExact, at short
// and at split long contexts). Other backends verify in one attention call
// per sequence: their tokens may differ from plain decoding's only where
// the last bits decide a near tie.
//
// Only greedy requests speculate: temperature 0 without
// repetition, presence or frequency penalties, logit bias, a logit
// processor (constraints), logprobs or min_tokens; any other request runs
// plain decoding, in the same batch. Speculating requests draft and verify
// alongside other sequences in the same steps (the drafts of all of them in
// batched head steps). Near the model's context the drafts of a round are
// cut to fit; where not even one fits the request decodes plainly.
//
// Every round drafts Tokens tokens and counts them in full
// (Stream.SpecTokens, Stats), the last round's too even where MaxTokens or
// a stop token cuts the committed tokens.
type Speculative struct {
	// Method is "mtp"; empty turns speculation off.
	Method string
	// Tokens is the number of drafts per round, 1 to
	// MaxSpeculativeTokens (vLLM's num_speculative_tokens).
	Tokens int
}

// check validates the configuration against the model.
func (sc Speculative) check(m *model.Model) error {
	switch sc.Method {
	case "":
		if sc.Tokens != 0 {
			return fmt.Errorf("engine: %d speculative tokens without a speculative method", sc.Tokens)
		}
		return nil
	case "mtp":
	default:
		return fmt.Errorf("engine: unknown speculative method %q (known: mtp)", sc.Method)
	}
	if sc.Tokens < 1 || sc.Tokens > MaxSpeculativeTokens {
		return fmt.Errorf("engine: speculative tokens must be 1 to %d, got %d", MaxSpeculativeTokens, sc.Tokens)
	}
	if !m.HasMTP() {
		return errors.New("engine: mtp speculation needs the model's MTP head (model.Options.MTP; the checkpoint must hold mtp.* weights)")
	}
	return nil
}

// speculates reports whether a request runs speculative rounds: the engine
// speculates and the request decodes greedily with nothing that needs the
// logits of each position (see Speculative).
func (e *Engine) speculates(req *Request) bool {
	p := req.Params
	return e.cfg.Speculative.Tokens > 0 && p.Greedy() && (p.RepetitionPenalty == 0 || p.RepetitionPenalty == 1) &&
		p.PresencePenalty == 0 && p.FrequencyPenalty == 0 && req.Processor == nil && len(req.LogitBias) == 0 &&
		!req.Logprobs && req.MinTokens == 0
}

// specState is the speculative state of one running request.
type specState struct {
	ds   *model.DraftSequence
	snap *model.RecurrentState
	// off is the main position of the draft sequence's first entry: the
	// prompt tokens resumed from the prefix cache have no hidden rows, so
	// the head drafts from the positions after them (its rotary delta
	// shifted to match).
	off    int
	ready  bool // the head has run over the prompt: draft and g are set
	draft  int  // the head's argmax at the last committed position: the next d_1
	g      []float32
	k      int   // drafts of the current round
	drafts []int // d_1..d_k of the current round
}

func (sp *specState) close() {
	sp.ds.Close()
	sp.snap.Free()
}

// startSpec gives a request that speculates its draft sequence and
// snapshot; the head starts at the prompt position the request resumes at.
func (e *Engine) startSpec(r *running) error {
	ds, err := e.m.NewDraftSequence()
	if err != nil {
		return err
	}
	snap, err := r.seq.SaveRecurrent()
	if err != nil {
		ds.Close()
		return err
	}
	ds.SetRopeDelta(r.s.req.RopeDelta + r.fed)
	r.spec = &specState{ds: ds, snap: snap, off: r.fed}
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
	if attn > 0 {
		b += int64(tokens) * e.m.KVBytesPerToken() / int64(attn)
	}
	return b
}

// verifyInput is the main model's input of a verify step: the last
// committed token and the drafts, on the decode kernels as plain decoding's
// one row, with the logits and hidden rows of every position.
func verifyInput(seq *model.Sequence, last int, drafts []int) model.Input {
	return model.Input{Seq: seq, Tokens: append([]int{last}, drafts...), Logits: model.AllLogits, Hidden: true, Decode: true}
}

// drafting reports whether r drafts at this step: it decodes and its head
// is ready.
func (r *running) drafting() bool {
	return r.spec != nil && r.spec.ready && r.fed == len(r.s.req.Prompt)
}

// draftAll runs the head's draft chains of every drafting request, batched:
// d_1 is left by the previous round, d_j comes from d_{j-1} and the head's
// g. It then snapshots each one's recurrent state for the rollback.
// Requests that fail are ended and marked in ended; it returns false when
// the engine is shutting down.
func (e *Engine) draftAll(ctx context.Context, run []*running, ended map[*running]bool) bool {
	maxCtx := e.m.Config().MaxContext()
	var rs []*running
	for _, r := range run {
		if !r.drafting() {
			continue
		}
		sp := r.spec
		// The verify step writes positions n..n+k.
		sp.k = min(e.cfg.Speculative.Tokens, maxCtx-r.seq.Len()-1)
		if sp.k < 1 {
			// No room for a draft: decode plainly from here.
			sp.close()
			r.spec = nil
			continue
		}
		sp.drafts = append(sp.drafts[:0], sp.draft)
		rs = append(rs, r)
	}
	for {
		var ins []model.DraftInput
		var who []*running
		for _, r := range rs {
			sp := r.spec
			if !ended[r] && len(sp.drafts) < sp.k {
				ins = append(ins, model.DraftInput{Seq: sp.ds, Tokens: sp.drafts[len(sp.drafts)-1:], Hidden: sp.g, Logits: model.LastArgmax})
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
			r.spec.drafts = append(r.spec.drafts, outs[i].Argmax[0])
			r.spec.g = outs[i].Hidden
		}
	}
	for _, r := range rs {
		if ended[r] {
			continue
		}
		if err := r.seq.SaveRecurrentTo(r.spec.snap); err != nil {
			e.finish(r, FinishError, -1, fmt.Errorf("engine: %w", err))
			ended[r] = true
		}
	}
	return true
}

// specFollowUp is the work a speculating request leaves after the main
// step: a re-feed of the accepted tokens after a rollback, and the head's
// run over the positions the step committed.
type specFollowUp struct {
	r      *running
	refeed []int // tokens to feed again after Rewind; nil when all drafts were accepted
	draft  model.DraftInput
}

// verify accepts the drafts of r from the verify step's output: the main
// model's choice at every position, the longest prefix of drafts equal to
// them, and the main model's own token after it. It returns the committed
// tokens and the follow-up work (the re-feed and the head's run).
func (e *Engine) verify(r *running, out model.Output) ([]int, specFollowUp) {
	sp := r.spec
	v, h := e.m.Config().VocabSize, e.m.Config().HiddenSize
	choices := make([]int, sp.k+1)
	for i := range choices {
		choices[i] = compute.Argmax(out.Logits[i*v : (i+1)*v])
	}
	a := 0
	for a < sp.k && sp.drafts[a] == choices[a] {
		a++
	}
	r.s.specDrafted.Add(int64(sp.k))
	r.s.specAccepted.Add(int64(a))
	e.metrics.specDrafted.Add(uint64(sp.k))
	e.metrics.specAccepted.Add(uint64(a))
	committed := append(slices.Clone(sp.drafts[:a]), choices[a])
	f := specFollowUp{r: r, draft: model.DraftInput{Seq: sp.ds, Tokens: committed, Hidden: out.Hidden[:(a+1)*h], Logits: model.LastArgmax}}
	if a < sp.k {
		f.refeed = append([]int{r.last}, sp.drafts[:a]...)
	}
	return committed, f
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
		if f.refeed == nil || ended[f.r] {
			continue
		}
		if err := f.r.seq.Rewind(f.r.spec.snap); err != nil {
			e.finish(f.r, FinishError, -1, fmt.Errorf("engine: %w", err))
			ended[f.r] = true
			continue
		}
		ins = append(ins, model.Input{Seq: f.r.seq, Tokens: f.refeed, Logits: model.NoLogits, Decode: true})
		who = append(who, f.r)
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
		if f.r.drafting() {
			// A round: cut the head's cache back to the committed length
			// before the verify step (n, the re-feed's start).
			if err := f.r.spec.ds.Truncate(f.r.seq.Len() - len(f.draft.Tokens) - f.r.spec.off); err != nil {
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
		r.spec.ready, r.spec.draft, r.spec.g = true, outs[i].Argmax[0], outs[i].Hidden
	}
	return true
}
