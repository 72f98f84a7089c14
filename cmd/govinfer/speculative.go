package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/model"
)

// parseSpeculativeConfig parses --speculative-config, vLLM's JSON object:
// {"method": "mtp", "num_speculative_tokens": K} or {"method": "ngram",
// "num_speculative_tokens": K, "prompt_lookup_min": A, "prompt_lookup_max":
// B} (the lookup sizes vLLM's defaults when absent: 5 and 5, or the one
// given for both), with "backoff" (true or false) and, for "mtp",
// "draft_dtype" (draftDTypes) besides; method and K required, no other
// keys, K 1 to engine.MaxSpeculativeTokens. serving picks the defaults of
// serve, chat and bench (true) or of generate (false, whose counts must
// match the goldens): without "backoff" the engine backs off when serving
// and not otherwise, and without "draft_dtype" the head drafts in
// defaultDraftDType when serving and exactly otherwise. Empty means no
// speculation.
func parseSpeculativeConfig(s string, serving bool) (engine.Speculative, error) {
	if strings.TrimSpace(s) == "" {
		return engine.Speculative{}, nil
	}
	var c struct {
		Method    *string `json:"method"`
		K         *int    `json:"num_speculative_tokens"`
		LookupMin *int    `json:"prompt_lookup_min"`
		LookupMax *int    `json:"prompt_lookup_max"`
		Backoff   *bool   `json:"backoff"`
		DraftType *string `json:"draft_dtype"`
	}
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "{") {
		return engine.Speculative{}, fmt.Errorf(`want a JSON object such as {"method": "mtp", "num_speculative_tokens": 2}, got %q`, s)
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return engine.Speculative{}, fmt.Errorf("not a JSON object of method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, backoff and draft_dtype: %v", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return engine.Speculative{}, errors.New("trailing data after the JSON object")
	}
	switch {
	case c.Method == nil:
		return engine.Speculative{}, errors.New(`"method" is required ("mtp" or "ngram")`)
	case *c.Method != "mtp" && *c.Method != "ngram":
		return engine.Speculative{}, fmt.Errorf(`unknown method %q (known: "mtp", "ngram")`, *c.Method)
	case c.K == nil:
		return engine.Speculative{}, errors.New(`"num_speculative_tokens" is required (1 to 4)`)
	case *c.K < 1 || *c.K > engine.MaxSpeculativeTokens:
		return engine.Speculative{}, fmt.Errorf("num_speculative_tokens must be 1 to %d, got %d", engine.MaxSpeculativeTokens, *c.K)
	case *c.Method != "ngram" && (c.LookupMin != nil || c.LookupMax != nil):
		return engine.Speculative{}, errors.New(`prompt_lookup_min and prompt_lookup_max are for method "ngram"`)
	case *c.Method != "mtp" && c.DraftType != nil:
		return engine.Speculative{}, errors.New(`draft_dtype is for method "mtp" (n-gram drafts read no weights)`)
	}
	sc := engine.Speculative{Method: *c.Method, Tokens: *c.K, NoBackoff: !serving}
	if c.Backoff != nil {
		sc.NoBackoff = !*c.Backoff
	}
	if sc.Method == "mtp" {
		dt := "exact"
		if serving {
			dt = defaultDraftDType
		}
		if c.DraftType != nil {
			dt = *c.DraftType
		}
		if !slices.Contains(draftDTypes(), dt) {
			return engine.Speculative{}, fmt.Errorf("unknown draft_dtype %q (known: %s)", dt, strings.Join(draftDTypes(), ", "))
		}
		sc.DraftQuantize = draftQuantizeOf(dt)
	}
	if sc.Method == "ngram" {
		lo, hi := engine.DefaultLookup, engine.DefaultLookup
		switch {
		case c.LookupMin != nil && c.LookupMax != nil:
			lo, hi = *c.LookupMin, *c.LookupMax
		case c.LookupMin != nil:
			lo, hi = *c.LookupMin, *c.LookupMin
		case c.LookupMax != nil:
			lo, hi = *c.LookupMax, *c.LookupMax
		}
		if lo < 1 || hi < lo {
			return engine.Speculative{}, fmt.Errorf("prompt_lookup_min must be at least 1 and at most prompt_lookup_max, got %d and %d", lo, hi)
		}
		sc.LookupMin, sc.LookupMax = lo, hi
	}
	return sc, nil
}

// draftDTypes are the values of "draft_dtype": "exact" drafts with the
// head as loaded, the others with the head and a copy of lm_head in that
// block format (model.Options.DraftQuantize).
func draftDTypes() []string { return append([]string{"exact"}, model.DraftTypes()...) }

// draftQuantizeOf returns the model.Options.DraftQuantize of a
// "draft_dtype" value.
func draftQuantizeOf(dt string) string {
	if dt == "exact" {
		return ""
	}
	return dt
}

// defaultDraftDType is the "draft_dtype" of serve, chat and bench. On the
// 4-layer 9B-width model (2 threads, K = 2, P = 0.8, medians of 3
// alternating runs) a draft step cost 0.62 of a decode step exact, 0.38
// in Q8_0 and 0.21 in Q4_K, speedups 0.92, 1.05 and 1.45; Q8_0 is the
// default as its drafts on vl-tiny's goldens are accepted exactly as the
// exact head's, where Q4_K cannot be checked (vl-tiny's 64-value rows
// fall back to Q8_0) and moves real logits about four times as far.
const defaultDraftDType = "q8_0"

// specConfigHelp is the help of --speculative-config, the same on every
// command that takes it.
const specConfigHelp = "speculative decoding as vLLM's `JSON`: {\"method\": \"mtp\", \"num_speculative_tokens\": K} (the checkpoint's MTP head drafts; needs its mtp.* weights) " +
	"or {\"method\": \"ngram\", \"num_speculative_tokens\": K, \"prompt_lookup_min\": A, \"prompt_lookup_max\": B} (drafts copied from the prompt and output where its last A to B tokens occurred before; 5 and 5 by default), K 1 to 4; " +
	"\"backoff\": false keeps a request speculating when its drafts are mostly rejected (by default, after a window of 4 rounds that commit fewer tokens than they cost in plain decode steps, " +
	"a round costing 1 + 0.07 per verified position after the first, plus K draft steps at their share of a decode step's weight bytes, plus a step per re-feed, it decodes plainly for 128 steps, doubling up to 2048); " +
	"for mtp, \"draft_dtype\": \"exact\", \"q8_0\", \"q6_k\" or \"q4_k\" (default " + defaultDraftDType + ", exact in generate) drafts from a copy of lm_head and the head's own matrices in that block format, made while loading " +
	"(a model quantized as small already drafts from its own): cheaper draft steps; the main model still verifies with its own lm_head, so the output is unchanged, only how many drafts are accepted may move"

// firstLine returns err's message on one line: its first line and a count
// of the rest (a checkpoint's missing tensors, one per line).
func firstLine(err error) string {
	msg := err.Error()
	if lines := strings.Split(msg, "\n"); len(lines) > 1 {
		msg = fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
	}
	return msg
}
