package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// templateCheckpoint returns the test checkpoint with the chat template of
// testdata/chat/file in place of the Qwen3.5 one: a directory of links to
// the checkpoint's other files.
func templateCheckpoint(t *testing.T, file string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "testdata", "chat", file))
	if err != nil {
		t.Fatal(err)
	}
	base, dir := checkpoint(t), t.TempDir()
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "chat_template.jinja" {
			continue
		}
		if err := os.Symlink(filepath.Join(base, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// promptServer serves the test checkpoint with the chat template of
// testdata/chat/file, logging each request's prompt to the returned log.
func promptServer(t *testing.T, file string, defaults map[string]any) (*Server, *messagesLogBuffer) {
	t.Helper()
	var log messagesLogBuffer
	s := startServerDir(t, templateCheckpoint(t, file), Config{Log: &log, LogPrompts: true}, llm.Options{DefaultTemplateArgs: defaults})
	return s, &log
}

// servedPrompt posts body to path, which must answer 200, and returns the
// prompt the server ran, from its request log.
func servedPrompt(t *testing.T, s *Server, log *messagesLogBuffer, path string, body map[string]any) string {
	t.Helper()
	if status, data := post(t, s, path, body); status != 200 {
		t.Fatalf("%s: status %d: %s", path, status, data)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	last := lines[len(lines)-1]
	i := strings.LastIndex(last, " prompt=")
	if i < 0 {
		t.Fatalf("log line without a prompt: %s", last)
	}
	var prompt string
	if err := json.Unmarshal([]byte(last[i+len(" prompt="):]), &prompt); err != nil {
		t.Fatalf("log line %s: %v", last, err)
	}
	return prompt
}

// renderedPrompt answers body with /v1/chat/completions/render and
// returns the prompt text of its token ids.
func renderedPrompt(t *testing.T, s *Server, body map[string]any) string {
	t.Helper()
	status, data := post(t, s, "/v1/chat/completions/render", body)
	if status != 200 {
		t.Fatalf("render: status %d: %s", status, data)
	}
	var r renderResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return s.lm.Tokenizer().Decode(r.TokenIDs, false)
}

// The reasoning of the two earlier assistant turns of the agent loops
// below, as the templates render it.
const (
	callReasoning   = "<think>\nI should call get_weather.\n</think>\n\n<tool_call>"
	answerReasoning = "<think>\nThe tool says sunny.\n</think>\n\nSunny in Paris."
)

// keptTurns says which of the earlier turns' reasoning prompt holds.
func keptTurns(prompt string) [2]bool {
	return [2]bool{strings.Contains(prompt, callReasoning), strings.Contains(prompt, answerReasoning)}
}

// agentLoops are one agent loop (a call, its result, an answer, a new
// question) in each API's shape, the earlier reasoning given as each API
// gives it back: reasoning_content and reasoning on chat messages,
// reasoning items (content, and summary only) on Responses, signed
// thinking blocks on Messages.
func agentLoops(s *Server) map[string]map[string]any {
	chat := map[string]any{"messages": []any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": "", "reasoning_content": "I should call get_weather.", "tool_calls": []any{
			map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
		map[string]any{"role": "assistant", "content": "Sunny in Paris.", "reasoning": "The tool says sunny."},
		map[string]any{"role": "user", "content": "And in Oslo?"},
	}, "max_tokens": 1, "temperature": 0}
	responses := respBody([]any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{},
			"content": []any{map[string]any{"type": "reasoning_text", "text": "I should call get_weather."}}},
		map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city": "Paris"}`},
		map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
		map[string]any{"type": "reasoning", "id": "rs_2",
			"summary": []any{map[string]any{"type": "summary_text", "text": "The tool says sunny."}}},
		map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Sunny in Paris."}}},
		map[string]any{"role": "user", "content": "And in Oslo?"},
	}, 1)
	delete(responses, "reasoning")
	thinking := func(text string) map[string]any {
		return map[string]any{"type": "thinking", "thinking": text, "signature": s.sealer.seal(sealSignature, text)}
	}
	messages := messagesBody("", 1)
	delete(messages, "thinking")
	messages["messages"] = []any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": []any{thinking("I should call get_weather."),
			map[string]any{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": map[string]any{"city": "Paris"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny"}}},
		map[string]any{"role": "assistant", "content": []any{thinking("The tool says sunny."), map[string]any{"type": "text", "text": "Sunny in Paris."}}},
		map[string]any{"role": "user", "content": "And in Oslo?"},
	}
	return map[string]map[string]any{"/v1/chat/completions": chat, "/v1/responses": responses, "/v1/messages": messages}
}

