package httpapi

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/tokenizer"
)

func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// step runs one sampling step on random logits: Process, argmax, Accept.
// It fails the test if every token is masked.
func step(t *testing.T, f *toolForcer, rng *rand.Rand, vocab int) int {
	t.Helper()
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	f.Process(logits)
	best := -1
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) && (best < 0 || v > logits[best]) {
			best = i
		}
	}
	if best < 0 {
		t.Fatal("every token is masked")
	}
	if err := f.Accept(best); err != nil {
		t.Fatal(err)
	}
	return best
}

func TestToolForcerNamed(t *testing.T) {
	tok := testTokenizer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	f, err := newToolForcer(tok, "get_weather", []string{"get_weather", "search"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for !f.free {
		if len(ids) > 50 {
			t.Fatal("the forced prefix never ends")
		}
		ids = append(ids, step(t, f, rng, tok.VocabSize()+3))
	}
	if got, want := tok.Decode(ids, false), "<tool_call>\n<function=get_weather>\n"; got != want {
		t.Errorf("forced %q, want %q", got, want)
	}
	// Free afterwards: nothing is masked.
	logits := []float32{1, 2, 3}
	f.Process(logits)
	if !slices.Equal(logits, []float32{1, 2, 3}) {
		t.Errorf("free phase masked %v", logits)
	}
	// A token other than the forced one is refused.
	g, _ := newToolForcer(tok, "search", nil, false)
	if err := g.Accept(g.forced[0] + 1); err == nil {
		t.Error("a token other than the forced one was accepted")
	}
}

func TestToolForcerRequired(t *testing.T) {
	tok := testTokenizer(t)
	// "get" is a prefix of "get_weather": the closing ">" tells them apart.
	names := []string{"get", "get_weather", "search_web", "x"}
	seen := map[string]bool{}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		f, err := newToolForcer(tok, "", names, false)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for !f.free {
			if len(ids) > 60 {
				t.Fatalf("seed %d: no name completed: %q", seed, tok.Decode(ids, false))
			}
			if f.pos == len(f.forced) && seed < 3 {
				// Reference: a token is allowed iff it is ordinary and the
				// text with it is a prefix of some full call opening.
				text := tok.Decode(ids, false)
				logits := make([]float32, tok.VocabSize())
				f.Process(logits)
				for id := range logits {
					b := tok.TokenBytes(id)
					want := !tok.IsAdded(id) && len(b) > 0 && slices.ContainsFunc(names, func(n string) bool {
						return strings.HasPrefix(callOpen+n+callNameClose, text+string(b))
					})
					if got := !math.IsInf(float64(logits[id]), -1); got != want {
						t.Fatalf("after %q token %d (%q): allowed %v, want %v", text, id, b, got, want)
					}
				}
			}
			ids = append(ids, step(t, f, rng, tok.VocabSize()))
		}
		text := tok.Decode(ids, false)
		name, ok := strings.CutPrefix(text, callOpen)
		name, ok2 := strings.CutSuffix(name, callNameClose)
		if !ok || !ok2 || !slices.Contains(names, name) {
			t.Fatalf("seed %d: forced %q, not a call opening of one of %v", seed, text, names)
		}
		seen[name] = true
	}
	if len(seen) < 2 {
		t.Errorf("random logits only ever spelled %v", seen)
	}
}

func TestToolForcerAfterThinking(t *testing.T) {
	tok := testTokenizer(t)
	think, ok := tok.TokenID("</think>")
	if !ok {
		t.Fatal("no </think> token")
	}
	f, err := newToolForcer(tok, "search", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	// Reasoning is free.
	for _, id := range tok.Encode("Let me think about it.") {
		logits := []float32{0.5, -1, 2}
		f.Process(logits)
		if !slices.Equal(logits, []float32{0.5, -1, 2}) {
			t.Fatalf("reasoning was masked: %v", logits)
		}
		if err := f.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Accept(think); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ids []int
	for !f.free {
		if len(ids) > 50 {
			t.Fatal("the forced prefix never ends")
		}
		ids = append(ids, step(t, f, rng, tok.VocabSize()))
	}
	if got, want := tok.Decode(ids, false), "\n\n<tool_call>\n<function=search>\n"; got != want {
		t.Errorf("forced after reasoning %q, want %q", got, want)
	}
}

func TestToolForcerBadNames(t *testing.T) {
	tok := testTokenizer(t)
	if _, err := newToolForcer(tok, "", nil, false); err == nil {
		t.Error("required with no tools was accepted")
	}
	if _, err := newToolForcer(tok, "a>b", nil, false); err == nil {
		t.Error("a name with '>' was accepted")
	}
}

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
	body = toolChoiceBody("required", false, false)
	body["response_format"] = map[string]any{"type": "json_object"}
	status, data = post(t, s, "/v1/chat/completions", body)
	checkError(t, status, data, 400, "response_format", "cannot be combined")
}
