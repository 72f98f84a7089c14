package llm

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/sample"
)

// Limits of Params.
const (
	MaxN           = 16  // most choices per prompt
	MaxTopLogprobs = 20  // most alternatives per token
	MaxTemperature = 2   // as OpenAI allows
	MaxLogitBias   = 100 // |bias| is clamped to it, as OpenAI documents
)

// Params are the generation settings chat and text completions share. The
// zero value samples with the checkpoint's defaults (generation_config.json,
// else temperature 1) up to the model's context.
type Params struct {
	// N is the number of choices per prompt, 1 to MaxN; 0 means 1. Choice
	// i samples with Seed+i.
	N int
	// MaxTokens bounds each choice's tokens; 0 means up to the model's
	// maximum length. A bound over Options.MaxTokens, or over the room the
	// context (and the state memory, for one sequence) leaves after the
	// prompt, is lowered to it, as are MinTokens and a thinking budget,
	// and the choice then ends with FinishLength there. MinTokens
	// suppresses the stop tokens until that many were generated.
	MaxTokens, MinTokens int
	// Temperature, TopK, TopP, MinP and RepetitionPenalty override the
	// checkpoint's defaults when set (see sample.Params; TopK -1 disables).
	Temperature, TopP, MinP, RepetitionPenalty *float64
	TopK                                       *int
	// PresencePenalty and FrequencyPenalty are in [-2, 2].
	PresencePenalty, FrequencyPenalty float64
	// Seed makes sampling reproducible; nil means a random seed.
	Seed *uint64
	// Stop lists strings that end a choice (the text stops before them);
	// StopTokenIDs lists token ids that do, in addition to the EOS tokens
	// unless IgnoreEOS.
	Stop         []string
	StopTokenIDs []int
	IgnoreEOS    bool
	// KeepSpecialTokens shows special tokens in the text (vLLM's
	// skip_special_tokens=false).
	KeepSpecialTokens bool
	// Logprobs asks for each token's log-probability (Event.Tokens), and
	// TopLogprobs for that many most likely alternatives (at most
	// MaxTopLogprobs).
	Logprobs    bool
	TopLogprobs int
	// LogitBias adds a bias to the logits of token ids (OpenAI's
	// logit_bias), clamped to [-MaxLogitBias, MaxLogitBias], before
	// penalties, constraints, logprobs and sampling.
	LogitBias map[int]float64
	// ResponseFormat, when set, constrains the output to JSON.
	ResponseFormat *ResponseFormat
	// Structured, when set, constrains the output to a regular
	// expression, choices or a grammar; it cannot be combined with a
	// ResponseFormat other than text.
	Structured *Structured
	// LoRA chooses the LoRA adapters the request runs with, by name
	// (Model.LoRAs), each with its scale: vLLM's model naming an adapter
	// is one use at the adapter's default scale, llama-server's lora list
	// of {id, scale} several. A name not loaded is a *LoRAError matching
	// ErrUnknownLoRA; none runs the base model.
	LoRA []LoRAUse
}

// ResponseFormat constrains the output.
type ResponseFormat struct {
	// Type is "text" (no constraint), "json_object" (any JSON object) or
	// "json_schema" (a JSON value matching Schema, any JSON value when
	// Schema is empty).
	Type   string
	Schema json.RawMessage
	// Strict refuses a schema with a keyword the constraint does not
	// enforce (a *ParamError naming it) instead of ignoring the keyword.
	Strict bool
}

// F64 returns a pointer to v, for the optional fields of Params.
func F64(v float64) *float64 { return &v }

// Int returns a pointer to v.
func Int(v int) *int { return &v }

// Uint64 returns a pointer to v.
func Uint64(v uint64) *uint64 { return &v }

// resolved are Params checked and completed with the defaults.
type resolved struct {
	n           int
	maxTokens   int // after Options.MaxTokens; 0 for the room left
	askedTokens int // the request's own max_tokens, 0 for none
	minTokens   int
	sampling    sample.Params
	stop        []string
	stopIDs     []int
	ignoreEOS   bool
	skipSpecial bool
	logprobs    bool
	topLogprobs int
	logitBias   map[int]float32
	grammar     *jsonconstraint.Grammar
	structured  *grammar.Grammar
	loras       []engine.LoRA
}