// TestPreserveThinkingEndpoints checks that preserve_thinking reaches the
// chat template from every endpoint, in chat_template_kwargs and as the
// server's default, and that each API's earlier reasoning reaches it as
// the turn's reasoning_content.
func TestPreserveThinkingEndpoints(t *testing.T) {
	none, both := [2]bool{}, [2]bool{true, true}
	s, log := promptServer(t, "qwen36-like.jinja", nil)
	for path, body := range agentLoops(s) {
		if got := keptTurns(servedPrompt(t, s, log, path, body)); got != none {
			t.Errorf("qwen36-like, %s: earlier reasoning kept %v without preserve_thinking", path, got)
		}
		body["chat_template_kwargs"] = map[string]any{"preserve_thinking": true}
		if got := keptTurns(servedPrompt(t, s, log, path, body)); got != both {
			t.Errorf("qwen36-like, %s, preserve_thinking: earlier reasoning kept %v, want %v", path, got, both)
		}
	}
	if got := keptTurns(renderedPrompt(t, s, agentLoops(s)["/v1/chat/completions"])); got != none {
		t.Errorf("qwen36-like, render: earlier reasoning kept %v without preserve_thinking", got)
	}
	body := agentLoops(s)["/v1/chat/completions"]
	body["chat_template_kwargs"] = map[string]any{"preserve_thinking": true}
	if got := keptTurns(renderedPrompt(t, s, body)); got != both {
		t.Errorf("qwen36-like, render, preserve_thinking: earlier reasoning kept %v, want %v", got, both)
	}

	// --default-chat-template-kwargs '{"preserve_thinking": true}'; a
	// request's false overrides it.
	s, log = promptServer(t, "qwen36-like.jinja", map[string]any{"preserve_thinking": true})
	for path, body := range agentLoops(s) {
		if got := keptTurns(servedPrompt(t, s, log, path, body)); got != both {
			t.Errorf("qwen36-like, default preserve_thinking, %s: earlier reasoning kept %v, want %v", path, got, both)
		}
		body["chat_template_kwargs"] = map[string]any{"preserve_thinking": false}
		if got := keptTurns(servedPrompt(t, s, log, path, body)); got != none {
			t.Errorf("qwen36-like, default preserve_thinking, %s, request false: earlier reasoning kept %v", path, got)
		}
	}

	// Qwen3.8 preserves by default.
	s, log = promptServer(t, "qwen38-like.jinja", nil)
	for path, body := range agentLoops(s) {
		if got := keptTurns(servedPrompt(t, s, log, path, body)); got != both {
			t.Errorf("qwen38-like, %s: earlier reasoning kept %v, want %v", path, got, both)
		}
	}

	// chat_template_kwargs must be an object everywhere.
	for path, body := range agentLoops(s) {
		body["chat_template_kwargs"] = "preserve_thinking"
		if status, data := post(t, s, path, body); status != 400 || !strings.Contains(string(data), "chat_template_kwargs") {
			t.Errorf("%s, chat_template_kwargs a string: %d %s", path, status, data)
		}
	}
}

