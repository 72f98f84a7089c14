package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/govinfer/govinfer/engine"
)

// parseSpeculativeConfig parses --speculative-config, vLLM's JSON object:
// {"method": "mtp", "num_speculative_tokens": K} or {"method": "ngram",
// "num_speculative_tokens": K, "prompt_lookup_min": A, "prompt_lookup_max":
// B} (the lookup sizes vLLM's defaults when absent: 5 and 5, or the one
// given for both), with "backoff" (true or false) besides; method and K
// required, no other keys, K 1 to engine.MaxSpeculativeTokens. Without
// "backoff" the engine backs off when backoff is true (serve, chat,
// bench) and not when it is false (generate, whose counts must match the
// goldens). Empty means no speculation.
func parseSpeculativeConfig(s string, backoff bool) (engine.Speculative, error) {
	if strings.TrimSpace(s) == "" {
		return engine.Speculative{}, nil
	}
	var c struct {
		Method    *string `json:"method"`
		K         *int    `json:"num_speculative_tokens"`
		LookupMin *int    `json:"prompt_lookup_min"`
		LookupMax *int    `json:"prompt_lookup_max"`
		Backoff   *bool   `json:"backoff"`
	}
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "{") {
		return engine.Speculative{}, fmt.Errorf(`want a JSON object such as {"method": "mtp", "num_speculative_tokens": 2}, got %q`, s)
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return engine.Speculative{}, fmt.Errorf("not a JSON object of method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max and backoff: %v", err)
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
	}
	sc := engine.Speculative{Method: *c.Method, Tokens: *c.K, NoBackoff: !backoff}
	if c.Backoff != nil {
		sc.NoBackoff = !*c.Backoff
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

// specConfigHelp is the help of --speculative-config, the same on every
// command that takes it.
const specConfigHelp = "speculative decoding as vLLM's `JSON`: {\"method\": \"mtp\", \"num_speculative_tokens\": K} (the checkpoint's MTP head drafts; needs its mtp.* weights) " +
	"or {\"method\": \"ngram\", \"num_speculative_tokens\": K, \"prompt_lookup_min\": A, \"prompt_lookup_max\": B} (drafts copied from the prompt and output where its last A to B tokens occurred before; 5 and 5 by default), K 1 to 4; " +
	"\"backoff\": false keeps a request speculating when its drafts are mostly rejected (by default, after a window of 4 rounds that commit fewer tokens than they cost in plain decode steps, " +
	"a round costing 1 + 0.07 per verified position after the first, plus K draft steps at their share of a decode step's weight bytes, plus a step per re-feed, it decodes plainly for 128 steps, doubling up to 2048)"

// firstLine returns err's message on one line: its first line and a count
// of the rest (a checkpoint's missing tensors, one per line).
func firstLine(err error) string {
	msg := err.Error()
	if lines := strings.Split(msg, "\n"); len(lines) > 1 {
		msg = fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
	}
	return msg
}
