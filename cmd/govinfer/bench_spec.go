package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/model"
)

// specResult is the speculative part of bench --json (--speculative-config).
type specResult struct {
	// SpecMethod and SpecK are the configuration's method and
	// num_speculative_tokens.
	SpecMethod string `json:"spec_method,omitempty"`
	SpecK      int    `json:"spec_num_tokens,omitempty"`
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
}

// specJSONKeys is the --json help of the speculative keys.
const specJSONKeys = "; with --speculative-config: spec_method, spec_num_tokens, spec_decode_tokens_per_second, spec_plain_decode_tokens_per_second, spec_speedup, " +
	"spec_draft_tokens, spec_accepted_tokens, spec_accepted_per_round"

// engineDecode runs one greedy request of gen tokens over ids through an
// engine with the given speculation and returns its decode rate (tokens
// after the first per second, from the first token to the last) and the
// stream's draft counts.
func engineDecode(ctx context.Context, m *model.Model, ids []int, gen int, spec engine.Speculative) (rate float64, drafted, accepted int, err error) {
	if gen < 2 {
		return 0, 0, 0, errors.New("--gen must be at least 2 to time speculative decoding")
	}
	eng, err := engine.New(m, engine.Config{MaxNumSeqs: 1, ChunkTokens: min(engine.DefaultChunkTokens, m.MaxStepTokens()), Speculative: spec})
	if err != nil {
		return 0, 0, 0, err
	}
	defer eng.Close()
	st, err := eng.Submit(ctx, engine.Request{Prompt: ids, MaxTokens: gen})
	if err != nil {
		return 0, 0, 0, err
	}
	var first, last time.Time
	n := 0
	for {
		out, err := st.Next(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		if len(out.Tokens) > 0 {
			if n == 0 {
				first = time.Now()
			}
			n += len(out.Tokens)
			last = time.Now()
		}
		if out.Finish == engine.FinishError {
			return 0, 0, 0, out.Err
		}
		if out.Finish != engine.FinishNone {
			break
		}
	}
	if n != gen {
		return 0, 0, 0, fmt.Errorf("the engine generated %d tokens, want %d", n, gen)
	}
	drafted, accepted = st.SpecTokens()
	return float64(n-1) / last.Sub(first).Seconds(), drafted, accepted, nil
}

// benchSpec times decoding with and without speculation through the
// engine, repeat times each, and fills in res's speculative keys.
func benchSpec(ctx context.Context, m *model.Model, ids []int, gen, repeat int, spec engine.Speculative, res *specResult) error {
	var plain, specd []float64
	for range repeat {
		p, _, _, err := engineDecode(ctx, m, ids, gen, engine.Speculative{})
		if err != nil {
			return err
		}
		s, d, a, err := engineDecode(ctx, m, ids, gen, spec)
		if err != nil {
			return err
		}
		plain, specd = append(plain, p), append(specd, s)
		res.SpecDraftTokens, res.SpecAcceptedTokens = d, a
	}
	res.SpecMethod, res.SpecK = spec.Method, spec.Tokens
	res.SpecPlainTokensPerSecond, res.SpecDecodeTokensPerSecond = median(plain), median(specd)
	res.SpecSpeedup = res.SpecDecodeTokensPerSecond / res.SpecPlainTokensPerSecond
	if res.SpecDraftTokens > 0 {
		res.SpecAcceptedPerRound = float64(res.SpecAcceptedTokens) / float64(res.SpecDraftTokens/spec.Tokens)
	}
	return nil
}
