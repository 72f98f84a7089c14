package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// choiceTexts returns the text of each choice of a chat or completions
// response, and their finish reasons.
func choiceTexts(t *testing.T, data []byte) ([]string, []string) {
	t.Helper()
	var texts, finish []string
	for _, c := range decodeJSON(t, data)["choices"].([]any) {
		ch := c.(map[string]any)
		if m, ok := ch["message"].(map[string]any); ok {
			s, _ := m["content"].(string)
			texts = append(texts, s)
		} else {
			texts = append(texts, ch["text"].(string))
		}
		finish = append(finish, ch["finish_reason"].(string))
	}
	return texts, finish
}

// streamTexts joins the deltas of a streamed response by choice index.
func streamTexts(t *testing.T, data []byte) map[int]string {
	t.Helper()
	out := map[int]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		for _, c := range decodeJSON(t, []byte(line))["choices"].([]any) {
			ch := c.(map[string]any)
			i := int(ch["index"].(float64))
			if d, ok := ch["delta"].(map[string]any); ok {
				s, _ := d["content"].(string)
				out[i] += s
			} else if s, ok := ch["text"].(string); ok {
				out[i] += s
			}
		}
	}
	return out
}

func TestStructuredOutputs(t *testing.T) {
	s := startServer(t, Config{})
	phone := `\(\d{3}\) \d{3}-\d{4}`
	cases := []struct {
		name  string
		field map[string]any
		check *regexp.Regexp
	}{
		{"regex", map[string]any{"structured_outputs": map[string]any{"regex": phone}}, regexp.MustCompile(`^` + phone + `$`)},
		{"choice", map[string]any{"structured_outputs": map[string]any{"choice": []any{"red", "green", "blue sky"}}}, regexp.MustCompile(`^(red|green|blue sky)$`)},
		{"gbnf", map[string]any{"structured_outputs": map[string]any{"grammar": "root ::= \"[\" item (\",\" item){0,2} \"]\"\nitem ::= [a-c] | \"(\" [0-9]{1,2} \")\""}},
			regexp.MustCompile(`^\[([a-c]|\(\d{1,2}\))(,([a-c]|\(\d{1,2}\))){0,2}\]$`)},
		{"llama_grammar", map[string]any{"grammar": `root ::= ("yes" | "no") "!"`}, regexp.MustCompile(`^(yes|no)!$`)},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
				body := chatBody("Answer.", 40)
				if path == "/v1/completions" {
					body = map[string]any{"prompt": "Answer:", "max_tokens": 40}
				}
				body["n"], body["temperature"], body["seed"], body["stream"] = 3, 1.0, 5, stream
				for k, v := range c.field {
					body[k] = v
				}
				status, data := post(t, s, path, body)
				if status != 200 {
					t.Fatalf("%s %s stream=%v: %d %s", c.name, path, stream, status, data)
				}
				var texts []string
				if stream {
					for _, s := range streamTexts(t, data) {
						texts = append(texts, s)
					}
				} else {
					var finish []string
					texts, finish = choiceTexts(t, data)
					for i, f := range finish {
						if f != "stop" {
							t.Errorf("%s %s: choice %d finished with %q (%q)", c.name, path, i, f, texts[i])
						}
					}
				}
				if len(texts) != 3 {
					t.Fatalf("%s %s stream=%v: %d choices: %s", c.name, path, stream, len(texts), data)
				}
				for _, text := range texts {
					if !c.check.MatchString(text) {
						t.Errorf("%s %s stream=%v: %q does not match", c.name, path, stream, text)
					}
				}
			}
		}
	}
}

