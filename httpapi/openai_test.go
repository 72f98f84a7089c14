package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/internal/schemacheck"
	"github.com/govinfer/govinfer/llm"
)

// weatherParams is a tool schema with every JSON type, nesting, enums and
// keywords.
const weatherParams = `{"type":"object","properties":{
	"city":{"type":"string","minLength":2,"maxLength":20},
	"days":{"type":"integer","minimum":1,"maximum":7},
	"units":{"type":"string","enum":["celsius","fahrenheit"]},
	"hourly":{"type":"boolean"},
	"threshold":{"type":["number","null"],"exclusiveMinimum":0,"maximum":50},
	"where":{"type":"object","properties":{"lat":{"type":"number","minimum":-90,"maximum":90},"lon":{"type":"number","minimum":-180,"maximum":180}},"required":["lat","lon"],"additionalProperties":false},
	"fields":{"type":"array","items":{"enum":["temp","wind","rain"]},"minItems":1,"maxItems":3}},
	"required":["city","days","where","fields"],"additionalProperties":false}`

func weatherTools() []any {
	var params any
	json.Unmarshal([]byte(weatherParams), &params)
	return []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather forecast", "parameters": params}},
		map[string]any{"type": "function", "function": map[string]any{"name": "search", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"}}}},
	}
}

// sseChunks splits a streamed response into its JSON chunks.
func sseChunks(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		p := strings.TrimPrefix(e, "data: ")
		if p == "[DONE]" {
			continue
		}
		out = append(out, decodeJSON(t, []byte(p)))
	}
	return out
}

// TestForcedToolCallsOverHTTP forces calls with thinking on (the default),
// streamed and not: each ends with finish_reason tool_calls and arguments
// that match the schema.
func TestForcedToolCallsOverHTTP(t *testing.T) {
	s := startServer(t, Config{})
	for i, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		for _, stream := range []bool{false, true} {
			body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Weather in Oslo?"}},
				"tools": weatherTools(), "tool_choice": choice, "max_tokens": 250, "seed": i, "stream": stream,
				"stream_options": map[string]any{"include_usage": true}}
			status, data := post(t, s, "/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("%v: %d %s", choice, status, data)
			}
			var name, args, finish string
			if stream {
				for _, c := range sseChunks(t, data) {
					for _, ch := range c["choices"].([]any) {
						ch := ch.(map[string]any)
						if f, ok := ch["finish_reason"].(string); ok {
							finish = f
						}
						if tc, ok := ch["delta"].(map[string]any)["tool_calls"].([]any); ok {
							fn := tc[0].(map[string]any)["function"].(map[string]any)
							name, args = fn["name"].(string), fn["arguments"].(string)
						}
					}
				}
			} else {
				ch := decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)
				finish = ch["finish_reason"].(string)
				calls, _ := ch["message"].(map[string]any)["tool_calls"].([]any)
				if len(calls) != 1 {
					t.Fatalf("%v: %d calls: %s", choice, len(calls), data)
				}
				fn := calls[0].(map[string]any)["function"].(map[string]any)
				name, args = fn["name"].(string), fn["arguments"].(string)
			}
			if finish != "tool_calls" {
				t.Fatalf("%v stream=%v: finish_reason %q: %s", choice, stream, finish, data)
			}
			if name == "get_weather" {
				if err := schemacheck.ValidateJSON([]byte(weatherParams), []byte(args)); err != nil {
					t.Fatalf("%v stream=%v: %s: %v", choice, stream, args, err)
				}
			} else if name != "search" || choice != "required" {
				t.Fatalf("%v: called %q", choice, name)
			}
		}
	}
}

func TestReasoningFieldsAndUsage(t *testing.T) {
	s := startServer(t, Config{})
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Think about it."}},
		"max_tokens": 8, "temperature": 0, "ignore_eos": true}
	_, data := post(t, s, "/v1/chat/completions", body)
	resp := decodeJSON(t, data)
	msg := resp["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["reasoning"] == nil || msg["reasoning"] != msg["reasoning_content"] {
		t.Errorf("reasoning %q, reasoning_content %q", msg["reasoning"], msg["reasoning_content"])
	}
	details := resp["usage"].(map[string]any)["completion_tokens_details"].(map[string]any)
	if details["reasoning_tokens"].(float64) == 0 {
		t.Errorf("no reasoning tokens counted: %v", resp["usage"])
	}
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	_, data = post(t, s, "/v1/chat/completions", body)
	var reasoning, reasoningContent strings.Builder
	var usage map[string]any
	for _, c := range sseChunks(t, data) {
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		for _, ch := range c["choices"].([]any) {
			d := ch.(map[string]any)["delta"].(map[string]any)
			if r, ok := d["reasoning"].(string); ok {
				reasoning.WriteString(r)
			}
			if r, ok := d["reasoning_content"].(string); ok {
				reasoningContent.WriteString(r)
			}
		}
	}
	if reasoning.String() == "" || reasoning.String() != reasoningContent.String() || reasoning.String() != msg["reasoning"] {
		t.Errorf("streamed reasoning %q, reasoning_content %q, non-stream %q", reasoning.String(), reasoningContent.String(), msg["reasoning"])
	}
	if usage["completion_tokens_details"].(map[string]any)["reasoning_tokens"] != details["reasoning_tokens"] {
		t.Errorf("streamed usage %v, non-stream %v", usage, resp["usage"])
	}

	// reasoning_effort none turns thinking off.
	body = map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 4, "reasoning_effort": "none", "ignore_eos": true}
	_, data = post(t, s, "/v1/chat/completions", body)
	msg = decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["reasoning"] != nil || msg["content"] == nil {
		t.Errorf("reasoning_effort none: %v", msg)
	}
}

