package llm_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/llm"
)

// TestSpeculativeConstraintsMatchPlain runs greedy chats whose logits go
// through the constraints llm adds (a thinking budget's forced
// "</think>", forced tool calls finished near max_tokens, a JSON
// response format, alone and beside tools under auto, a regex, a GBNF
// grammar, a custom tool's Lark grammar) with MTP speculation on a checkpoint with a head: the
// tokens and the finish are plain decoding's, and drafts were made.
func TestSpeculativeConstraintsMatchPlain(t *testing.T) {
	openVL(t) // writes the checkpoint
	plain, err := llm.Open(vlDir, llm.Options{MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	spec, err := llm.Open(vlDir, llm.Options{MaxModelLen: 4096, Speculative: engine.Speculative{Method: "mtp", Tokens: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	tools, _ := forcedTools(rand.New(rand.NewPCG(5, 6)), 2)
	patchGrammar, err := os.ReadFile("../grammar/lark/testdata/patch.lark")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]llm.ChatRequest{
		"thinking budget": {Messages: user("Think about it."), Thinking: llm.Bool(true), ThinkingBudget: 4, Params: greedy(24)},
		"forced call near max_tokens": {Messages: user("Use a tool."), Tools: tools, ToolChoice: llm.ToolChoice{Mode: "function", Function: tools[1].Name},
			Thinking: llm.Bool(true), ThinkingBudget: 6, Params: greedy(40)},
		"required call": {Messages: user("Use a tool."), Tools: tools, ToolChoice: llm.ToolChoice{Mode: "required"},
			Thinking: llm.Bool(false), Params: greedy(60)},
		"json": {Messages: user("Give JSON."), Thinking: llm.Bool(false),
			Params: llm.Params{MaxTokens: 30, Temperature: llm.F64(0), ResponseFormat: &llm.ResponseFormat{Type: "json_object"}}},
		"regex": {Messages: user("Say it."), Thinking: llm.Bool(false),
			Params: llm.Params{MaxTokens: 30, Temperature: llm.F64(0), Structured: &llm.Structured{Regex: `[a-z]+( [a-z]+){0,8}\.`}}},
		"gbnf": {Messages: user("List."), Thinking: llm.Bool(false),
			Params: llm.Params{MaxTokens: 30, Temperature: llm.F64(0), Structured: &llm.Structured{GBNF: `root ::= "[" [0-9]+ ("," [0-9]+)* "]"`}}},
		"answer format beside tools": {Messages: user("Use a tool or answer."), Tools: tools, ToolChoice: llm.ToolChoice{Mode: "auto"},
			Thinking: llm.Bool(false), Params: llm.Params{MaxTokens: 60, Temperature: llm.F64(0), ResponseFormat: &llm.ResponseFormat{Type: "json_object"}}},
		"custom tool grammar": {Messages: user("Patch it."), Thinking: llm.Bool(false), Params: greedy(60),
			Tools:      []llm.Tool{{Name: "apply_patch", Custom: true, Grammar: string(patchGrammar)}},
			ToolChoice: llm.ToolChoice{Mode: "function", Function: "apply_patch"}},
	}
	for name, req := range cases {
		var got [2]collected
		var usage [2]llm.Usage
		for i, m := range []*llm.Model{plain, spec} {
			st, err := m.Chat(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got[i] = collect(t, st)[0]
			usage[i] = st.Usage()
		}
		// The events' tokens depend on how tokens arrive (several at a
		// time with speculation): compare the text, calls and counts.
		p, s := got[0], got[1]
		if p.reasoning != s.reasoning || p.content != s.content || !slices.EqualFunc(p.calls, s.calls, sameCall) || p.finish.Finish != s.finish.Finish ||
			usage[0].CompletionTokens != usage[1].CompletionTokens || usage[0].ReasoningTokens != usage[1].ReasoningTokens {
			t.Errorf("%s: speculative %q %q %v (%s, %d tokens), plain %q %q %v (%s, %d tokens)", name, s.reasoning, s.content, s.calls, s.finish.Finish,
				usage[1].CompletionTokens, p.reasoning, p.content, p.calls, p.finish.Finish, usage[0].CompletionTokens)
		}
		drafted := usage[1].SpecDraftTokens
		if drafted == 0 {
			t.Errorf("%s: no drafts", name)
		}
		t.Logf("%s: %d tokens (%s), %d drafts, %d accepted; reasoning %q, content %q, calls %v", name, usage[1].CompletionTokens, s.finish.Finish, drafted,
			usage[1].SpecAcceptedTokens, s.reasoning, s.content, s.calls)
	}
}

// sameCall compares calls but for their random ids.
func sameCall(a, b llm.ToolCall) bool {
	a.ID, b.ID = "", ""
	return a == b
}
