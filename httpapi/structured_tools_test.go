package httpapi

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// answerSchema is the response format the tests send beside tools.
var answerSchema = map[string]any{"type": "object", "properties": map[string]any{
	"answer": map[string]any{"type": "string", "maxLength": 12}}, "required": []any{"answer"}, "additionalProperties": false}

// answerFormat matches an answer under answerSchema, with the whitespace
// the automaton allows.
var answerFormat = regexp.MustCompile(`^\s*\{\s*"answer"\s*:\s*"[^"\\]*"\s*\}\s*$`)

// checkCall checks a call of toolChoiceBody's tools: a declared name and
// arguments with exactly its one string parameter.
func checkCall(t *testing.T, what, name, arguments string) {
	t.Helper()
	var args map[string]any
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		t.Fatalf("%s: arguments %q: %v", what, arguments, err)
	}
	want := map[string]string{"get_weather": "city", "search": "query"}[name]
	if _, ok := args[want].(string); want == "" || !ok || len(args) != 1 {
		t.Errorf("%s: call %s(%v) does not follow the declared tools", what, name, args)
	}
}

// TestToolChoiceWithFormat sends every tool_choice beside a response
// format and a structured output on chat: a forced call follows its tool's
// schema; under auto the answer is calls that follow their tools' schemas
// (pushed with a logit bias on "<tool_call>", id 151657) or a text under
// the format, streamed or not, for each of n choices.
func TestToolChoiceWithFormat(t *testing.T) {
	s := startServer(t, Config{})
	formats := map[string]struct {
		field map[string]any
		check *regexp.Regexp
	}{
		"response_format": {map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "a", "schema": answerSchema}}}, answerFormat},
		"structured_outputs": {map[string]any{"structured_outputs": map[string]any{"regex": `(yes|no), [a-z]{1,8}\.`}},
			regexp.MustCompile(`^(yes|no), [a-z]{1,8}\.$`)},
	}
	choices := map[string]any{
		"named":     map[string]any{"type": "function", "function": map[string]any{"name": "search"}},
		"required":  "required",
		"auto":      "auto",
		"auto+bias": "auto",
	}
	for fname, f := range formats {
		for cname, choice := range choices {
			for _, stream := range []bool{false, true} {
				what := fmt.Sprintf("%s, %s, stream %v", fname, cname, stream)
				calls, answers := 0, 0
				for seed := range 3 {
					body := toolChoiceBody(choice, false, stream)
					// (max_tokens leaves room past the margin a budget keeps
					// for what one token can add to a completion.)
					body["temperature"], body["seed"], body["max_tokens"], body["n"] = 1.0, seed, 160, 2
					delete(body, "logprobs")
					if cname == "auto+bias" {
						body["logit_bias"] = map[string]any{"151657": 100}
					}
					for k, v := range f.field {
						body[k] = v
					}
					status, data := post(t, s, "/v1/chat/completions", body)
					if status != 200 {
						t.Fatalf("%s: %d %s", what, status, data)
					}
					for _, ch := range testChoices(t, data, stream) {
						for _, c := range ch.calls {
							checkCall(t, what, c[0], c[1])
							calls++
						}
						switch {
						case len(ch.calls) > 0 && ch.content != "":
							t.Errorf("%s: calls and an answer %q", what, ch.content)
						case len(ch.calls) > 0:
							// (The bias opens calls until the budget
							// closes the last one.)
							if ch.finish != "tool_calls" && (ch.finish != "length" || cname != "auto+bias") {
								t.Errorf("%s: calls, finish_reason %q", what, ch.finish)
							}
						case cname == "named" || cname == "required":
							t.Errorf("%s: no call, answer %q", what, ch.content)
						case ch.finish == "stop" && !f.check.MatchString(ch.content):
							t.Errorf("%s: answer %q does not follow the format", what, ch.content)
						default:
							answers++
						}
					}
				}
				if cname == "auto+bias" && calls == 0 {
					t.Errorf("%s: no call was opened", what)
				}
				if cname == "auto" && answers == 0 {
					t.Errorf("%s: no answer under the format", what)
				}
			}
		}
	}
}

