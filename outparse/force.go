package outparse

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/tokenizer"
)

// The opening of a Qwen3.5 tool call and the prompt endings, as the chat
// template writes them.
const (
	callOpen      = toolCallOpen + "\n" + functionOpen
	callNameClose = ">\n"
	// afterThink separates the reasoning from the answer in the template.
	afterThink = "\n\n"
	// thinkingPrompt ends a prompt whose generation opens with reasoning.
	thinkingPrompt = thinkOpen + "\n"
)

// ThinkingOpened reports whether a rendered prompt leaves the model in its
// reasoning block: the Qwen3.5 template ends the generation prompt with
// "<think>\n" when thinking is enabled (and with an empty, closed block when
// it is not). Its result is the Thinking option of the output parser.
func ThinkingOpened(prompt string) bool { return strings.HasSuffix(prompt, thinkingPrompt) }

// ToolForcer is the logit processor behind tool_choice "required" and a
// named function: it makes the output open a tool call, then leaves the
// decoding free (the arguments, the closing tags and anything after are
// the model's).
//
// It works in up to four phases:
//   - waiting: with thinking enabled the reasoning comes first and is left
//     alone; the forcing starts once the model has emitted the "</think>"
//     token (if it never does, no call is forced).
//   - forcing: the tokens of a fixed text (the tokenizer's encoding of
//     "<tool_call>\n<function=NAME>\n" for a named function, of
//     "<tool_call>\n<function=" for "required", preceded by "\n\n" after
//     reasoning) are forced one by one.
//   - spelling ("required" only): only ordinary tokens whose bytes keep the
//     text since "<function=" a prefix of some "NAME>\n" are allowed, until
//     one is complete.
//   - free: nothing is masked.
type ToolForcer struct {
	tok     *tokenizer.Tokenizer
	waitFor int // token that starts the forcing; -1 when it starts at once
	start   int // waitFor as created, for Clone
	forced  []int
	pos     int      // forced tokens emitted
	targets [][]byte // NAME>\n of each allowed tool while spelling; nil for none
	cands   []int    // ordinary tokens whose bytes occur in some target
	spelled []byte   // bytes emitted while spelling
	free    bool
}

// NewToolForcer returns a processor that forces a call of name, or of one
// of names when name is "". With thinking, the forcing starts after the
// "</think>" token. A ToolForcer serves one generation; Clone makes more.
func NewToolForcer(tok *tokenizer.Tokenizer, name string, names []string, thinking bool) (*ToolForcer, error) {
	f := &ToolForcer{tok: tok, waitFor: -1, start: -1}
	for _, n := range append([]string{name}, names...) {
		if strings.ContainsAny(n, ">\n") {
			return nil, fmt.Errorf("forcing a tool call: the function name %q holds '>' or a newline", n)
		}
	}
	prefix := callOpen
	if name != "" {
		prefix += name + callNameClose
	} else {
		if len(names) == 0 {
			return nil, fmt.Errorf("forcing a tool call: no tools")
		}
		for _, n := range names {
			f.targets = append(f.targets, []byte(n+callNameClose))
		}
	}
	if thinking {
		if id, ok := tok.TokenID(thinkClose); ok {
			f.waitFor, f.start = id, id
			prefix = afterThink + prefix
		}
	}
	if len(f.targets) > 0 {
		for id := range tok.VocabSize() {
			b := tok.TokenBytes(id)
			if !tok.IsAdded(id) && len(b) > 0 && slices.ContainsFunc(f.targets, func(t []byte) bool { return bytes.Contains(t, b) }) {
				f.cands = append(f.cands, id)
			}
		}
	}
	f.forced = tok.Encode(prefix)
	if len(f.forced) == 0 {
		return nil, fmt.Errorf("forcing a tool call: %q encodes to no tokens", prefix)
	}
	return f, nil
}

// Process masks the logits of the tokens the current phase rules out.
func (f *ToolForcer) Process(logits []float32) {
	if f.free || f.waitFor >= 0 {
		return
	}
	ninf := float32(math.Inf(-1))
	if f.pos < len(f.forced) {
		want := f.forced[f.pos]
		for id := range logits {
			if id != want {
				logits[id] = ninf
			}
		}
		return
	}
	// Only candidates can spell; the rest are masked wholesale.
	keep := make([]bool, len(f.cands))
	for k, id := range f.cands {
		keep[k] = id < len(logits) && f.spells(id)
	}
	saved := make([]float32, len(f.cands))
	for k, id := range f.cands {
		if keep[k] {
			saved[k] = logits[id]
		}
	}
	for id := range logits {
		logits[id] = ninf
	}
	for k, id := range f.cands {
		if keep[k] {
			logits[id] = saved[k]
		}
	}
}

// spells reports whether token id continues the spelling of a target.
func (f *ToolForcer) spells(id int) bool {
	if f.tok.IsAdded(id) {
		return false
	}
	b := f.tok.TokenBytes(id)
	if len(b) == 0 {
		return false
	}
	for _, t := range f.targets {
		if len(f.spelled)+len(b) <= len(t) && bytes.HasPrefix(t, f.spelled) && bytes.HasPrefix(t[len(f.spelled):], b) {
			return true
		}
	}
	return false
}

// Accept advances the phases with the sampled token; it fails on a token
// Process ruled out.
func (f *ToolForcer) Accept(token int) error {
	switch {
	case f.free:
		return nil
	case f.waitFor >= 0:
		if token == f.waitFor {
			f.waitFor = -1
		}
		return nil
	case f.pos < len(f.forced):
		if token != f.forced[f.pos] {
			return fmt.Errorf("tool call forcing: token %d where %d was forced", token, f.forced[f.pos])
		}
		f.pos++
		f.free = f.pos == len(f.forced) && f.targets == nil
		return nil
	}
	if !f.spells(token) {
		return fmt.Errorf("tool call forcing: token %d does not spell a tool name", token)
	}
	f.spelled = append(f.spelled, f.tok.TokenBytes(token)...)
	f.free = slices.ContainsFunc(f.targets, func(t []byte) bool { return bytes.Equal(t, f.spelled) })
	return nil
}

// Clone returns a fresh processor at the start of the same forcing; it
// shares the forced tokens and candidates, which are never modified.
func (f *ToolForcer) Clone() *ToolForcer {
	c := *f
	c.waitFor, c.pos, c.spelled, c.free = f.start, 0, nil, false
	return &c
}

// Free reports whether the forcing is over and decoding is unconstrained.
func (f *ToolForcer) Free() bool { return f.free }
