package engine

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/sample"
)

// phases is a grammar-like processor: even tokens only for its first
// tokens, then one forced token (as a thinking budget forces "</think>"),
// then anything but a banned set. It forks (ForkingProcessor); forks
// counts the masks its forks computed, which speculation's check of the
// drafts does.
type phases struct {
	n      int
	even   int // tokens that must be even
	forced int // the token forced after them
	banned map[int]bool
	forks  *int
	fork   bool // a fork: counts its masks
}

func (p *phases) allowed(tok int) bool {
	switch {
	case p.n < p.even:
		return tok%2 == 0
	case p.n == p.even:
		return tok == p.forced
	}
	return !p.banned[tok]
}

func (p *phases) Process(logits []float32) {
	if p.fork {
		*p.forks++
	}
	for i := range logits {
		if !p.allowed(i) {
			logits[i] = float32(math.Inf(-1))
		}
	}
}

func (p *phases) Accept(tok int) error {
	if !p.allowed(tok) {
		return fmt.Errorf("token %d not allowed at %d", tok, p.n)
	}
	p.n++
	return nil
}

func (p *phases) Fork() LogitProcessor {
	c := *p
	c.fork = true
	return &c
}

// noFork hides a processor's Fork: its drafts are only verified.
type noFork struct{ LogitProcessor }

// TestSpeculativeProcessorsMatchPlain runs requests that need each
// position's logits processed (penalties, logit bias, min_tokens,
// ignore_eos, logprobs, a constraint with a forced token, with and
// without a fork to check drafts, and all at once) with MTP speculation,
// k = 1, 3 and 4, greedy: the tokens, the finish, and the logprobs (so
// the raw logits) bit for bit are plain decoding's, and the requests
// speculated.
func TestSpeculativeProcessorsMatchPlain(t *testing.T) {
	g := loadSpecGolden(t)
	m := openMTPModel(t, "vl-tiny")
	free := g.PlainGreedy
	eos := []int{free[12]}
	cases := map[string]func() Request{
		"repetition penalty": func() Request { return Request{Params: sample.Params{RepetitionPenalty: 1.5}} },
		"presence and frequency": func() Request {
			return Request{Params: sample.Params{PresencePenalty: 1, FrequencyPenalty: 0.7}}
		},
		"logit bias": func() Request { return Request{LogitBias: map[int]float32{free[2]: -100, 7: 3, free[6]: 2}} },
		"min tokens": func() Request { return Request{MinTokens: 6, StopTokens: []int{free[2]}} },
		"eos":        func() Request { return Request{} },
		"ignore eos": func() Request { return Request{IgnoreEOS: true} },
		"logprobs":   func() Request { return Request{Logprobs: true, TopLogprobs: 5} },
		"constraint": func() Request {
			return Request{Processor: &phases{even: 5, forced: 3, banned: map[int]bool{free[7]: true}, forks: new(int)}}
		},
		"constraint, no fork": func() Request {
			return Request{Processor: noFork{&phases{even: 5, forced: 3, banned: map[int]bool{free[7]: true}, forks: new(int)}}}
		},
		"all": func() Request {
			return Request{Params: sample.Params{RepetitionPenalty: 1.2, PresencePenalty: 0.5}, LogitBias: map[int]float32{7: 1},
				MinTokens: 3, StopTokens: []int{free[1]}, Logprobs: true, TopLogprobs: 2,
				Processor: &phases{even: 4, forced: 11, banned: map[int]bool{free[7]: true}, forks: new(int)}}
		},
	}
	plain := newEngine(t, m, Config{EOS: eos})
	for name, mk := range cases {
		want := mk()
		want.Prompt, want.MaxTokens = g.Prompt, 20
		wantToks, wantOut, _ := generateAll(t, plain, want)
		for _, k := range []int{1, 3, 4} {
			e := newEngine(t, m, Config{EOS: eos, Speculative: Speculative{Method: "mtp", Tokens: k}})
			req := mk()
			req.Prompt, req.MaxTokens = g.Prompt, 20
			toks, out, s := generateAll(t, e, req)
			d, a := s.SpecTokens()
			if len(wantToks) > 1 && d == 0 {
				t.Errorf("%s k=%d: no drafts", name, k)
			}
			if out.Finish != wantOut.Finish || out.StopToken != wantOut.StopToken || len(toks) != len(wantToks) {
				t.Errorf("%s k=%d: %v (%v %d), plain %v (%v %d)", name, k, ids(toks), out.Finish, out.StopToken, ids(wantToks), wantOut.Finish, wantOut.StopToken)
				continue
			}
			for i, tk := range toks {
				w := wantToks[i]
				if tk.ID != w.ID || math.Float64bits(tk.Logprob) != math.Float64bits(w.Logprob) || !slices.Equal(tk.Top, w.Top) {
					t.Errorf("%s k=%d token %d: %+v, plain %+v", name, k, i, tk, w)
					break
				}
			}
			if p, ok := req.Processor.(*phases); ok && *p.forks == 0 {
				t.Errorf("%s k=%d: no draft was checked against the processor", name, k)
			}
			t.Logf("%s k=%d: %d tokens, %d drafts, %d accepted", name, k, len(toks), d, a)
		}
	}
}

// generateAll is generate with the tokens themselves (logprobs included).
func generateAll(t *testing.T, e *Engine, req Request) ([]Token, Output, *Stream) {
	t.Helper()
	s, err := e.Submit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	toks, out, err := collect(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Finish == FinishError {
		t.Fatal(out.Err)
	}
	return toks, out, s
}