// resolve checks p and applies the defaults.
func (lm *Model) resolve(p Params) (resolved, error) {
	r := resolved{n: 1, maxTokens: p.MaxTokens, minTokens: p.MinTokens, stop: p.Stop, stopIDs: p.StopTokenIDs,
		ignoreEOS: p.IgnoreEOS, skipSpecial: !p.KeepSpecialTokens, logprobs: p.Logprobs, topLogprobs: p.TopLogprobs}
	s := &r.sampling
	s.Temperature, s.TopP, s.RepetitionPenalty = 1, 1, 1
	d := lm.defaults
	for _, o := range []struct {
		dst       *float64
		def, over *float64
	}{
		{&s.Temperature, d.Temperature, p.Temperature}, {&s.TopP, d.TopP, p.TopP}, {&s.MinP, d.MinP, p.MinP},
		{&s.RepetitionPenalty, d.RepetitionPenalty, p.RepetitionPenalty},
	} {
		if o.def != nil {
			*o.dst = *o.def
		}
		if o.over != nil {
			*o.dst = *o.over
		}
	}
	if d.TopK != nil {
		s.TopK = *d.TopK
	}
	if p.TopK != nil {
		if *p.TopK < -1 {
			return r, paramErr("top_k", "top_k must be -1 (disabled) or positive, got %d", *p.TopK)
		}
		s.TopK = *p.TopK
	}
	s.PresencePenalty, s.FrequencyPenalty = p.PresencePenalty, p.FrequencyPenalty
	if p.Temperature != nil && *p.Temperature > MaxTemperature {
		return r, paramErr("temperature", "temperature must be between 0 and %d, got %v", MaxTemperature, *p.Temperature)
	}
	if err := s.Validate(); err != nil {
		return r, paramErr(paramOf(err.Error()), "%v", err)
	}
	if s.RepetitionPenalty == 0 {
		return r, paramErr("repetition_penalty", "repetition_penalty must be > 0, got 0")
	}
	if p.Seed != nil {
		s.Seed = *p.Seed
	} else {
		s.Seed = rand.Uint64()
	}
	if p.N != 0 {
		if p.N < 1 || p.N > MaxN {
			return r, paramErr("n", "n must be between 1 and %d, got %d", MaxN, p.N)
		}
		r.n = p.N
	}
	if p.MaxTokens < 0 {
		return r, paramErr("max_tokens", "max_tokens must be at least 1, got %d", p.MaxTokens)
	}
	if p.MinTokens < 0 {
		return r, paramErr("min_tokens", "min_tokens must not be negative, got %d", p.MinTokens)
	}
	if p.MaxTokens > 0 && p.MinTokens > p.MaxTokens {
		return r, paramErr("min_tokens", "min_tokens (%d) must not exceed max_tokens (%d)", p.MinTokens, p.MaxTokens)
	}
	// The server's cap lowers what a request asks, and is the bound of one
	// that asks none; the answer's room in the context lowers it further
	// (submit), and min_tokens with it.
	r.askedTokens = p.MaxTokens
	if lm.maxTokens > 0 && (r.maxTokens == 0 || r.maxTokens > lm.maxTokens) {
		r.maxTokens = lm.maxTokens
	}
	if r.maxTokens > 0 {
		r.minTokens = min(r.minTokens, r.maxTokens)
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs {
		return r, paramErr("top_logprobs", "top_logprobs must be between 0 and %d, got %d", MaxTopLogprobs, p.TopLogprobs)
	}
	if !p.Logprobs && p.TopLogprobs > 0 {
		return r, paramErr("top_logprobs", "top_logprobs requires logprobs to be true")
	}
	if len(p.LogitBias) > 0 {
		r.logitBias = make(map[int]float32, len(p.LogitBias))
		for id, b := range p.LogitBias {
			switch {
			case id < 0 || id >= lm.VocabSize():
				return r, paramErr("logit_bias", "logit_bias names token %d, outside the vocabulary [0, %d)", id, lm.VocabSize())
			case math.IsNaN(b):
				return r, paramErr("logit_bias", "logit_bias for token %d is not a number", id)
			}
			r.logitBias[id] = float32(max(-MaxLogitBias, min(MaxLogitBias, b)))
		}
	}
	if rf := p.ResponseFormat; rf != nil {
		g, err := grammarOf(rf)
		if err != nil {
			return r, err
		}
		r.grammar = g
	}
	if p.Structured != nil {
		if r.grammar != nil {
			return r, paramErr(p.Structured.field(), "response_format and %s both constrain the output; send one of them", p.Structured.field())
		}
		g, err := lm.compileStructured(p.Structured)
		if err != nil {
			return r, err
		}
		r.structured = g
	}
	var err error
	if r.loras, err = lm.resolveLoRA(p.LoRA); err != nil {
		return r, err
	}
	return r, nil
}

// grammarOf compiles a response format; nil for free text.
func grammarOf(rf *ResponseFormat) (*jsonconstraint.Grammar, error) {
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return jsonconstraint.AnyObject(), nil
	case "json_schema":
		if len(rf.Schema) == 0 {
			return jsonconstraint.AnyJSON(), nil
		}
		g, err := jsonconstraint.CompileWith(rf.Schema, jsonconstraint.Options{Strict: rf.Strict})
		if err != nil {
			return nil, schemaErr("response_format.json_schema.schema", err)
		}
		return g, nil
	}
	return nil, paramErr("response_format.type", "response_format.type must be text, json_object or json_schema, got %q", rf.Type)
}

// paramOf extracts the field name a sample.Params validation message
// starts with.
func paramOf(msg string) string {
	for i, c := range msg {
		if c == ' ' {
			return msg[:i]
		}
	}
	return ""
}

// schemaErr is the parameter error of a schema that does not compile; a
// keyword not enforced under strict is named.
func schemaErr(param string, err error) *ParamError {
	var ke *jsonconstraint.KeywordError
	if errors.As(err, &ke) {
		return paramErr(param, "%s: the keyword %q (at %s) is not supported with strict: true; remove it or set strict to false", param, ke.Keyword, ke.Path)
	}
	return paramErr(param, "invalid %s: %v", param, err)
}
