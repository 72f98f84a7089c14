package engine

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// forceThenEnd allows token 4 twice, then only the end-of-sequence token
// (as a constraint does once its output is complete, forcing it), or, with
// dead, nothing at all; it rejects any other token.
type forceThenEnd struct {
	eos, n int
	dead   bool
	done   bool
}

func (p *forceThenEnd) Process(logits []float32) {
	allow := 4
	if p.n >= 2 {
		allow = p.eos
		if p.dead {
			allow = -1
		}
	}
	for i := range logits {
		if i != allow {
			logits[i] = float32(math.Inf(-1))
		}
	}
}

func (p *forceThenEnd) Accept(tok int) error {
	switch {
	case p.done:
		return fmt.Errorf("token %d after the end", tok)
	case p.n < 2 && tok == 4:
		p.n++
		return nil
	case p.n >= 2 && !p.dead && tok == p.eos:
		p.done = true
		return nil
	}
	return fmt.Errorf("token %d rejected", tok)
}

// TestForcedEndOfSequence is the regression test of "logit processor
// rejected token 0": a constraint that forces the end-of-sequence token
// before min_tokens used to see it masked by min_tokens, every logit at
// -Inf, and token 0 sampled and rejected; a constraint at a dead end
// did the same. Both now end the choice with FinishStop.
func TestForcedEndOfSequence(t *testing.T) {
	m := openModel(t, "tiny")
	const eos = 7
	e := newEngine(t, m, Config{EOS: []int{eos}})
	for _, dead := range []bool{false, true} {
		for _, greedy := range []bool{true, false} {
			p := &forceThenEnd{eos: eos, dead: dead}
			req := Request{Prompt: []int{1, 2, 3}, MaxTokens: 10, MinTokens: 6, Processor: p}
			if !greedy {
				req.Params.Temperature = 1
				req.Params.Seed = 3
			}
			s, err := e.Submit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			toks, out, err := collect(context.Background(), s)
			if err != nil || out.Err != nil {
				t.Fatalf("dead %v greedy %v: %v %v", dead, greedy, err, out.Err)
			}
			if got := ids(toks); out.Finish != FinishStop || len(got) != 3 || got[0] != 4 || got[1] != 4 || got[2] != eos {
				t.Errorf("dead %v greedy %v: got %v (%v), want [4 4 %d] ending with stop", dead, greedy, got, out.Finish, eos)
			}
		}
	}
}
