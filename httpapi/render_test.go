package httpapi

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// fingerprint is what a greedy generation of three tokens shows of the
// prompt behind it: the tokens and, at each, the five most likely tokens
// with their log-probabilities. With random weights it changes with any
// token of the prompt.
type fingerprint struct {
	tokens []string
	top    []map[string]float64
}

func (f fingerprint) equal(g fingerprint) bool {
	if !slices.Equal(f.tokens, g.tokens) || len(f.top) != len(g.top) {
		return false
	}
	for i := range f.top {
		if !maps.Equal(f.top[i], g.top[i]) {
			return false
		}
	}
	return true
}

// completionFingerprint runs a text completion of prompt (a string or
// token ids) and returns its fingerprint and prompt token count.
func completionFingerprint(t *testing.T, s *Server, prompt any) (fingerprint, int) {
	t.Helper()
	status, data := post(t, s, "/v1/completions", map[string]any{
		"model": "test-model", "prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 5, "ignore_eos": true,
	})
	if status != 200 {
		t.Fatalf("completion: %d %s", status, data)
	}
	var r struct {
		Choices []struct {
			Logprobs struct {
				Tokens      []string             `json:"tokens"`
				TopLogprobs []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	lp := r.Choices[0].Logprobs
	return fingerprint{lp.Tokens, lp.TopLogprobs}, r.Usage.PromptTokens
}

// chatFingerprint runs a chat completion of body (greedy, three tokens,
// logprobs) and returns its fingerprint and prompt token count.
func chatFingerprint(t *testing.T, s *Server, body map[string]any) (fingerprint, int) {
	t.Helper()
	b := maps.Clone(body)
	b["max_tokens"], b["temperature"], b["logprobs"], b["top_logprobs"], b["ignore_eos"] = 3, 0, true, 5, true
	status, data := post(t, s, "/v1/chat/completions", b)
	if status != 200 {
		t.Fatalf("chat: %d %s", status, data)
	}
	var r struct {
		Choices []struct {
			Logprobs struct {
				Content []struct {
					Token       string `json:"token"`
					TopLogprobs []struct {
						Token   string  `json:"token"`
						Logprob float64 `json:"logprob"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var f fingerprint
	for _, c := range r.Choices[0].Logprobs.Content {
		f.tokens = append(f.tokens, c.Token)
		top := map[string]float64{}
		for _, a := range c.TopLogprobs {
			if _, dup := top[a.Token]; !dup {
				top[a.Token] = a.Logprob
			}
		}
		f.top = append(f.top, top)
	}
	return f, r.Usage.PromptTokens
}

func renderIDs(t *testing.T, s *Server, path string, body any) []int {
	t.Helper()
	status, data := post(t, s, path, body)
	if status != 200 {
		t.Fatalf("%s: %d %s", path, status, data)
	}
	var r struct {
		TokenIDs []int `json:"token_ids"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s: %v: %s", path, err, data)
	}
	return r.TokenIDs
}

// TestChatRenderIsWhatChatPrefills checks, for chat requests with tools,
// template kwargs, several turns and continued messages, that the ids
// /v1/chat/completions/render answers are the prompt /v1/chat/completions
// prefills: as many tokens, and a text completion of those ids generates
// what the chat does, with the same log-probabilities.
func TestChatRenderIsWhatChatPrefills(t *testing.T) {
	s := startServer(t, Config{})
	weather := map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather of a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}},
	}}
	user := func(text string) map[string]any { return map[string]any{"role": "user", "content": text} }
	cases := map[string]map[string]any{
		"plain, thinking by default": {"model": "test-model", "messages": []any{user("What is 2+2?")}},
		"system, tools, no thinking": {"model": "test-model", "tools": []any{weather},
			"chat_template_kwargs": map[string]any{"enable_thinking": false},
			"messages":             []any{map[string]any{"role": "system", "content": "Be brief."}, user("Weather in Paris?")}},
		"tool call and result": {"model": "test-model", "tools": []any{weather}, "messages": []any{
			user("Weather in Paris?"),
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
		}},
		"continue final message": {"model": "test-model", "add_generation_prompt": false, "continue_final_message": true,
			"messages": []any{user("Count to five."), map[string]any{"role": "assistant", "content": "One, two,"}}},
	}
	seen := map[string]string{}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			ids := renderIDs(t, s, "/v1/chat/completions/render", body)
			if len(ids) == 0 {
				t.Fatal("no tokens")
			}
			key, _ := json.Marshal(ids)
			if other, dup := seen[string(key)]; dup {
				t.Fatalf("renders the same tokens as %q", other)
			}
			seen[string(key)] = name
			chat, chatPrompt := chatFingerprint(t, s, body)
			comp, compPrompt := completionFingerprint(t, s, ids)
			if chatPrompt != len(ids) || compPrompt != len(ids) {
				t.Errorf("render gave %d tokens; the chat prefilled %d, the completion of them %d", len(ids), chatPrompt, compPrompt)
			}
			if len(chat.tokens) != 3 || !chat.equal(comp) {
				t.Errorf("chat generated %v %v\ncompletion of the rendered ids %v %v", chat.tokens, chat.top, comp.tokens, comp.top)
			}
		})
	}
}

func TestCompletionsRender(t *testing.T) {
	s := startServer(t, Config{})
	status, data := post(t, s, "/v1/completions/render", map[string]any{
		"model": "test-model", "prompt": []any{"Hello there, how", []any{1, 2, 3}}, "max_tokens": 5,
	})
	if status != 200 {
		t.Fatalf("%d %s", status, data)
	}
	var rs []struct {
		TokenIDs []int `json:"token_ids"`
	}
	if err := json.Unmarshal(data, &rs); err != nil || len(rs) != 2 {
		t.Fatalf("want an array of two results: %v %s", err, data)
	}
	if !slices.Equal(rs[1].TokenIDs, []int{1, 2, 3}) {
		t.Errorf("token ids rendered as %v", rs[1].TokenIDs)
	}
	// The rendered ids of the text are what /v1/completions prefills.
	text, textPrompt := completionFingerprint(t, s, "Hello there, how")
	ids, idsPrompt := completionFingerprint(t, s, rs[0].TokenIDs)
	if textPrompt != len(rs[0].TokenIDs) || idsPrompt != textPrompt || !text.equal(ids) {
		t.Errorf("text: %d tokens %v; rendered ids (%d): %d tokens %v", textPrompt, text, len(rs[0].TokenIDs), idsPrompt, ids)
	}
}

func TestRenderErrors(t *testing.T) {
	s := startServer(t, Config{})
	cases := []struct {
		path, body string
		status     int
		param, msg string
	}{
		{"/v1/completions/render", `{"model":"other","prompt":"x"}`, 404, "model", "does not exist"},
		{"/v1/completions/render", `{"model":"test-model"}`, 400, "prompt", "required"},
		{"/v1/completions/render", `{"prompt":"x","temperature":"hot"}`, 400, "temperature", ""},
		{"/v1/chat/completions/render", `{"messages":[]}`, 400, "messages", "non-empty"},
		{"/v1/chat/completions/render", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", ""},
		{"/v1/chat/completions/render", `not json`, 400, "", ""},
	}
	for _, c := range cases {
		status, data := post(t, s, c.path, c.body)
		checkError(t, status, data, c.status, c.param, c.msg)
	}
	if status, _ := get(t, s, "/v1/chat/completions/render"); status != 405 {
		t.Errorf("GET render: %d", status)
	}
}
