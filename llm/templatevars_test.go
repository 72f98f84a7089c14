package llm_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

// openWithTemplate opens the test checkpoint with the chat template of
// testdata/chat/file in place of the Qwen3.5 one: a directory of links to
// the checkpoint's other files.
func openWithTemplate(t *testing.T, file string, o llm.Options) *llm.Model {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "testdata", "chat", file))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "chat_template.jinja" {
			continue
		}
		if err := os.Symlink(filepath.Join(checkpointDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = 1024
	}
	m, err := llm.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// agentLoop is a conversation whose two earlier assistant turns carry
// reasoning: a tool call, then an answer, before the last user query.
func agentLoop() []llm.Message {
	return []llm.Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Reasoning: "I should call get_weather.", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", Content: "Sunny", ToolCallID: "call_1"},
		{Role: "assistant", Reasoning: "The tool says sunny.", Content: "Sunny in Paris."},
		{Role: "user", Content: "And in Oslo?"},
	}
}

// earlierReasoning are the two earlier turns' reasoning as the templates
// render it.
var earlierReasoning = []string{"<think>\nI should call get_weather.\n</think>\n\n<tool_call>", "<think>\nThe tool says sunny.\n</think>\n\nSunny in Paris."}

// keptReasoning reports how many of the earlier turns' reasoning blocks
// the prompt of req holds.
func keptReasoning(t *testing.T, m *llm.Model, req llm.ChatRequest) int {
	t.Helper()
	prompt, _, err := m.ChatPrompt(req)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range earlierReasoning {
		if strings.Contains(prompt, r) {
			n++
		}
	}
	return n
}

func TestPreserveThinking(t *testing.T) {
	preserve := map[string]any{"preserve_thinking": true}
	// The messages as chat completions gives them: reasoning under either
	// key, arguments as a string.
	wire := func() []llm.Message {
		var out []llm.Message
		for i, m := range agentLoop() {
			o := jsonvalue.NewObject()
			o.Set("role", m.Role)
			o.Set("content", m.Content)
			if m.Reasoning != "" {
				key := "reasoning_content"
				if i == 3 {
					key = "reasoning"
				}
				o.Set(key, m.Reasoning)
			}
			for _, c := range m.ToolCalls {
				fn := jsonvalue.NewObject()
				fn.Set("name", c.Name)
				fn.Set("arguments", c.Arguments)
				tc := jsonvalue.NewObject()
				tc.Set("type", "function")
				tc.Set("function", fn)
				o.Set("tool_calls", []any{tc})
			}
			out = append(out, llm.MessageJSON(o))
		}
		return out
	}

	m36 := openWithTemplate(t, "qwen36-like.jinja", llm.Options{})
	for _, c := range []struct {
		name string
		req  llm.ChatRequest
		want int
	}{
		{"no variables", llm.ChatRequest{Messages: agentLoop()}, 0},
		{"preserve_thinking", llm.ChatRequest{Messages: agentLoop(), TemplateArgs: preserve}, 2},
		{"preserve_thinking false", llm.ChatRequest{Messages: agentLoop(), TemplateArgs: map[string]any{"preserve_thinking": false}}, 0},
		{"JSON messages", llm.ChatRequest{Messages: wire(), TemplateArgs: preserve}, 2},
	} {
		if got := keptReasoning(t, m36, c.req); got != c.want {
			t.Errorf("qwen36-like, %s: %d earlier turns' reasoning kept, want %d", c.name, got, c.want)
		}
	}
	// The server's default, and the request's own false over it.
	def := openWithTemplate(t, "qwen36-like.jinja", llm.Options{DefaultTemplateArgs: preserve})
	if got := keptReasoning(t, def, llm.ChatRequest{Messages: agentLoop()}); got != 2 {
		t.Errorf("qwen36-like, default preserve_thinking: %d earlier turns' reasoning kept, want 2", got)
	}
	off := llm.ChatRequest{Messages: agentLoop(), TemplateArgs: map[string]any{"preserve_thinking": false}}
	if got := keptReasoning(t, def, off); got != 0 {
		t.Errorf("qwen36-like, default preserve_thinking, request false: %d earlier turns' reasoning kept, want 0", got)
	}

	// Qwen3.8 keeps it by default.
	m38 := openWithTemplate(t, "qwen38-like.jinja", llm.Options{})
	if got := keptReasoning(t, m38, llm.ChatRequest{Messages: agentLoop()}); got != 2 {
		t.Errorf("qwen38-like: %d earlier turns' reasoning kept, want 2", got)
	}
	if got := keptReasoning(t, m38, off); got != 0 {
		t.Errorf("qwen38-like, preserve_thinking false: %d earlier turns' reasoning kept, want 0", got)
	}

	// Qwen3.5's template has no such variable: reasoning before the last
	// user query is dropped whatever the request says.
	if got := keptReasoning(t, openModel(t), llm.ChatRequest{Messages: agentLoop(), TemplateArgs: preserve}); got != 0 {
		t.Errorf("qwen3.5, preserve_thinking: %d earlier turns' reasoning kept, want 0", got)
	}
}

