package httpapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// toolChoiceBody is a greedy chat request with two tools and a tool_choice.
func toolChoiceBody(choice any, thinking bool, stream bool) map[string]any {
	str := map[string]any{"type": "string"}
	tool := func(name, param string) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{param: str}, "required": []any{param}}}}
	}
	return map[string]any{
		"messages":    []any{map[string]any{"role": "user", "content": "What is the weather in Oslo?"}},
		"tools":       []any{tool("get_weather", "city"), tool("search", "query")},
		"tool_choice": choice, "max_tokens": 48, "temperature": 0, "logprobs": true, "stream": stream,
		"chat_template_kwargs": map[string]any{"enable_thinking": thinking},
	}
}

func TestToolChoiceEnforced(t *testing.T) {
	s := startServer(t, Config{})
	for _, c := range []struct {
		choice any
		names  []string
	}{
		{map[string]any{"type": "function", "function": map[string]any{"name": "search"}}, []string{"search"}},
		{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, []string{"get_weather"}},
		{"required", []string{"get_weather", "search"}},
	} {
		status, data := post(t, s, "/v1/chat/completions", toolChoiceBody(c.choice, false, false))
		if status != 200 {
			t.Fatalf("%v: %d %s", c.choice, status, data)
		}
		ch := decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)
		// The raw output, from the logprobs tokens, opens a call.
		var raw strings.Builder
		for _, lp := range ch["logprobs"].(map[string]any)["content"].([]any) {
			raw.WriteString(lp.(map[string]any)["token"].(string))
		}
		if !slices.ContainsFunc(c.names, func(n string) bool {
			return strings.HasPrefix(raw.String(), "<tool_call>\n<function="+n+">\n")
		}) {
			t.Errorf("%v: output %q does not open a call of %v", c.choice, raw.String(), c.names)
		}
		calls, _ := ch["message"].(map[string]any)["tool_calls"].([]any)
		if len(calls) == 0 {
			t.Fatalf("%v: no tool call in %s", c.choice, data)
		}
		fn := calls[0].(map[string]any)["function"].(map[string]any)
		if !slices.Contains(c.names, fn["name"].(string)) {
			t.Errorf("%v: called %v, want one of %v", c.choice, fn["name"], c.names)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(fn["arguments"].(string)), &args); err != nil {
			t.Errorf("%v: arguments %q are not a JSON object: %v", c.choice, fn["arguments"], err)
		}
		t.Logf("%v: raw %q, finish_reason %v, call %v(%v)", c.choice, raw.String(), ch["finish_reason"], fn["name"], fn["arguments"])
		switch ch["finish_reason"] {
		case "tool_calls", "length":
		default:
			t.Errorf("%v: finish_reason %v with a call", c.choice, ch["finish_reason"])
		}
	}

	// Streamed: a tool_calls delta with the name.
	_, data := post(t, s, "/v1/chat/completions", toolChoiceBody(map[string]any{"type": "function", "function": map[string]any{"name": "search"}}, false, true))
	var name string
	for _, e := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		p := strings.TrimPrefix(e, "data: ")
		if p == "[DONE]" {
			continue
		}
		for _, ch := range decodeJSON(t, []byte(p))["choices"].([]any) {
			if tc, ok := ch.(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any); ok && name == "" {
				name, _ = tc[0].(map[string]any)["function"].(map[string]any)["name"].(string)
			}
		}
	}
	if name != "search" {
		t.Errorf("stream: called %q, want search:\n%s", name, data)
	}

	// With thinking the reasoning comes first, unforced.
	status, data := post(t, s, "/v1/chat/completions", toolChoiceBody("required", true, false))
	if status != 200 {
		t.Fatalf("thinking: %d %s", status, data)
	}

	// Errors.
	body := toolChoiceBody("required", false, false)
	delete(body, "tools")
	status, data = post(t, s, "/v1/chat/completions", body)
	checkError(t, status, data, 400, "tool_choice", "needs at least one tool")
	// (A response format beside a forced call is no error: see
	// TestToolChoiceWithFormat.)
}