func TestDefaultChatTemplateKwargs(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{DefaultTemplateArgs: map[string]any{"enable_thinking": false}})
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 4, "ignore_eos": true}
	_, data := post(t, s, "/v1/chat/completions", body)
	msg := decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] == nil || msg["reasoning"] != nil {
		t.Errorf("default enable_thinking false: %v", msg)
	}
	body["chat_template_kwargs"] = map[string]any{"enable_thinking": true}
	_, data = post(t, s, "/v1/chat/completions", body)
	msg = decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["reasoning"] == nil {
		t.Errorf("the request's enable_thinking true did not override the default: %v", msg)
	}
}

func TestOpenAIExtras(t *testing.T) {
	var log syncBuffer
	s := startServer(t, Config{Log: &log})
	user := map[string]any{"role": "user", "content": "Hi"}

	// GET /v1/models/{id}.
	status, data := get(t, s, "/v1/models/test-model")
	if m := decodeJSON(t, data); status != 200 || m["id"] != "test-model" || m["object"] != "model" {
		t.Errorf("GET /v1/models/test-model: %d %s", status, data)
	}
	status, data = get(t, s, "/v1/models/other")
	checkError(t, status, data, 404, "model", "does not exist")

	// temperature beyond 2.
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user}, "temperature": 2.5})
	checkError(t, status, data, 400, "temperature", "between 0 and 2")

	// logit_bias: +100 on a token makes it every token.
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user}, "max_tokens": 3, "temperature": 0,
		"logit_bias": map[string]any{"1234": 100}, "logprobs": true, "chat_template_kwargs": map[string]any{"enable_thinking": false}, "ignore_eos": true})
	if status != 200 {
		t.Fatalf("logit_bias: %d %s", status, data)
	}
	text, _ := s.lm.TokenText(1234)
	for _, lp := range decodeJSON(t, data)["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any) {
		if lp.(map[string]any)["token"] != text {
			t.Fatalf("logit_bias +100 on %q: %s", text, data)
		}
	}
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user}, "logit_bias": map[string]any{"x": 1}})
	checkError(t, status, data, 400, "logit_bias", "token ids")

	// The developer role is the system role; only first, as the template says.
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "developer", "content": "Be brief."}, user}, "max_tokens": 1})
	if status != 200 {
		t.Errorf("developer role: %d %s", status, data)
	}
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user, map[string]any{"role": "developer", "content": "Be brief."}}, "max_tokens": 1})
	checkError(t, status, data, 400, "messages", "System message must be at the beginning")

	// Strict json_schema: a keyword not enforced is named.
	status, data = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user}, "response_format": map[string]any{"type": "json_schema",
		"json_schema": map[string]any{"name": "x", "strict": true, "schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer", "multipleOf": 2}}}}}})
	checkError(t, status, data, 400, "response_format.json_schema.schema", `"multipleOf"`)

	// A rejected request gets a log line without its prompt.
	post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "SECRET-PROMPT"}}, "top_p": 7})
	lines := log.String()
	if !strings.Contains(lines, "rejected POST /v1/chat/completions status=400") || !strings.Contains(lines, "top_p") {
		t.Errorf("no log line for the rejected request:\n%s", lines)
	}
	if strings.Contains(lines, "SECRET-PROMPT") {
		t.Errorf("the log holds the prompt:\n%s", lines)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// longBody is a request that runs until cancelled.
func longBody(stream bool) map[string]any {
	return map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Go on."}}, "max_tokens": 1800,
		"ignore_eos": true, "temperature": 0, "stream": stream}
}