func TestStructuredOutputsRefused(t *testing.T) {
	s := startServer(t, Config{})
	for _, c := range []struct {
		field       map[string]any
		param, want string
	}{
		{map[string]any{"structured_outputs": map[string]any{"regex": "a(?=b)"}}, "structured_outputs.regex", "at byte 1"},
		{map[string]any{"structured_outputs": map[string]any{"regex": "(a|b)*a(a|b){20}"}}, "structured_outputs.regex", "too large"},
		{map[string]any{"structured_outputs": map[string]any{"regexp": "a"}}, "structured_outputs.regexp", "not supported"},
		{map[string]any{"structured_outputs": map[string]any{"structural_tag": "{}"}}, "structured_outputs.structural_tag", "not supported"},
		{map[string]any{"structured_outputs": map[string]any{"grammar": `root ::= "a" root`}}, "structured_outputs.grammar", "can never end"},
		{map[string]any{"structured_outputs": map[string]any{"grammar": `root ::= "a`}}, "structured_outputs.grammar", "at byte 9"},
		{map[string]any{"grammar": `root ::= x`}, "grammar", "undefined rule"},
		{map[string]any{"grammar": `root ::= "a"`, "response_format": map[string]any{"type": "json_object"}}, "grammar", "response_format and grammar"},
		{map[string]any{"structured_outputs": map[string]any{"regex": "a", "choice": []any{"b"}}}, "structured_outputs.choice", "structured_outputs.regex and structured_outputs.choice"},
		{map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"strict": true,
			"schema": map[string]any{"type": "string", "pattern": "x\\"}}}}, "response_format.json_schema.schema", "pattern"},
	} {
		body := chatBody("Hi", 8)
		for k, v := range c.field {
			body[k] = v
		}
		status, data := post(t, s, "/v1/chat/completions", body)
		e, _ := decodeJSON(t, data)["error"].(map[string]any)
		if status != 400 || e == nil || e["param"] != c.param || !strings.Contains(e["message"].(string), c.want) {
			t.Errorf("%v: %d %s; want 400 on %s containing %q", c.field, status, data, c.param, c.want)
		}
	}
}

// TestSchemaPattern checks that a JSON schema's pattern is enforced, strict
// or not.
func TestSchemaPattern(t *testing.T) {
	s := startServer(t, Config{})
	for _, strict := range []bool{false, true} {
		body := chatBody("Give an id.", 60)
		body["n"], body["temperature"], body["seed"] = 2, 1.0, 9
		body["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "id", "strict": strict,
			"schema": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string", "pattern": `^[A-Z]{2}-\d{2}$`}},
				"required": []any{"id"}, "additionalProperties": false}}}
		status, data := post(t, s, "/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("strict %v: %d %s", strict, status, data)
		}
		texts, _ := choiceTexts(t, data)
		for _, text := range texts {
			if !regexp.MustCompile(`^\s*\{\s*"id"\s*:\s*"[A-Z]{2}-\d{2}"\s*\}\s*$`).MatchString(text) {
				t.Errorf("strict %v: %q does not match the pattern", strict, text)
			}
		}
	}
}

// TestStructuredAfterThinking checks that with thinking on the reasoning
// is free and the constraint applies to the answer after "</think>",
// within the thinking budget, for a regex and a JSON schema.
func TestStructuredAfterThinking(t *testing.T) {
	s := startServer(t, Config{})
	for name, c := range map[string]struct {
		field map[string]any
		check *regexp.Regexp
	}{
		"regex": {map[string]any{"structured_outputs": map[string]any{"regex": `(yes|no), [a-z]{1,6}\.`}}, regexp.MustCompile(`^(yes|no), [a-z]{1,6}\.$`)},
		"json": {map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a",
			"schema": map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []any{"ok"}, "additionalProperties": false}}}},
			regexp.MustCompile(`^\s*\{\s*"ok"\s*:\s*(true|false)\s*\}\s*$`)},
	} {
		for _, stream := range []bool{false, true} {
			body := chatBody("Think, then answer.", 60)
			body["n"], body["temperature"], body["seed"], body["stream"] = 2, 1.0, 4, stream
			body["chat_template_kwargs"] = map[string]any{"enable_thinking": true}
			body["thinking_token_budget"] = 6
			for k, v := range c.field {
				body[k] = v
			}
			status, data := post(t, s, "/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("%s: %d %s", name, status, data)
			}
			if stream {
				for _, text := range streamTexts(t, data) {
					if !c.check.MatchString(text) {
						t.Errorf("%s streamed: answer %q does not match", name, text)
					}
				}
				continue
			}
			for _, ch := range decodeJSON(t, data)["choices"].([]any) {
				m := ch.(map[string]any)["message"].(map[string]any)
				content, _ := m["content"].(string)
				reasoning, _ := m["reasoning_content"].(string)
				if !c.check.MatchString(content) || reasoning == "" {
					t.Errorf("%s: reasoning %q, answer %q", name, reasoning, content)
				}
			}
		}
	}
}