func TestReasoningEffortVariable(t *testing.T) {
	m35 := openModel(t)
	m38 := openWithTemplate(t, "qwen38-like.jinja", llm.Options{})
	if m35.TemplateReads(llm.ReasoningEffortVar) || !m38.TemplateReads(llm.ReasoningEffortVar) {
		t.Fatalf("TemplateReads(%q): qwen3.5 %v, qwen38-like %v", llm.ReasoningEffortVar,
			m35.TemplateReads(llm.ReasoningEffortVar), m38.TemplateReads(llm.ReasoningEffortVar))
	}
	render := func(m *llm.Model, req llm.ChatRequest) string {
		t.Helper()
		req.Messages = user("Hi")
		prompt, _, err := m.ChatPrompt(req)
		if err != nil {
			t.Fatal(err)
		}
		return prompt
	}
	const line = "Reasoning effort: "
	for _, c := range []struct {
		name     string
		req      llm.ChatRequest
		effort   string // "" for none in the prompt
		thinking bool
	}{
		{"absent", llm.ChatRequest{}, "", true},
		{"low", llm.ChatRequest{ReasoningEffort: "low"}, "low", true},
		{"xhigh", llm.ChatRequest{ReasoningEffort: "xhigh"}, "xhigh", true},
		{"none", llm.ChatRequest{ReasoningEffort: "none"}, "", false},
		{"chat_template_kwargs win", llm.ChatRequest{ReasoningEffort: "low", TemplateArgs: map[string]any{"reasoning_effort": "medium"}}, "medium", true},
		{"chat_template_kwargs alone", llm.ChatRequest{TemplateArgs: map[string]any{"reasoning_effort": "medium"}}, "medium", true},
	} {
		prompt := render(m38, c.req)
		want := ""
		if c.effort != "" {
			want = "<|im_start|>system\n" + line + c.effort + "<|im_end|>\n"
		}
		if got := strings.Contains(prompt, line); got != (want != "") || want != "" && !strings.HasPrefix(prompt, want) {
			t.Errorf("qwen38-like, %s: prompt %q, want the effort %q", c.name, prompt, c.effort)
		}
		if opened := strings.HasSuffix(prompt, "<think>\n"); opened != c.thinking {
			t.Errorf("qwen38-like, %s: thinking %v, want %v", c.name, opened, c.thinking)
		}
	}
	// Qwen3.5's template renders the same whatever the effort (thinking on).
	if low, medium := render(m35, llm.ChatRequest{ReasoningEffort: "low"}), render(m35, llm.ChatRequest{ReasoningEffort: "medium"}); low != medium {
		t.Errorf("qwen3.5: effort low gives %q, medium %q", low, medium)
	}
	// The server's default, and the request's field over it.
	def := openWithTemplate(t, "qwen38-like.jinja", llm.Options{DefaultTemplateArgs: map[string]any{"reasoning_effort": "medium"}})
	if p := render(def, llm.ChatRequest{}); !strings.Contains(p, line+"medium<") {
		t.Errorf("default reasoning_effort medium: prompt %q", p)
	}
	if p := render(def, llm.ChatRequest{ReasoningEffort: "low"}); !strings.Contains(p, line+"low<") {
		t.Errorf("default medium, request low: prompt %q", p)
	}
	var pe *llm.ParamError
	if _, _, err := m38.ChatPrompt(llm.ChatRequest{Messages: user("Hi"), ReasoningEffort: "extreme"}); !errors.As(err, &pe) || pe.Param != "reasoning_effort" {
		t.Errorf("reasoning_effort extreme: %v", err)
	}
}
