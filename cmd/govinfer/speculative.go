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

// parseSpeculativeConfig parses --speculative-config, vLLM's JSON object
// {"method": "mtp", "num_speculative_tokens": K}: both keys required, no
// others, K 1 to engine.MaxSpeculativeTokens. Empty means no speculation.
func parseSpeculativeConfig(s string) (engine.Speculative, error) {
	if strings.TrimSpace(s) == "" {
		return engine.Speculative{}, nil
	}
	var c struct {
		Method *string `json:"method"`
		K      *int    `json:"num_speculative_tokens"`
	}
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "{") {
		return engine.Speculative{}, fmt.Errorf(`want a JSON object such as {"method": "mtp", "num_speculative_tokens": 2}, got %q`, s)
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return engine.Speculative{}, fmt.Errorf("not a JSON object of method and num_speculative_tokens: %v", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return engine.Speculative{}, errors.New("trailing data after the JSON object")
	}
	switch {
	case c.Method == nil:
		return engine.Speculative{}, errors.New(`"method" is required ("mtp")`)
	case *c.Method != "mtp":
		return engine.Speculative{}, fmt.Errorf(`unknown method %q (known: "mtp")`, *c.Method)
	case c.K == nil:
		return engine.Speculative{}, errors.New(`"num_speculative_tokens" is required (1 to 4)`)
	case *c.K < 1 || *c.K > engine.MaxSpeculativeTokens:
		return engine.Speculative{}, fmt.Errorf("num_speculative_tokens must be 1 to %d, got %d", engine.MaxSpeculativeTokens, *c.K)
	}
	return engine.Speculative{Method: *c.Method, Tokens: *c.K}, nil
}

// specConfigHelp is the help of --speculative-config, the same on every
// command that takes it.
const specConfigHelp = "speculative decoding as vLLM's `JSON`: {\"method\": \"mtp\", \"num_speculative_tokens\": K}, K 1 to 4 (needs the checkpoint's mtp.* weights)"

// firstLine returns err's message on one line: its first line and a count
// of the rest (a checkpoint's missing tensors, one per line).
func firstLine(err error) string {
	msg := err.Error()
	if lines := strings.Split(msg, "\n"); len(lines) > 1 {
		msg = fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
	}
	return msg
}
