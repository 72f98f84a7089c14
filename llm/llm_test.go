package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

func user(text string) []llm.Message { return []llm.Message{{Role: "user", Content: text}} }

// A chat is a completion of its rendered prompt: same tokens, same text.
func TestChatIsCompletionOfPrompt(t *testing.T) {
	m := openModel(t)
	req := llm.ChatRequest{Messages: user("Tell me a story"), Thinking: llm.Bool(false), Params: greedy(12)}
	req.IgnoreEOS = true
	prompt, ids, err := m.ChatPrompt(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(prompt, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Fatalf("prompt %q does not end with a closed thinking block", prompt)
	}
	st, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if st.Prompt() != prompt {
		t.Errorf("stream prompt %q, want %q", st.Prompt(), prompt)
	}
	chat := collect(t, st)[0]
	cst, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: ids}}, Params: req.Params})
	if err != nil {
		t.Fatal(err)
	}
	text := collect(t, cst)[0]
	if chat.finish.Finish != llm.FinishLength || text.finish.Finish != llm.FinishLength {
		t.Errorf("finish %q and %q, want length", chat.finish.Finish, text.finish.Finish)
	}
	if got, want := chat.reasoning+chat.content, text.content; got != want && len(chat.calls) == 0 {
		t.Errorf("chat text %q, completion %q", got, want)
	}
	if u := cst.Usage(); u.PromptTokens != len(ids) || u.CompletionTokens != 12 || u.TotalTokens != len(ids)+12 {
		t.Errorf("usage %+v, want %d prompt and 12 completion tokens", u, len(ids))
	}
}

// Typed messages and tools render as their OpenAI JSON does.
func TestTypedRequestRendersLikeJSON(t *testing.T) {
	m := openModel(t)
	typed := llm.ChatRequest{
		Messages: []llm.Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Weather in Oslo?"},
			{Role: "assistant", Reasoning: "Use the tool.", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo", "days": 2}`}}},
			{Role: "tool", Content: "Sunny", ToolCallID: "call_1"},
		},
		Tools: []llm.Tool{{Name: "get_weather", Description: "Weather of a city",
			Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}`)}},
	}
	raw := func(s string) any {
		v, err := jsonvalue.Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	asJSON := llm.ChatRequest{
		Messages: []llm.Message{
			llm.MessageJSON(raw(`{"role": "system", "content": "Be brief."}`)),
			llm.MessageJSON(raw(`{"role": "user", "content": "Weather in Oslo?"}`)),
			llm.MessageJSON(raw(`{"role": "assistant", "content": "", "reasoning": "Use the tool.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}}]}`)),
			llm.MessageJSON(raw(`{"role": "tool", "content": "Sunny", "tool_call_id": "call_1"}`)),
		},
		Tools: []llm.Tool{llm.ToolJSON(raw(`{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}`))},
	}
	a, _, err := m.ChatPrompt(typed)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := m.ChatPrompt(asJSON)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("typed request renders\n%s\nJSON request\n%s", a, b)
	}
	for _, want := range []string{"<parameter=days>\n2\n</parameter>", "<think>\nUse the tool.\n</think>", `"name": "get_weather"`} {
		if !strings.Contains(a, want) {
			t.Errorf("prompt lacks %q:\n%s", want, a)
		}
	}
}

func TestParamErrors(t *testing.T) {
	m := openModel(t)
	for _, c := range []struct {
		name  string
		req   llm.ChatRequest
		param string
	}{
		{"temperature", llm.ChatRequest{Params: llm.Params{Temperature: llm.F64(-1)}}, "temperature"},
		{"top_k", llm.ChatRequest{Params: llm.Params{TopK: llm.Int(-2)}}, "top_k"},
		{"n", llm.ChatRequest{Params: llm.Params{N: 17}}, "n"},
		{"min_tokens", llm.ChatRequest{Params: llm.Params{MaxTokens: 2, MinTokens: 3}}, "min_tokens"},
		{"top_logprobs", llm.ChatRequest{Params: llm.Params{TopLogprobs: 2}}, "top_logprobs"},
		{"response_format", llm.ChatRequest{Params: llm.Params{ResponseFormat: &llm.ResponseFormat{Type: "xml"}}}, "response_format.type"},
		{"role", llm.ChatRequest{Messages: []llm.Message{{Role: "robot", Content: "x"}}}, "messages[0].role"},
		{"arguments", llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "x"}, {Role: "assistant", ToolCalls: []llm.ToolCall{{Name: "f", Arguments: "[1]"}}}}}, "messages[1].tool_calls[0].function.arguments"},
		{"tool_choice", llm.ChatRequest{ToolChoice: llm.ToolChoice{Mode: "required"}}, "tool_choice"},
		{"named tool", llm.ChatRequest{ToolChoice: llm.ToolChoice{Mode: "function", Function: "f"}}, "tool_choice"},
		{"stop_token_ids", llm.ChatRequest{Params: llm.Params{StopTokenIDs: []int{1 << 30}}}, "stop_token_ids"},
	} {
		if c.req.Messages == nil {
			c.req.Messages = user("hi")
		}
		_, err := m.Chat(context.Background(), c.req)
		var pe *llm.ParamError
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %v, want a ParamError", c.name, err)
			continue
		}
		if pe.Param != c.param {
			t.Errorf("%s: param %q (%s), want %q", c.name, pe.Param, pe.Message, c.param)
		}
	}
	_, err := m.Chat(context.Background(), llm.ChatRequest{Messages: user(strings.Repeat("word ", 3000))})
	var ce *llm.ContextLengthError
	if !errors.As(err, &ce) || ce.MaxModelLen != 2048 {
		t.Errorf("long prompt: %v, want a ContextLengthError", err)
	}
}