// testChoice is what a test reads of one choice of a chat response.
type testChoice struct {
	content, finish string
	calls           [][2]string // name, arguments
}

// testChoices reads the choices of a chat response, streamed or not.
func testChoices(t *testing.T, data []byte, stream bool) []testChoice {
	t.Helper()
	if !stream {
		var out []testChoice
		for _, c := range decodeJSON(t, data)["choices"].([]any) {
			ch := c.(map[string]any)
			m := ch["message"].(map[string]any)
			cc := testChoice{finish: ch["finish_reason"].(string)}
			cc.content, _ = m["content"].(string)
			list, _ := m["tool_calls"].([]any)
			for _, tc := range list {
				fn := tc.(map[string]any)["function"].(map[string]any)
				cc.calls = append(cc.calls, [2]string{fn["name"].(string), fn["arguments"].(string)})
			}
			out = append(out, cc)
		}
		return out
	}
	byIndex := map[int]*testChoice{}
	for _, ev := range sseEvents(t, data) {
		for _, c := range ev["choices"].([]any) {
			ch := c.(map[string]any)
			i := int(ch["index"].(float64))
			cc := byIndex[i]
			if cc == nil {
				cc = &testChoice{}
				byIndex[i] = cc
			}
			if fr, ok := ch["finish_reason"].(string); ok {
				cc.finish = fr
			}
			d, _ := ch["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				cc.content += s
			}
			list, _ := d["tool_calls"].([]any)
			for _, tc := range list {
				x := tc.(map[string]any)
				k := int(x["index"].(float64))
				for len(cc.calls) <= k {
					cc.calls = append(cc.calls, [2]string{})
				}
				fn, _ := x["function"].(map[string]any)
				if n, ok := fn["name"].(string); ok {
					cc.calls[k][0] += n
				}
				if a, ok := fn["arguments"].(string); ok {
					cc.calls[k][1] += a
				}
			}
		}
	}
	out := make([]testChoice, len(byIndex))
	for i, cc := range byIndex {
		out[i] = *cc
	}
	return out
}

