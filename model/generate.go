package model

import (
	"context"
	"fmt"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/sample"
)

// GenerateOptions controls Generate.
type GenerateOptions struct {
	// MaxTokens is the most tokens to generate; it must be positive.
	MaxTokens int
	// Sampler picks each token; nil means greedy argmax.
	Sampler *sample.Sampler
	// Stop, when set, ends generation after a token for which it returns
	// true (the token is included in the result), e.g. an end-of-sequence id.
	Stop func(token int) bool
	// OnToken, when set, receives each token as it is generated; an error
	// ends generation and is returned.
	OnToken func(token int) error
}

// Result is what Generate produced.
type Result struct {
	// Tokens are the generated ids.
	Tokens []int
	// PromptLogits are the logits at the last prompt position.
	PromptLogits []float32
}

// Generate feeds prompt to seq and then generates up to o.MaxTokens tokens,
// one step each. It can be cancelled through ctx; on cancellation it returns
// the tokens so far together with ctx's error.
func (m *Model) Generate(ctx context.Context, seq *Sequence, prompt []int, o GenerateOptions) (Result, error) {
	var res Result
	if len(prompt) == 0 {
		return res, fmt.Errorf("model: generate: empty prompt")
	}
	if o.MaxTokens <= 0 {
		return res, fmt.Errorf("model: generate: max tokens must be positive, got %d", o.MaxTokens)
	}
	if o.Sampler != nil {
		o.Sampler.AddPrompt(prompt)
	}
	out, err := m.Step(ctx, []Input{{Seq: seq, Tokens: prompt}})
	if err != nil {
		return res, err
	}
	res.PromptLogits = out[0].Logits
	logits := res.PromptLogits
	tok := compute.Argmax(logits)
	for len(res.Tokens) < o.MaxTokens {
		if o.Sampler != nil {
			tok = o.Sampler.Sample(logits)
			o.Sampler.Accept(tok)
		}
		res.Tokens = append(res.Tokens, tok)
		if o.OnToken != nil {
			if err := o.OnToken(tok); err != nil {
				return res, err
			}
		}
		if (o.Stop != nil && o.Stop(tok)) || len(res.Tokens) == o.MaxTokens {
			break
		}
		if seq.Len() >= m.cfg.MaxContext() {
			break
		}
		// Greedy decoding asks the backend for the argmax only.
		mode := LastArgmax
		if o.Sampler != nil {
			mode = LastLogits
		}
		out, err := m.Step(ctx, []Input{{Seq: seq, Tokens: []int{tok}, Logits: mode}})
		if err != nil {
			return res, err
		}
		logits, tok = out[0].Logits, out[0].Argmax
	}
	return res, nil
}
