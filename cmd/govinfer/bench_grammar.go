package main

import (
	"context"
	"encoding/json"
	"fmt"
	goio "io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/llm"
)

// benchGrammarHelp documents bench's constraint flags.
const benchGrammarHelp = "instead of the text benchmark: measure a constraint on the checkpoint's vocabulary: the time of each step's mask (median, p99) over --repeat random walks of --gen tokens, and the decode tokens/s of --gen tokens with it against without it, in the same run (the ratio should be at least 0.9); requests ask max_tokens 4096 (as clients do) and are read for --gen tokens, so a budget near its end does not weigh on the figures"

// benchGrammarMaxTokens is the max_tokens the constraint benchmark's
// requests ask.
const benchGrammarMaxTokens = 4096

// grammarBenchOptions configure benchGrammar; one of grammar, schema and
// regex is set.
type grammarBenchOptions struct {
	dir     string
	backend compute.Backend
	gen     int
	repeat  int
	grammar string // a GBNF file, or Lark when its name ends in .lark
	schema  string // a JSON schema file
	regex   string
}

type grammarBenchResult struct {
	Model      string `json:"model"`
	Backend    string `json:"backend"`
	Constraint string `json:"constraint"`
	// The mask of one step (the allowed tokens as a bit set, budgets
	// included): over all steps of the walks, and over the first walk
	// (nothing cached yet) and the later ones.
	MaskSteps        int     `json:"mask_steps"`
	MaskMedianMicros float64 `json:"mask_median_us"`
	MaskP99Micros    float64 `json:"mask_p99_us"`
	MaskMaxMicros    float64 `json:"mask_max_us"`
	FirstWalkP99     float64 `json:"first_walk_mask_p99_us"`
	WarmP99          float64 `json:"warm_mask_p99_us"`
	// Apply: setting the disallowed logits of a row to -Inf.
	ApplyMedianMicros float64 `json:"apply_median_us"`
	ApplyP99Micros    float64 `json:"apply_p99_us"`
	// Decode: tokens/s after the first token, medians of --repeat runs.
	UnconstrainedTokensPerSec float64 `json:"unconstrained_tokens_per_s"`
	ConstrainedTokensPerSec   float64 `json:"constrained_tokens_per_s"`
	ConstrainedTokens         int     `json:"constrained_tokens"`
	DecodeRatio               float64 `json:"decode_ratio"`
}

// constraintParams reads the constraint the options name.
func (o grammarBenchOptions) constraintParams() (llm.Params, string, error) {
	var p llm.Params
	switch {
	case o.regex != "":
		p.Structured = &llm.Structured{Regex: o.regex}
		return p, "regex " + o.regex, nil
	case o.grammar != "":
		b, err := os.ReadFile(o.grammar)
		if err != nil {
			return p, "", err
		}
		if strings.HasSuffix(o.grammar, ".lark") {
			p.Structured = &llm.Structured{Lark: string(b)}
			return p, "lark " + o.grammar, nil
		}
		p.Structured = &llm.Structured{GBNF: string(b)}
		return p, "gbnf " + o.grammar, nil
	case o.schema != "":
		b, err := os.ReadFile(o.schema)
		if err != nil {
			return p, "", err
		}
		if !json.Valid(b) {
			return p, "", fmt.Errorf("%s is not JSON", o.schema)
		}
		p.ResponseFormat = &llm.ResponseFormat{Type: "json_schema", Schema: b}
		return p, "json schema " + o.schema, nil
	}
	return p, "", fmt.Errorf("no constraint")
}