// tool_choice forces a call, reported as a ToolCall event with typed
// arguments and finish reason tool_calls (or length).
func TestForcedToolCall(t *testing.T) {
	m := openModel(t)
	req := llm.ChatRequest{
		Messages:   user("Weather in Oslo?"),
		Tools:      []llm.Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}}`)}},
		ToolChoice: llm.ToolChoice{Mode: "function", Function: "get_weather"},
		Thinking:   llm.Bool(false),
		Params:     greedy(40),
	}
	out := collect(t, mustChat(t, m, req))[0]
	if out.finish.Finish == llm.FinishLength && len(out.calls) == 0 {
		t.Skip("the random model did not close the call within 40 tokens")
	}
	if len(out.calls) == 0 || out.calls[0].Name != "get_weather" {
		t.Fatalf("calls %+v, content %q", out.calls, out.content)
	}
	if f := out.finish.Finish; f != llm.FinishToolCalls && f != llm.FinishLength {
		t.Errorf("finish %q, want tool_calls or length", f)
	}
	var args map[string]any
	if err := out.calls[0].DecodeArguments(&args); err != nil {
		t.Errorf("arguments %q: %v", out.calls[0].Arguments, err)
	}
}

func mustChat(t *testing.T, m *llm.Model, req llm.ChatRequest) *llm.Stream {
	t.Helper()
	st, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// n choices with one seed: choice i samples with seed+i, so a request
// with seed s+1 reproduces choice 1 as its choice 0.
func TestChoicesAndSeeds(t *testing.T) {
	m := openModel(t)
	p := llm.Params{N: 2, MaxTokens: 6, Seed: llm.Uint64(7), IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Once upon a time"}}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	two := collect(t, st)
	p.N, p.Seed = 1, llm.Uint64(8)
	st, err = m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Once upon a time"}}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	one := collect(t, st)
	if len(two) != 2 || len(one) != 1 {
		t.Fatalf("%d and %d choices", len(two), len(one))
	}
	if two[1].content != one[0].content || len(two[1].tokens) != 6 {
		t.Errorf("choice 1 of seed 7 %q (%d tokens), choice 0 of seed 8 %q", two[1].content, len(two[1].tokens), one[0].content)
	}
}

// Stop strings end a choice with the string as its stop reason.
func TestStopString(t *testing.T) {
	m := openModel(t)
	p := greedy(16)
	p.IgnoreEOS = true
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Hello"}}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	full := collect(t, st)[0].content
	if len(full) < 4 {
		t.Skipf("output %q too short to cut", full)
	}
	stop := full[2:4]
	p.Stop = []string{stop}
	st, err = m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Hello"}}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, st)[0]
	if got.content != full[:strings.Index(full, stop)] || got.finish.Finish != llm.FinishStop || got.finish.StopReason != stop {
		t.Errorf("stop %q: text %q, finish %q %v; full %q", stop, got.content, got.finish.Finish, got.finish.StopReason, full)
	}
}

// Leaving a stream early cancels its choices and frees their sequences.
func TestEarlyCloseFreesSequences(t *testing.T) {
	m := openModel(t)
	p := greedy(1000)
	p.IgnoreEOS = true
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Hello"}}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	for range st.Events() {
		break
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.Stats().OpenSequences != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sequence was not freed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := m.Stats().GenerationTokens; n >= 1000 {
		t.Errorf("%d tokens generated after the close", n)
	}
}