// TestAutoToolCallsConstrained checks that a call the model opens on its
// own under tool_choice auto (pushed here with a logit bias on
// "<tool_call>", id 151657 in the Qwen3 tokenizer) names a declared tool
// and has arguments that follow its schema.
func TestAutoToolCallsConstrained(t *testing.T) {
	s := startServer(t, Config{})
	calls := 0
	for seed := range 4 {
		body := toolChoiceBody("auto", false, false)
		body["temperature"], body["seed"], body["max_tokens"] = 1.0, seed, 80
		body["logit_bias"] = map[string]any{"151657": 100}
		status, data := post(t, s, "/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("%d %s", status, data)
		}
		msg := decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		list, _ := msg["tool_calls"].([]any)
		for _, c := range list {
			fn := c.(map[string]any)["function"].(map[string]any)
			name := fn["name"].(string)
			var args map[string]any
			if err := json.Unmarshal([]byte(fn["arguments"].(string)), &args); err != nil {
				t.Fatalf("seed %d: arguments %q: %v", seed, fn["arguments"], err)
			}
			want := map[string]string{"get_weather": "city", "search": "query"}[name]
			if _, ok := args[want].(string); want == "" || !ok || len(args) != 1 {
				t.Errorf("seed %d: call %s(%v) does not follow the declared tools", seed, name, args)
			}
			calls++
		}
	}
	if calls == 0 {
		t.Errorf("no call was opened")
	}
}

// TestStructuredBatchedAndCached runs requests with different constraints
// at once (decoded in the same batches) on one prompt, twice: the second
// round starts from the prefix cache. Every answer follows its own
// constraint, and the second round's prompts were cached.
func TestStructuredBatchedAndCached(t *testing.T) {
	s := startServer(t, Config{})
	cases := map[string]struct {
		field map[string]any
		check *regexp.Regexp
	}{
		"regex":  {map[string]any{"structured_outputs": map[string]any{"regex": `\d{3}-[a-z]{2,5}`}}, regexp.MustCompile(`^\d{3}-[a-z]{2,5}$`)},
		"choice": {map[string]any{"structured_outputs": map[string]any{"choice": []any{"alpha", "beta"}}}, regexp.MustCompile(`^(alpha|beta)$`)},
		"gbnf":   {map[string]any{"grammar": `root ::= "<" [a-z]{1,4} ">"`}, regexp.MustCompile(`^<[a-z]{1,4}>$`)},
		"json": {map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "schema": answerSchema}}},
			answerFormat},
		"free": {nil, regexp.MustCompile(`(?s).*`)},
	}
	prompt := strings.Repeat("The same long prompt for every request, so that its prefix is cached. ", 8)
	for round := range 2 {
		type result struct {
			name   string
			status int
			data   []byte
		}
		results := make(chan result, len(cases))
		for name, c := range cases {
			go func() {
				body := chatBody(prompt, 30)
				body["temperature"], body["seed"] = 1.0, round
				for k, v := range c.field {
					body[k] = v
				}
				status, data := post(t, s, "/v1/chat/completions", body)
				results <- result{name, status, data}
			}()
		}
		for range cases {
			r := <-results
			if r.status != 200 {
				t.Fatalf("%s: %d %s", r.name, r.status, r.data)
			}
			texts, _ := choiceTexts(t, r.data)
			if !cases[r.name].check.MatchString(texts[0]) {
				t.Errorf("round %d, %s: %q does not follow the constraint", round, r.name, texts[0])
			}
			u := decodeJSON(t, r.data)["usage"].(map[string]any)
			cached, _ := u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
			if round == 1 && cached == 0 {
				t.Errorf("round 1, %s: no cached prompt tokens: %v", r.name, u)
			}
		}
	}
}