// benchGrammar measures a constraint's masks and its decode ratio.
func benchGrammar(ctx context.Context, o grammarBenchOptions) (*grammarBenchResult, error) {
	cp, what, err := o.constraintParams()
	if err != nil {
		return nil, err
	}
	m, err := llm.Open(o.dir, llm.Options{Backend: o.backend, MaxNumSeqs: 1})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	res := &grammarBenchResult{Model: o.dir, Backend: o.backend.Name(), Constraint: what}
	cp.MaxTokens = benchGrammarMaxTokens
	var all, warm, apply []float64
	for k := range o.repeat {
		st, err := m.ConstraintSteps(cp, o.gen, uint64(k+1))
		if err != nil {
			return nil, fmt.Errorf("mask walk %d: %w", k+1, err)
		}
		us := micros(st.Mask)
		all, apply = append(all, us...), append(apply, micros(st.Apply)...)
		if k == 0 {
			res.FirstWalkP99 = percentile(us, 0.99)
		} else {
			warm = append(warm, us...)
		}
	}
	res.MaskSteps = len(all)
	res.MaskMedianMicros, res.MaskP99Micros, res.MaskMaxMicros = percentile(all, 0.5), percentile(all, 0.99), percentile(all, 1)
	res.WarmP99 = percentile(warm, 0.99)
	res.ApplyMedianMicros, res.ApplyP99Micros = percentile(apply, 0.5), percentile(apply, 0.99)

	// Decode with and without the constraint, alternating, the same
	// sampling settings, after a warm-up of each.
	run := func(p llm.Params, seed uint64) (float64, int, error) {
		p.MaxTokens, p.Temperature, p.Seed = benchGrammarMaxTokens, llm.F64(1), llm.Uint64(seed)
		s, err := m.Complete(ctx, llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Write:"}}, Params: p})
		if err != nil {
			return 0, 0, err
		}
		defer s.Close()
		var first time.Time
		n := 0
		for ev := range s.Events() {
			if ev.Kind == llm.KindFinish && ev.Err != nil {
				return 0, 0, ev.Err
			}
			if k := len(ev.Tokens); k > 0 {
				if n == 0 {
					first = time.Now()
				}
				n += k
			}
			if n >= o.gen {
				break
			}
		}
		if n < 2 {
			return 0, n, nil
		}
		return float64(n-1) / time.Since(first).Seconds(), n, nil
	}
	free := llm.Params{IgnoreEOS: true}
	if _, _, err := run(free, 99); err != nil {
		return nil, err
	}
	if _, _, err := run(cp, 99); err != nil {
		return nil, err
	}
	var freeRates, conRates []float64
	for k := range o.repeat {
		f, _, err := run(free, uint64(k+1))
		if err != nil {
			return nil, err
		}
		c, n, err := run(cp, uint64(k+1))
		if err != nil {
			return nil, fmt.Errorf("constrained decode: %w", err)
		}
		freeRates, conRates = append(freeRates, f), append(conRates, c)
		res.ConstrainedTokens = max(res.ConstrainedTokens, n)
	}
	res.UnconstrainedTokensPerSec, res.ConstrainedTokensPerSec = percentile(freeRates, 0.5), percentile(conRates, 0.5)
	if res.UnconstrainedTokensPerSec > 0 {
		res.DecodeRatio = res.ConstrainedTokensPerSec / res.UnconstrainedTokensPerSec
	}
	return res, nil
}

func micros(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, t := range d {
		out[i] = float64(t.Nanoseconds()) / 1e3
	}
	return out
}

// percentile returns the q-quantile of v (nearest rank); 0 for none.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}

func (r *grammarBenchResult) print(w goio.Writer) {
	fmt.Fprintf(w, "%s on %s (%s)\n", r.Constraint, r.Model, r.Backend)
	fmt.Fprintf(w, "mask per step: median %.1f us, p99 %.1f us, max %.1f us over %d steps (first walk p99 %.1f us, later walks p99 %.1f us)\n",
		r.MaskMedianMicros, r.MaskP99Micros, r.MaskMaxMicros, r.MaskSteps, r.FirstWalkP99, r.WarmP99)
	fmt.Fprintf(w, "mask applied to the logits: median %.1f us, p99 %.1f us\n", r.ApplyMedianMicros, r.ApplyP99Micros)
	fmt.Fprintf(w, "decode: %.1f tokens/s constrained (up to %d tokens), %.1f unconstrained: ratio %.2f\n",
		r.ConstrainedTokensPerSec, r.ConstrainedTokens, r.UnconstrainedTokensPerSec, r.DecodeRatio)
}