// TestReasoningEffortEndpoints checks that each API's effort reaches a
// chat template that reads reasoning_effort (the Qwen3.8 stand-in renders
// it in the system turn), that chat_template_kwargs win over it, and that
// only OpenAI's reasoning_effort turns thinking on (the server's default
// turns it off here).
func TestReasoningEffortEndpoints(t *testing.T) {
	s, log := promptServer(t, "qwen38-like.jinja", map[string]any{"enable_thinking": false})
	user := []any{map[string]any{"role": "user", "content": "Hi"}}
	chat := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": user, "max_tokens": 1, "temperature": 0}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	responses := func(extra map[string]any) map[string]any {
		b := respBody("Hi", 1)
		delete(b, "reasoning")
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	messages := func(extra map[string]any) map[string]any {
		b := messagesBody("Hi", 1)
		delete(b, "thinking")
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	kwargs := map[string]any{"reasoning_effort": "medium"}
	for _, c := range []struct {
		name, path string
		body       map[string]any
		effort     string // "" for none in the prompt
		thinking   bool
	}{
		{"chat, absent", "/v1/chat/completions", chat(nil), "", false},
		{"chat, low", "/v1/chat/completions", chat(map[string]any{"reasoning_effort": "low"}), "low", true},
		{"chat, none", "/v1/chat/completions", chat(map[string]any{"reasoning_effort": "none"}), "", false},
		{"chat, kwargs win", "/v1/chat/completions", chat(map[string]any{"reasoning_effort": "low", "chat_template_kwargs": kwargs}), "medium", true},
		{"responses, xhigh", "/v1/responses", responses(map[string]any{"reasoning": map[string]any{"effort": "xhigh"}}), "xhigh", true},
		{"responses, kwargs", "/v1/responses", responses(map[string]any{"chat_template_kwargs": kwargs}), "medium", false},
		{"responses, kwargs win", "/v1/responses", responses(map[string]any{"reasoning": map[string]any{"effort": "low"}, "chat_template_kwargs": kwargs}), "medium", true},
		{"messages, low", "/v1/messages", messages(map[string]any{"output_config": map[string]any{"effort": "low"}}), "low", false},
		{"messages, max", "/v1/messages", messages(map[string]any{"output_config": map[string]any{"effort": "max"}}), "xhigh", false},
		{"messages, high, thinking", "/v1/messages", messages(map[string]any{"output_config": map[string]any{"effort": "high"}, "thinking": map[string]any{"type": "adaptive"}}), "high", true},
		{"messages, kwargs win", "/v1/messages", messages(map[string]any{"output_config": map[string]any{"effort": "high"}, "chat_template_kwargs": kwargs}), "medium", false},
	} {
		prompt := servedPrompt(t, s, log, c.path, c.body)
		want := "<|im_start|>user\nHi"
		if c.effort != "" {
			want = "<|im_start|>system\nReasoning effort: " + c.effort + "<|im_end|>\n" + want
		}
		if !strings.HasPrefix(prompt, want) {
			t.Errorf("%s: prompt %q, want it to start %q", c.name, prompt, want)
		}
		if opened := strings.HasSuffix(prompt, "<think>\n"); opened != c.thinking {
			t.Errorf("%s: thinking %v, want %v (prompt %q)", c.name, opened, c.thinking, prompt)
		}
	}
	for _, c := range []struct{ path, param string }{
		{"/v1/chat/completions", `"param":"reasoning_effort"`},
		{"/v1/responses", `"param":"reasoning.effort"`},
		{"/v1/messages", "output_config.effort: must be"},
	} {
		body := map[string]map[string]any{
			"/v1/chat/completions": chat(map[string]any{"reasoning_effort": "extreme"}),
			"/v1/responses":        responses(map[string]any{"reasoning": map[string]any{"effort": "extreme"}}),
			"/v1/messages":         messages(map[string]any{"output_config": map[string]any{"effort": "extreme"}}),
		}[c.path]
		if status, data := post(t, s, c.path, body); status != 400 || !strings.Contains(string(data), c.param) {
			t.Errorf("%s, effort extreme: %d %s", c.path, status, data)
		}
	}
}