// TestToolChoiceWithFormatResponses sends tool_choice beside text.format
// on the Responses API: a forced call follows its tool's schema, and under
// auto the output is calls that do or a message under the format (chat's
// test opens calls under auto; the grammar is the same).
func TestToolChoiceWithFormatResponses(t *testing.T) {
	s := startServer(t, Config{})
	tool := func(name, param string) map[string]any {
		return map[string]any{"type": "function", "name": name, "parameters": map[string]any{"type": "object",
			"properties": map[string]any{param: map[string]any{"type": "string"}}, "required": []any{param}}}
	}
	for _, c := range []struct {
		name   string
		choice any
	}{
		{"named", map[string]any{"type": "function", "name": "search"}},
		{"required", "required"},
		{"auto", "auto"},
	} {
		calls, answers := 0, 0
		for seed := range 3 {
			body := respBody("What is the weather in Oslo?", 80)
			body["tools"] = []any{tool("get_weather", "city"), tool("search", "query")}
			body["tool_choice"], body["temperature"], body["seed"] = c.choice, 1.0, seed
			body["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "a", "schema": answerSchema}}
			resp := postResponse(t, s, body)
			fcs := respItems(resp, "function_call")
			for _, fc := range fcs {
				checkCall(t, c.name, fc["name"].(string), fc["arguments"].(string))
				calls++
			}
			text := respText(resp)
			switch {
			case len(fcs) > 0 && text != "":
				t.Errorf("%s: calls and a message %q", c.name, text)
			case len(fcs) == 0 && (c.name == "named" || c.name == "required"):
				t.Errorf("%s: no call: %v", c.name, resp["output"])
			case len(fcs) == 0 && resp["status"] == "completed":
				if !answerFormat.MatchString(text) {
					t.Errorf("%s: message %q does not follow the format", c.name, text)
				}
				answers++
			}
		}
		if c.name == "auto" && answers == 0 {
			t.Errorf("%s: no message under the format", c.name)
		}
	}
}

// TestToolChoiceWithFormatMessages sends tool_choice beside output_format
// on the Messages API: "any" and a named tool force a call that follows
// its schema; under auto the answer is tool_use blocks that do or a text
// under the format.
func TestToolChoiceWithFormatMessages(t *testing.T) {
	s := startServer(t, Config{})
	for _, c := range []struct {
		name   string
		choice map[string]any
	}{
		{"tool", map[string]any{"type": "tool", "name": "get_weather"}},
		{"any", map[string]any{"type": "any"}},
		{"auto", map[string]any{"type": "auto"}},
	} {
		uses, answers := 0, 0
		for seed := range 3 {
			body := messagesBody("What is the weather in Oslo?", 80)
			body["tools"] = []any{weatherTool}
			body["tool_choice"], body["temperature"], body["seed"] = c.choice, 1.0, seed
			body["output_format"] = map[string]any{"type": "json_schema", "schema": answerSchema}
			m := postMessage(t, s, "/v1/messages", body)
			var text string
			n := 0
			for _, b := range blocks(t, m) {
				switch b["type"] {
				case "text":
					text += b["text"].(string)
				case "tool_use":
					in, _ := b["input"].(map[string]any)
					city, _ := in["city"].(string)
					days, _ := in["days"].(float64)
					if b["name"] != "get_weather" || len(city) > 20 || days < 1 || days > 7 || days != float64(int(days)) || len(in) != 2 {
						t.Errorf("%s: tool_use %v does not follow the schema", c.name, b)
					}
					n++
				}
			}
			uses += n
			switch {
			case n > 0 && text != "":
				t.Errorf("%s: tool_use and a text %q", c.name, text)
			case n == 0 && (c.name == "tool" || c.name == "any"):
				t.Errorf("%s: no tool_use: %v", c.name, m["content"])
			case n == 0 && m["stop_reason"] == "end_turn":
				if !answerFormat.MatchString(text) {
					t.Errorf("%s: text %q does not follow the format", c.name, text)
				}
				answers++
			}
		}
		if c.name == "auto" && answers == 0 {
			t.Errorf("%s: no text under the format", c.name)
		}
	}
}

// sseEvents decodes the data lines of an event stream, but [DONE].
func sseEvents(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(string(data), "\n") {
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok || payload == "[DONE]" {
			continue
		}
		out = append(out, decodeJSON(t, []byte(payload)))
	}
	return out
}

// TestToolChoiceWithFormatThinking checks auto beside a format with
// thinking on and a small thinking budget: the reasoning comes first and
// is closed in time, then an answer under the format, or calls (opened
// after or within the reasoning) that follow their schemas.
func TestToolChoiceWithFormatThinking(t *testing.T) {
	s := startServer(t, Config{})
	for _, bias := range []bool{false, true} {
		answers := 0
		for seed := range 3 {
			body := toolChoiceBody("auto", true, false)
			body["temperature"], body["seed"], body["max_tokens"], body["thinking_token_budget"] = 1.0, seed, 200, 6
			delete(body, "logprobs")
			body["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "schema": answerSchema}}
			if bias {
				// "<tool_call>" may open a call in the reasoning too (as
				// the models do), which then ends it.
				body["logit_bias"] = map[string]any{"151657": 30}
			}
			status, data := post(t, s, "/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("%d %s", status, data)
			}
			ch := decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)
			m := ch["message"].(map[string]any)
			reasoning, _ := m["reasoning_content"].(string)
			content, _ := m["content"].(string)
			list, _ := m["tool_calls"].([]any)
			what := fmt.Sprintf("bias %v, seed %d", bias, seed)
			if reasoning == "" && len(list) == 0 {
				t.Errorf("%s: no reasoning before the answer", what)
			}
			for _, c := range list {
				fn := c.(map[string]any)["function"].(map[string]any)
				checkCall(t, what, fn["name"].(string), fn["arguments"].(string))
			}
			if len(list) == 0 && ch["finish_reason"] == "stop" {
				if !answerFormat.MatchString(content) {
					t.Errorf("%s: answer %q does not follow the format", what, content)
				}
				answers++
			}
		}
		if !bias && answers == 0 {
			t.Error("no answer after the reasoning")
		}
	}
}
