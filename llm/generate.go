package llm

import (
	"context"
	"strings"

	"github.com/govinfer/govinfer/outparse"
)

// Chat renders a conversation with the checkpoint's chat template and
// generates its choices. The stream's events split each choice's output
// into reasoning, content and tool calls; ctx bounds the request (when it
// ends, the choices finish with FinishAbort). Close the stream when done.
func (lm *Model) Chat(ctx context.Context, req ChatRequest) (*Stream, error) {
	r, err := lm.prepareChat(req)
	if err != nil {
		return nil, err
	}
	if r.images != nil {
		// Refuse a prompt that cannot run before the tower works on it.
		if room := lm.answerRoom(len(r.ids)); room < 1 {
			return nil, &ContextLengthError{MaxModelLen: lm.maxModelLen, Prompt: len(r.ids), Completion: 1,
				StateTokens: lm.seqTokens, StateMemory: lm.stateMemory}
		}
		if total, limit := len(r.ids)*r.params.n, MaxRequestPrompts*lm.maxModelLen; total > limit {
			return nil, paramErr("n", "the request would prefill %d prompt tokens (n times the prompt); at most %d (%d times the maximum length) are allowed", total, limit, MaxRequestPrompts)
		}
		if r.images.embeds, err = lm.encodeImages(ctx, r.images); err != nil {
			return nil, err
		}
	}
	s, err := lm.submit(ctx, [][]int{r.ids}, [][]int{r.hints}, r.params, r.grammar, r.images)
	if err != nil {
		return nil, err
	}
	s.chat, s.noTools, s.custom, s.prompt = true, r.noTools, r.custom, r.text
	for _, c := range s.choices {
		c.parser = outparse.NewParser(outparse.Options{Thinking: r.thinking, Tools: r.tools})
	}
	return s, nil
}

// Prompt is one text completion prompt: Text, or token IDs when set.
type Prompt struct {
	Text string
	IDs  []int
}

// PromptIDs returns the token ids a text completion prefills for p: its
// IDs when set, else its text encoded.
func (lm *Model) PromptIDs(p Prompt) []int {
	if p.IDs != nil {
		return p.IDs
	}
	return lm.tok.Encode(p.Text)
}

// CompletionRequest is a text completion of one or more prompts; choice
// p*N+i is the i-th generation of prompt p.
type CompletionRequest struct {
	Prompts []Prompt
	Params
}

// Complete generates text after each prompt. Its stream has KindContent,
// KindTokens and KindFinish events (the last carrying the choice's final
// text). Close the stream when done.
func (lm *Model) Complete(ctx context.Context, req CompletionRequest) (*Stream, error) {
	r, err := lm.resolve(req.Params)
	if err != nil {
		return nil, err
	}
	prompts := make([][]int, len(req.Prompts))
	texts := make([]string, len(req.Prompts))
	total := 0
	for _, p := range req.Prompts {
		if err := lm.checkPromptBytes("prompt", len(p.Text)); err != nil {
			return nil, err
		}
		total += len(p.Text)
	}
	if limit := MaxRequestPrompts * lm.maxModelLen * MaxPromptBytesPerToken; total > limit {
		return nil, paramErr("prompt", "the prompts are %d bytes in all; at most %d are allowed", total, limit)
	}
	for i, p := range req.Prompts {
		prompts[i], texts[i] = lm.PromptIDs(p), p.Text
		if p.IDs != nil {
			texts[i] = lm.tok.Decode(p.IDs, false)
		}
	}
	var proc processorFactory
	if r.grammar != nil {
		proc = lm.processorFor(r.grammar)
	}
	if r.structured != nil {
		proc = lm.structuredFor(r.structured)
	}
	s, err := lm.submit(ctx, prompts, nil, r, proc, nil)
	if err != nil {
		return nil, err
	}
	s.prompt = strings.Join(texts, "\n")
	return s, nil
}
