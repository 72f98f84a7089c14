package httpapi

import (
	"fmt"
	"strings"
	"testing"
)

// completionTexts sends a greedy completion and returns its choices' texts
// by index and the usage.
func completionTexts(t *testing.T, s *Server, body map[string]any) ([]string, map[string]any) {
	t.Helper()
	status, data := post(t, s, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	m := decodeJSON(t, data)
	choices := m["choices"].([]any)
	texts := make([]string, len(choices))
	for k, c := range choices {
		ch := c.(map[string]any)
		i := int(ch["index"].(float64))
		if i != k {
			t.Errorf("choice %d has index %d", k, i)
		}
		if i < 0 || i >= len(texts) {
			t.Fatalf("index %d out of range: %s", i, data)
		}
		texts[i] = ch["text"].(string)
	}
	return texts, m["usage"].(map[string]any)
}

func TestCompletionPromptLists(t *testing.T) {
	s := startServer(t, Config{})
	idsPrompt := s.lm.Tokenizer().Encode("The capital of France")
	var idsAny []any
	for _, id := range idsPrompt {
		idsAny = append(idsAny, id)
	}
	single := func(prompt any) (string, int) {
		texts, u := completionTexts(t, s, map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true})
		if len(texts) != 1 {
			t.Fatalf("one prompt gave %d choices", len(texts))
		}
		return texts[0], int(u["prompt_tokens"].(float64))
	}
	prompts := []any{"Once upon a time", idsAny, "Hello"}
	var want []string
	promptTokens := 0
	for _, p := range prompts {
		text, n := single(p)
		want = append(want, text)
		promptTokens += n
	}
	if want[0] == want[1] && want[1] == want[2] {
		t.Fatalf("the prompts give the same text %q; the order check would be vacuous", want[0])
	}
	// A flat token-id list is one prompt, the same as its text.
	if got, _ := single(idsAny); got != want[1] {
		t.Errorf("token ids prompt %q, want %q", got, want[1])
	}

	// Strings and token-id lists mixed, n = 2: prompt-major choices.
	const n = 2
	body := map[string]any{"prompt": prompts, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "n": n}
	texts, u := completionTexts(t, s, body)
	if len(texts) != len(prompts)*n {
		t.Fatalf("%d prompts, n=%d: %d choices", len(prompts), n, len(texts))
	}
	for i, text := range texts {
		if text != want[i/n] {
			t.Errorf("choice %d: %q, want prompt %d's %q", i, text, i/n, want[i/n])
		}
	}
	if got := int(u["prompt_tokens"].(float64)); got != promptTokens {
		t.Errorf("prompt_tokens %d, want %d", got, promptTokens)
	}
	if got := int(u["completion_tokens"].(float64)); got != len(prompts)*n*6 {
		t.Errorf("completion_tokens %d, want %d", got, len(prompts)*n*6)
	}

	// A list of string prompts with echo.
	body = map[string]any{"prompt": []any{"Once upon a time", "Hello"}, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "echo": true}
	texts, _ = completionTexts(t, s, body)
	if len(texts) != 2 || texts[0] != "Once upon a time"+want[0] || texts[1] != "Hello"+want[2] {
		t.Errorf("echo: %q", texts)
	}

	// Streaming several prompts: each index's deltas add up to its text.
	body = map[string]any{"prompt": prompts, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "n": n,
		"stream": true, "stream_options": map[string]any{"include_usage": true}}
	status, data := post(t, s, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("stream: %d %s", status, data)
	}
	streamed := make([]strings.Builder, len(prompts)*n)
	finished := make([]bool, len(streamed))
	var usage map[string]any
	events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Errorf("stream does not end with [DONE]: %q", events[len(events)-1])
	}
	for _, e := range events[:len(events)-1] {
		c := decodeJSON(t, []byte(strings.TrimPrefix(e, "data: ")))
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		for _, ch := range c["choices"].([]any) {
			chm := ch.(map[string]any)
			i := int(chm["index"].(float64))
			if i < 0 || i >= len(streamed) {
				t.Fatalf("stream index %d out of range", i)
			}
			streamed[i].WriteString(chm["text"].(string))
			if chm["finish_reason"] != nil {
				finished[i] = true
			}
		}
	}
	for i := range streamed {
		if streamed[i].String() != want[i/n] || !finished[i] {
			t.Errorf("streamed choice %d: %q (finished %v), want %q", i, streamed[i].String(), finished[i], want[i/n])
		}
	}
	if usage == nil || int(usage["prompt_tokens"].(float64)) != promptTokens {
		t.Errorf("stream usage %v, want prompt_tokens %d", usage, promptTokens)
	}
}

func TestCompletionPromptErrors(t *testing.T) {
	s := startServer(t, Config{})
	tooMany := make([]any, maxPrompts+1)
	for i := range tooMany {
		tooMany[i] = "x"
	}
	for _, c := range []struct {
		prompt any
		msg    string
	}{
		{[]any{}, "empty array"},
		{[]any{[]any{}}, "prompt[0] must not be empty"},
		{[]any{"a", ""}, "prompt[1] must not be empty"},
		{[]any{1, "a"}, "prompt[1] must be an integer"},
		{[]any{1.5}, "prompt[0] must be an integer"},
		{[]any{"a", 3}, "prompt[1] must be a string or an array of token ids"},
		{[]any{[]any{1, 2}, []any{-1}}, "prompt[1][0] = -1 is outside the vocabulary"},
		{[]any{true}, "prompt[0] is a boolean"},
		{map[string]any{}, "prompt must be a string or an array"},
		{tooMany, fmt.Sprintf("at most %d", maxPrompts)},
	} {
		status, data := post(t, s, "/v1/completions", map[string]any{"prompt": c.prompt, "max_tokens": 2})
		checkError(t, status, data, 400, "prompt", c.msg)
	}
	// Every prompt must fit the context.
	long := strings.Repeat("word ", 3000)
	status, data := post(t, s, "/v1/completions", map[string]any{"prompt": []any{"short", long}, "max_tokens": 2})
	checkError(t, status, data, 400, "", "maximum context length")
}