// startRequest sends a request that the caller can hang up by cancelling;
// done receives its status (0 if it failed). For a stream, it returns once
// the first chunk arrived when wait is set.
func startRequest(t *testing.T, s *Server, body map[string]any, wait bool) (cancel func(), done chan int) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+s.Addr()+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	done = make(chan int, 1)
	first := make(chan struct{})
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(first)
			done <- 0
			return
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		if _, err := r.ReadString('\n'); err == nil {
			close(first)
		} else {
			close(first)
		}
		io.Copy(io.Discard, r)
		done <- resp.StatusCode
	}()
	if wait {
		<-first
	}
	return cancelFn, done
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// TestHangUpAnyRequest hangs up running and queued requests,
// streaming and not, and checks the engine lets go of them within a few
// steps (a step of the test model takes about a millisecond).
func TestHangUpAnyRequest(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 1, MaxQueue: 2})
	lm := s.Model()
	for _, stream := range []bool{false, true} {
		cancel, done := startRequest(t, s, longBody(stream), stream)
		waitUntil(t, "running", 10*time.Second, func() bool { return lm.Stats().Running == 1 })
		// A queued request behind it.
		qcancel, qdone := startRequest(t, s, longBody(stream), false)
		waitUntil(t, "queued", 10*time.Second, func() bool { return lm.Stats().Waiting == 1 })
		qcancel()
		freed := waitUntil(t, "queued request dropped", 2*time.Second, func() bool { return lm.Stats().Waiting == 0 })
		t.Logf("stream=%v: queued request dropped %v after its client hung up", stream, freed)
		<-qdone
		steps := lm.Stats().Steps
		cancel()
		freed = waitUntil(t, "sequence freed", 2*time.Second, func() bool { st := lm.Stats(); return st.Running == 0 && st.OpenSequences == 0 })
		t.Logf("stream=%v: sequence freed %v (%d steps) after its client hung up", stream, freed, lm.Stats().Steps-steps)
		<-done
	}
	if n := lm.Stats().Finished; n.Length != 0 {
		t.Logf("finished %v", n)
	}
}

// TestStrandedQueue runs the sequence of issue 19 with --max-num-seqs 2
// --max-queue 4: two long streams run, two streaming clients queue and hang
// up, two patient non-streaming clients queue behind them; when the running
// clients hang up, the patient ones must start at once.
func TestStrandedQueue(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 2, MaxQueue: 4})
	lm := s.Model()
	var running []func()
	var runDone []chan int
	for range 2 {
		c, d := startRequest(t, s, longBody(true), true)
		running, runDone = append(running, c), append(runDone, d)
	}
	waitUntil(t, "two running", 10*time.Second, func() bool { return lm.Stats().Running == 2 })
	var quitters []func()
	for range 2 {
		c, _ := startRequest(t, s, longBody(true), false)
		quitters = append(quitters, c)
	}
	waitUntil(t, "two queued", 10*time.Second, func() bool { return lm.Stats().Waiting == 2 })
	patient := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 5, "ignore_eos": true}
	var patientDone []chan int
	for range 2 {
		_, d := startRequest(t, s, patient, false)
		patientDone = append(patientDone, d)
	}
	waitUntil(t, "four queued", 10*time.Second, func() bool { return lm.Stats().Waiting == 4 })
	for _, c := range quitters {
		c()
	}
	waitUntil(t, "the hung-up clients leave the queue", 2*time.Second, func() bool { return lm.Stats().Waiting == 2 })
	for _, c := range running {
		c()
	}
	for i, d := range patientDone {
		select {
		case status := <-d:
			if status != 200 {
				t.Fatalf("patient client %d: status %d", i, status)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("patient client %d never started: %+v", i, lm.Stats())
		}
	}
	for _, d := range runDone {
		<-d
	}
}

func TestRetryAfter(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 1, MaxQueue: 1})
	resp, data := postQueueFull(t, s, "/v1/chat/completions", longBody(false))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("queue full: status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), data)
	}
}

// TestHeavyRequestsBounded sends requests that would cost minutes of CPU
// unbounded; each must be answered with a 400 naming its limit within a
// second.
func TestHeavyRequestsBounded(t *testing.T) {
	s := startServer(t, Config{MaxBodyBytes: 16 << 20})
	user := map[string]any{"role": "user", "content": "Hi"}
	nested := func(depth int) any {
		var v any = map[string]any{"type": "integer"}
		for range depth {
			v = map[string]any{"type": "object", "properties": map[string]any{"x": v}, "required": []any{"x"}}
		}
		return v
	}
	var tools []any
	for i := range 5000 {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": fmt.Sprintf("f%d", i)}})
	}
	cases := []struct {
		name  string
		body  map[string]any
		param string
		want  string
	}{
		{"nested response_format", map[string]any{"messages": []any{user}, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "n", "schema": nested(100)}}}, "response_format.json_schema.schema", "nested too deeply"},
		{"nested tool parameters", map[string]any{"messages": []any{user}, "tool_choice": "required", "tools": []any{map[string]any{"type": "function",
			"function": map[string]any{"name": "f", "parameters": nested(100)}}}}, "tool_choice", "nested too deeply"},
		{"thousands of tools", map[string]any{"messages": []any{user}, "tools": tools}, "tools", "at most 128"},
		{"a multi-megabyte word", map[string]any{"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("a", 6<<20)}}}, "messages", "bytes"},
		{"n times the prompt", map[string]any{"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("word ", 1500)}}, "n": 16, "max_tokens": 1}, "n", "prompt tokens"},
	}
	// The tool-call vocabulary is built on first use (under a second, once
	// per process): build it before timing.
	post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{user}, "tool_choice": "required", "max_tokens": 1,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}})
	for _, c := range cases {
		start := time.Now()
		status, data := post(t, s, "/v1/chat/completions", c.body)
		took := time.Since(start)
		checkError(t, status, data, 400, c.param, c.want)
		if took > time.Second {
			t.Errorf("%s: answered after %v", c.name, took)
		}
		t.Logf("%s: 400 in %v", c.name, took)
	}
}
