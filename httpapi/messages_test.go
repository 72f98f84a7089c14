package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/llm"
)

// messagesBody is a greedy Messages API request without thinking.
func messagesBody(user string, maxTokens int) map[string]any {
	return map[string]any{
		"model":       "test-model",
		"max_tokens":  maxTokens,
		"messages":    []any{map[string]any{"role": "user", "content": user}},
		"temperature": 0,
		"thinking":    map[string]any{"type": "disabled"},
	}
}

// weatherTool is a tool in the Messages API's shape.
var weatherTool = map[string]any{
	"name":        "get_weather",
	"description": "Get the weather of a city",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 20},
		"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
	}, "required": []any{"city", "days"}},
}

// postMessage posts body to path and decodes a 200 answer.
func postMessage(t *testing.T, s *Server, path string, body map[string]any) map[string]any {
	t.Helper()
	status, data := post(t, s, path, body)
	if status != 200 {
		t.Fatalf("%s: status %d: %s", path, status, data)
	}
	return decodeJSON(t, data)
}

// countTokens answers count_tokens for body.
func countTokens(t *testing.T, s *Server, body map[string]any) int {
	t.Helper()
	m := postMessage(t, s, "/v1/messages/count_tokens", body)
	if len(m) != 1 {
		t.Fatalf("count_tokens answered %v", m)
	}
	return int(m["input_tokens"].(float64))
}

// blocks returns a message's content blocks.
func blocks(t *testing.T, m map[string]any) []map[string]any {
	t.Helper()
	c, ok := m["content"].([]any)
	if !ok {
		t.Fatalf("content is not an array: %v", m)
	}
	out := make([]map[string]any, len(c))
	for i, b := range c {
		out[i] = b.(map[string]any)
	}
	return out
}

// checkMessageShape checks the keys and types of a Message.
func checkMessageShape(t *testing.T, m map[string]any) {
	t.Helper()
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"content", "id", "model", "role", "stop_reason", "stop_sequence", "type", "usage"}; !slices.Equal(keys, want) {
		t.Errorf("message keys %v, want %v", keys, want)
	}
	if id, _ := m["id"].(string); !strings.HasPrefix(id, "msg_") || m["type"] != "message" || m["role"] != "assistant" || m["model"] != "test-model" {
		t.Errorf("message %v", m)
	}
	u, _ := m["usage"].(map[string]any)
	for _, k := range []string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"} {
		if _, ok := u[k].(float64); !ok {
			t.Errorf("usage lacks %s: %v", k, u)
		}
	}
	for _, b := range blocks(t, m) {
		switch b["type"] {
		case "text":
			if _, ok := b["text"].(string); !ok || len(b) != 2 {
				t.Errorf("text block %v", b)
			}
		case "thinking":
			th, _ := b["thinking"].(string)
			sig, _ := b["signature"].(string)
			if th == "" || sig == "" || len(b) != 3 {
				t.Errorf("thinking block %v", b)
			}
		case "tool_use":
			id, _ := b["id"].(string)
			_, isObj := b["input"].(map[string]any)
			if !strings.HasPrefix(id, "toolu_") || b["name"] == "" || !isObj || len(b) != 4 {
				t.Errorf("tool_use block %v", b)
			}
		default:
			t.Errorf("block type %v", b["type"])
		}
	}
}

// usageIn is the prompt tokens of an Anthropic usage: input_tokens plus
// cache_read_input_tokens.
func usageIn(m map[string]any) int {
	u := m["usage"].(map[string]any)
	return int(u["input_tokens"].(float64) + u["cache_read_input_tokens"].(float64))
}

// checkAnthropicError checks an error in Anthropic's shape.
func checkAnthropicError(t *testing.T, status int, data []byte, wantStatus int, wantType, msg string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, data)
	}
	m := decodeJSON(t, data)
	e, ok := m["error"].(map[string]any)
	if !ok || len(m) != 2 || m["type"] != "error" || len(e) != 2 {
		t.Fatalf("not an Anthropic error: %s", data)
	}
	if e["type"] != wantType {
		t.Errorf("error type %v, want %s: %s", e["type"], wantType, data)
	}
	if m, _ := e["message"].(string); !strings.Contains(m, msg) {
		t.Errorf("message %q lacks %q", m, msg)
	}
}

// messagesLogBuffer is a log safe for the server's concurrent writes.
type messagesLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *messagesLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *messagesLogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestMessagesText(t *testing.T) {
	s := startServer(t, Config{})
	body := messagesBody("Hello", 6)
	body["system"] = []any{map[string]any{"type": "text", "text": "You are terse.", "cache_control": map[string]any{"type": "ephemeral"}}}
	body["metadata"] = map[string]any{"user_id": "u1"}
	body["service_tier"] = "auto"
	body["context_management"] = map[string]any{"edits": []any{}} // a beta's field: ignored
	body["top_k"] = 5
	body["top_p"] = 0.9
	m := postMessage(t, s, "/v1/messages?beta=true", body) // Claude Code's path
	checkMessageShape(t, m)
	b := blocks(t, m)
	if len(b) != 1 || b[0]["type"] != "text" || b[0]["text"] == "" {
		t.Errorf("content %v", b)
	}
	u := m["usage"].(map[string]any)
	if m["stop_reason"] != "max_tokens" || m["stop_sequence"] != nil || u["output_tokens"].(float64) != 6 || u["cache_creation_input_tokens"].(float64) != 0 {
		t.Errorf("stop %v %v, usage %v", m["stop_reason"], m["stop_sequence"], u)
	}
	// The system prompt as a string renders as its one block did.
	body["system"] = "You are terse."
	if c := countTokens(t, s, body); c != usageIn(m) {
		t.Errorf("count_tokens with a string system %d, usage %v", c, u)
	}
	// Blocks of a user message are its text; a final assistant message is
	// a prefill that the answer continues.
	body["messages"] = []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Hello", "cache_control": map[string]any{"type": "ephemeral"}}}},
		map[string]any{"role": "assistant", "content": "Sure:"},
	}
	m = postMessage(t, s, "/v1/messages", body)
	checkMessageShape(t, m)
	text, _, _ := s.lm.ChatPrompt(llm.ChatRequest{Messages: []llm.Message{{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Hello"}, {Role: "assistant", Content: "Sure:"}}, ContinueFinalMessage: true, Thinking: llm.Bool(false)})
	if !strings.HasSuffix(text, "Sure:") {
		t.Errorf("prefill prompt %q", text)
	}
	if c := countTokens(t, s, body); c != len(s.lm.Tokenizer().Encode(text)) || c != usageIn(m) {
		t.Errorf("prefill: count_tokens %d, usage %v, prompt %q", c, m["usage"], text)
	}
}

// TestMessagesSystemMessages checks where system prompts go: the system
// field and leading system messages make the system message (without
// Claude Code's billing header); later system messages (Claude Code's
// mid-conversation-system beta) the text of the next user turn, so that
// each request's prompt extends the previous one's.
func TestMessagesSystemMessages(t *testing.T) {
	s := startServer(t, Config{})
	sys := func(text string) map[string]any { return map[string]any{"role": "system", "content": text} }
	usr := func(c any) map[string]any { return map[string]any{"role": "user", "content": c} }
	call := map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Oslo", "days": 1}}
	result := map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}
	first := []any{sys("Lead."), usr("Hi"), sys("Agents: x.")}
	second := append(append([]any{}, first...), map[string]any{"role": "assistant", "content": []any{call}},
		sys("Reminder."), usr([]any{result}))
	third := append(append([]any{}, second...), map[string]any{"role": "assistant", "content": "Done."}, usr("Thanks"))
	body := messagesBody("", 4)
	body["tools"] = []any{weatherTool}
	body["system"] = []any{
		map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;"},
		map[string]any{"type": "text", "text": "You are an agent.", "cache_control": map[string]any{"type": "ephemeral"}},
	}
	var prompts []string
	for _, msgs := range [][]any{first, second, third} {
		body["messages"] = msgs
		m := postMessage(t, s, "/v1/messages", body)
		checkMessageShape(t, m)
		prompt, _, err := s.lm.ChatPrompt(mustParseMessages(t, s, body))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(s.lm.Tokenizer().Encode(prompt)); n != usageIn(m) {
			t.Errorf("prompt of %d tokens, usage %v", n, m["usage"])
		}
		prompts = append(prompts, prompt)
	}
	for _, want := range []string{"</IMPORTANT>\n\nYou are an agent.\nLead.<|im_end|>\n<|im_start|>user\nHi\nAgents: x.<|im_end|>\n<|im_start|>assistant\n"} {
		if !strings.Contains(prompts[0], want) {
			t.Errorf("first prompt %q lacks %q", prompts[0], want)
		}
	}
	if strings.Contains(prompts[0], "billing") {
		t.Errorf("the billing header is in the prompt")
	}
	if want := "<tool_response>\nSunny\n</tool_response><|im_end|>\n<|im_start|>user\nReminder.<|im_end|>\n<|im_start|>assistant\n"; !strings.HasSuffix(prompts[1], want+"<think>\n\n</think>\n\n") {
		t.Errorf("second prompt %q does not end with %q", prompts[1], want)
	}
	for i := 1; i < len(prompts); i++ {
		prev := prompts[i-1][:strings.LastIndex(prompts[i-1], "<|im_start|>assistant\n")]
		if !strings.HasPrefix(prompts[i], prev) {
			t.Errorf("prompt %d does not extend prompt %d:\n%q\n%q", i, i-1, prompts[i], prev)
		}
	}
}

func TestMessagesStopSequence(t *testing.T) {
	s := startServer(t, Config{})
	body := messagesBody("Count", 16)
	m := postMessage(t, s, "/v1/messages", body)
	full, _ := blocks(t, m)[0]["text"].(string)
	r := []rune(full)
	if len(r) < 6 {
		t.Skipf("greedy text too short: %q", full)
	}
	stop := string(r[3:5])
	body["stop_sequences"] = []any{"never said", stop}
	m = postMessage(t, s, "/v1/messages", body)
	checkMessageShape(t, m)
	want := full[:strings.Index(full, stop)]
	got := ""
	if b := blocks(t, m); len(b) > 0 {
		got, _ = b[0]["text"].(string)
	}
	if m["stop_reason"] != "stop_sequence" || m["stop_sequence"] != stop || got != want {
		t.Errorf("with stop %q: stop_reason %v, stop_sequence %v, text %q; want text %q", stop, m["stop_reason"], m["stop_sequence"], got, want)
	}
}

func TestMessagesToolUse(t *testing.T) {
	var log messagesLogBuffer
	s := startServer(t, Config{Log: &log})
	body := messagesBody("What is the weather in Oslo?", 200)
	body["tools"] = []any{
		map[string]any{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}, // a server tool: left out
		weatherTool,
	}
	body["tool_choice"] = map[string]any{"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}
	m := postMessage(t, s, "/v1/messages", body)
	checkMessageShape(t, m)
	if m["stop_reason"] != "tool_use" {
		t.Errorf("stop_reason %v", m["stop_reason"])
	}
	call := blocks(t, m)[len(blocks(t, m))-1]
	in, _ := call["input"].(map[string]any)
	city, _ := in["city"].(string)
	days, _ := in["days"].(float64)
	if call["type"] != "tool_use" || call["name"] != "get_weather" || len(in) != 2 || len([]rune(city)) > 20 || days < 1 || days > 7 || days != float64(int(days)) {
		t.Fatalf("tool_use block %v does not match the schema", call)
	}
	if !strings.Contains(log.String(), "left out tools.0 (\"web_search\", type web_search_20250305)") {
		t.Errorf("no log line for the server tool:\n%s", log.String())
	}
	// The tool_result round trip, as a string and as text blocks with
	// is_error; the error is said in the prompt.
	turn := func(result map[string]any, extra ...any) []any {
		return []any{body["messages"].([]any)[0],
			map[string]any{"role": "assistant", "content": m["content"]},
			map[string]any{"role": "user", "content": append([]any{result}, extra...)}}
	}
	ok := map[string]any{"type": "tool_result", "tool_use_id": call["id"], "content": "Sunny, 21 C"}
	bad := map[string]any{"type": "tool_result", "tool_use_id": call["id"], "is_error": true,
		"content": []any{map[string]any{"type": "text", "text": "Sunny, 21 C"}}}
	next := messagesBody("", 4)
	next["tools"] = []any{weatherTool}
	counts := map[string]int{}
	for name, msgs := range map[string][]any{
		"ok": turn(ok), "error": turn(bad),
		"ok and text": turn(ok, map[string]any{"type": "text", "text": "Thanks."}),
	} {
		next["messages"] = msgs
		r := postMessage(t, s, "/v1/messages", next)
		checkMessageShape(t, r)
		counts[name] = countTokens(t, s, next)
		if counts[name] != usageIn(r) {
			t.Errorf("%s: count_tokens %d, usage %v", name, counts[name], r["usage"])
		}
	}
	if counts["error"] <= counts["ok"] {
		t.Errorf("prompt tokens %v: the error is not in the prompt", counts)
	}
	next["messages"] = turn(ok, map[string]any{"type": "text", "text": "Thanks."})
	prompt, _, err := s.lm.ChatPrompt(mustParseMessages(t, s, next))
	if err != nil || !strings.Contains(prompt, "<tool_response>\nSunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>user\nThanks.") {
		t.Errorf("tool_result and text: prompt %q, %v", prompt, err)
	}
	next["messages"] = turn(bad)
	prompt, _, _ = s.lm.ChatPrompt(mustParseMessages(t, s, next))
	if !strings.Contains(prompt, "<tool_response>\nError: Sunny, 21 C\n</tool_response>") {
		t.Errorf("is_error: prompt %q", prompt)
	}
	// any forces some call; none makes none.
	body["tool_choice"] = map[string]any{"type": "any"}
	if m := postMessage(t, s, "/v1/messages", body); m["stop_reason"] != "tool_use" {
		t.Errorf("tool_choice any: %v", m)
	}
	body["tool_choice"] = map[string]any{"type": "none"}
	body["max_tokens"] = 8
	m = postMessage(t, s, "/v1/messages", body)
	for _, b := range blocks(t, m) {
		if b["type"] == "tool_use" {
			t.Errorf("tool_choice none: %v", m)
		}
	}
}

// mustParseMessages reads a Messages API body as s does.
func mustParseMessages(t *testing.T, s *Server, body map[string]any) llm.ChatRequest {
	t.Helper()
	raw, _ := json.Marshal(body)
	r, err := s.parseMessages(raw, false)
	if err != nil {
		t.Fatal(err)
	}
	return r.req
}

func TestMessagesThinking(t *testing.T) {
	var log messagesLogBuffer
	s := startServer(t, Config{Log: &log})
	body := messagesBody("What is the weather in Oslo?", 200)
	body["thinking"] = map[string]any{"type": "enabled", "budget_tokens": 16}
	body["tools"] = []any{weatherTool}
	body["tool_choice"] = map[string]any{"type": "tool", "name": "get_weather"}
	m := postMessage(t, s, "/v1/messages", body)
	checkMessageShape(t, m)
	b := blocks(t, m)
	if len(b) < 2 || b[0]["type"] != "thinking" || b[len(b)-1]["type"] != "tool_use" {
		t.Fatalf("content %v", b)
	}
	th := b[0]
	if text, ok := s.sealer.open(sealSignature, th["signature"].(string)); !ok || text != th["thinking"] {
		t.Errorf("signature opens to %q (%v), thinking %q", text, ok, th["thinking"])
	}
	// Sent back, signed thinking is in the prompt; forged, unsigned or
	// redacted thinking is left out, without an error.
	withThinking := func(first map[string]any) map[string]any {
		c := []any{b[len(b)-1]}
		if first != nil {
			c = append([]any{first}, c...)
		}
		next := messagesBody("", 4)
		next["thinking"] = body["thinking"]
		next["tools"] = body["tools"]
		next["messages"] = []any{body["messages"].([]any)[0],
			map[string]any{"role": "assistant", "content": c},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": b[len(b)-1]["id"], "content": "Sunny"}}}}
		return next
	}
	forged := map[string]any{"type": "thinking", "thinking": th["thinking"], "signature": s.sealer.seal(sealSignature, "something else")}
	counts := map[string]int{}
	for name, first := range map[string]map[string]any{
		"signed": th, "none": nil, "forged": forged,
		"unsigned":    {"type": "thinking", "thinking": th["thinking"]},
		"other field": {"type": "thinking", "thinking": th["thinking"], "signature": s.sealer.seal(sealEncryptedContent, th["thinking"].(string))},
		"redacted":    {"type": "redacted_thinking", "data": "opaque"},
	} {
		next := withThinking(first)
		r := postMessage(t, s, "/v1/messages", next)
		checkMessageShape(t, r)
		counts[name] = countTokens(t, s, next)
		if counts[name] != usageIn(r) {
			t.Errorf("%s: count_tokens %d, usage %v", name, counts[name], r["usage"])
		}
	}
	for _, name := range []string{"forged", "unsigned", "other field", "redacted"} {
		if counts[name] != counts["none"] {
			t.Errorf("%s thinking: %d prompt tokens, %d without it", name, counts[name], counts["none"])
		}
	}
	if counts["signed"] <= counts["none"] {
		t.Errorf("signed thinking: %d prompt tokens, %d without it", counts["signed"], counts["none"])
	}
	prompt, _, _ := s.lm.ChatPrompt(mustParseMessages(t, s, withThinking(th)))
	if !strings.Contains(prompt, "<think>\n"+strings.TrimSpace(th["thinking"].(string))+"\n</think>") {
		t.Errorf("signed thinking not in the prompt %q", prompt)
	}
	if !strings.Contains(log.String(), "its signature is not this server's") || !strings.Contains(log.String(), "redacted thinking") {
		t.Errorf("no log lines for the thinking left out:\n%s", log.String())
	}
	// disabled: no thinking; adaptive: thinking.
	for typ, want := range map[string]bool{"disabled": false, "adaptive": true} {
		body := messagesBody("Hello", 6)
		body["thinking"] = map[string]any{"type": typ}
		b := blocks(t, postMessage(t, s, "/v1/messages", body))
		if got := len(b) > 0 && b[0]["type"] == "thinking"; got != want {
			t.Errorf("thinking %s: content %v", typ, b)
		}
	}
}

// messagesSSEEvent is one server-sent event of a Messages stream.
type messagesSSEEvent struct {
	name string
	data map[string]any
}

// readMessagesStream splits a stream into its events, checking that each
// event's name is its data's type.
func readMessagesStream(t *testing.T, data []byte) []messagesSSEEvent {
	t.Helper()
	var evs []messagesSSEEvent
	for _, chunk := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		name, payload, ok := strings.Cut(chunk, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(payload, "data: ") {
			t.Fatalf("malformed event %q", chunk)
		}
		ev := messagesSSEEvent{strings.TrimPrefix(name, "event: "), decodeJSON(t, []byte(strings.TrimPrefix(payload, "data: ")))}
		if ev.data["type"] != ev.name {
			t.Errorf("event %s has type %v", ev.name, ev.data["type"])
		}
		evs = append(evs, ev)
	}
	return evs
}

// assembleMessages checks the order of a stream's events and rebuilds the
// message they carry, as the SDKs do.
func assembleMessages(t *testing.T, evs []messagesSSEEvent) map[string]any {
	t.Helper()
	if len(evs) < 4 || evs[0].name != "message_start" || evs[1].name != "ping" || evs[len(evs)-1].name != "message_stop" || evs[len(evs)-2].name != "message_delta" {
		t.Fatalf("events %v", evs)
	}
	msg := evs[0].data["message"].(map[string]any)
	if c := msg["content"].([]any); len(c) != 0 || msg["stop_reason"] != nil {
		t.Errorf("message_start %v", msg)
	}
	var content []any
	open := -1 // the index of the open block
	var partial string
	for _, ev := range evs[2 : len(evs)-2] {
		idx := -1
		if v, ok := ev.data["index"].(float64); ok {
			idx = int(v)
		}
		switch ev.name {
		case "ping":
			continue
		case "content_block_start":
			if open != -1 || idx != len(content) {
				t.Fatalf("block %d starts while %d is open, after %d blocks", idx, open, len(content))
			}
			open = idx
			b := ev.data["content_block"].(map[string]any)
			if b["type"] == "tool_use" && !reflect.DeepEqual(b["input"], map[string]any{}) {
				t.Errorf("tool_use starts with input %v", b["input"])
			}
			content = append(content, b)
			partial = ""
		case "content_block_delta":
			if idx != open {
				t.Fatalf("delta for block %d while %d is open", idx, open)
			}
			b := content[idx].(map[string]any)
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				b["text"] = b["text"].(string) + d["text"].(string)
			case "thinking_delta":
				if b["signature"] != "" {
					t.Errorf("thinking after the signature")
				}
				b["thinking"] = b["thinking"].(string) + d["thinking"].(string)
			case "signature_delta":
				b["signature"] = d["signature"]
			case "input_json_delta":
				partial += d["partial_json"].(string)
			default:
				t.Errorf("delta %v", d)
			}
			if b["type"] == "thinking" && d["type"] != "thinking_delta" && d["type"] != "signature_delta" ||
				b["type"] == "text" && d["type"] != "text_delta" || b["type"] == "tool_use" && d["type"] != "input_json_delta" {
				t.Errorf("delta %v in a %v block", d["type"], b["type"])
			}
		case "content_block_stop":
			if idx != open {
				t.Fatalf("stop of block %d while %d is open", idx, open)
			}
			b := content[idx].(map[string]any)
			if b["type"] == "tool_use" {
				var in map[string]any
				if err := json.Unmarshal([]byte(partial), &in); err != nil {
					t.Errorf("tool input %q: %v", partial, err)
				}
				b["input"] = in
			}
			if b["type"] == "thinking" && b["signature"] == "" {
				t.Errorf("thinking block %d stops unsigned", idx)
			}
			open = -1
		default:
			t.Errorf("unexpected event %s", ev.name)
		}
	}
	if open != -1 {
		t.Errorf("block %d never stops", open)
	}
	md := evs[len(evs)-2].data
	d := md["delta"].(map[string]any)
	msg["content"] = content
	msg["stop_reason"], msg["stop_sequence"] = d["stop_reason"], d["stop_sequence"]
	u := msg["usage"].(map[string]any)
	for k, v := range md["usage"].(map[string]any) {
		u[k] = v
	}
	return msg
}

func TestMessagesStream(t *testing.T) {
	s := startServer(t, Config{})
	thinking := messagesBody("Think about it.", 24)
	thinking["thinking"] = map[string]any{"type": "enabled", "budget_tokens": 8}
	tool := messagesBody("What is the weather in Oslo?", 200)
	tool["tools"] = []any{weatherTool}
	tool["tool_choice"] = map[string]any{"type": "any"}
	for name, body := range map[string]map[string]any{"thinking and text": thinking, "tool use": tool} {
		want := postMessage(t, s, "/v1/messages", body)
		body["stream"] = true
		status, data := post(t, s, "/v1/messages", body)
		if status != 200 {
			t.Fatalf("%s: status %d: %s", name, status, data)
		}
		got := assembleMessages(t, readMessagesStream(t, data))
		checkMessageShape(t, got)
		if got["stop_reason"] != want["stop_reason"] || got["usage"].(map[string]any)["output_tokens"] != want["usage"].(map[string]any)["output_tokens"] {
			t.Errorf("%s: streamed %v, not streamed %v", name, got, want)
		}
		if in := usageIn(got); in != countTokens(t, s, body) {
			t.Errorf("%s: streamed usage %v, count_tokens %d", name, got["usage"], in)
		}
		gb, wb := blocks(t, got), blocks(t, want)
		if len(gb) != len(wb) {
			t.Fatalf("%s: streamed blocks %v, not streamed %v", name, gb, wb)
		}
		for i := range gb {
			for _, b := range []map[string]any{gb[i], wb[i]} {
				if b["type"] == "thinking" {
					if text, ok := s.sealer.open(sealSignature, b["signature"].(string)); !ok || text != b["thinking"] {
						t.Errorf("%s: signature of %v does not open to its thinking", name, b)
					}
					delete(b, "signature") // sealed with a fresh nonce each time
				}
				if b["type"] == "tool_use" {
					delete(b, "id")
				}
			}
			if !reflect.DeepEqual(gb[i], wb[i]) {
				t.Errorf("%s: block %d streamed %v, not streamed %v", name, i, gb[i], wb[i])
			}
		}
		if name == "thinking and text" && (len(gb) != 2 || gb[0]["type"] != "thinking" || gb[1]["type"] != "text") {
			t.Errorf("%s: blocks %v", name, gb)
		}
	}
}

func TestMessagesCountTokens(t *testing.T) {
	s := startServer(t, Config{})
	body := messagesBody("Hello there", 3)
	body["system"] = "You are terse."
	body["tools"] = []any{weatherTool}
	body["thinking"] = map[string]any{"type": "enabled", "budget_tokens": 4}
	c := countTokens(t, s, body)
	for range 2 { // the second reads the prompt from the prefix cache
		if m := postMessage(t, s, "/v1/messages", body); usageIn(m) != c {
			t.Errorf("count_tokens %d, usage %v", c, m["usage"])
		}
	}
	delete(body, "max_tokens") // not needed to count
	if got := countTokens(t, s, body); got != c {
		t.Errorf("without max_tokens: %d, want %d", got, c)
	}
	delete(body, "tools")
	if got := countTokens(t, s, body); got >= c {
		t.Errorf("without tools: %d tokens, with them %d", got, c)
	}
	status, data := post(t, s, "/v1/messages/count_tokens", map[string]any{"messages": []any{}})
	checkAnthropicError(t, status, data, 400, "invalid_request_error", "messages")
	body["model"] = "other"
	status, data = post(t, s, "/v1/messages/count_tokens", body)
	checkAnthropicError(t, status, data, 404, "not_found_error", "other")
}

func TestMessagesErrors(t *testing.T) {
	s := startServer(t, Config{MaxBodyBytes: 32 << 10})
	user := func(content any) []any { return []any{map[string]any{"role": "user", "content": content}} }
	text := map[string]any{"type": "text", "text": "Hi"}
	image := map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
	var tools []any
	for i := range llm.MaxTools + 1 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("f%d", i), "input_schema": map[string]any{"type": "object"}})
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		msg  string
	}{
		{"no max_tokens", func(b map[string]any) { delete(b, "max_tokens") }, "max_tokens: required"},
		{"max_tokens 0", func(b map[string]any) { b["max_tokens"] = 0 }, "max_tokens: must be at least 1"},
		{"max_tokens string", func(b map[string]any) { b["max_tokens"] = "9" }, "max_tokens must be a number"},
		{"no messages", func(b map[string]any) { delete(b, "messages") }, "messages: must be a non-empty array"},
		{"empty messages", func(b map[string]any) { b["messages"] = []any{} }, "messages: must be a non-empty array"},
		{"message not an object", func(b map[string]any) { b["messages"] = []any{"hi"} }, "messages.0: must be an object"},
		{"tool role", func(b map[string]any) {
			b["messages"] = append(user("Hi"), map[string]any{"role": "tool", "content": "x"})
		}, `messages.1.role: must be "user", "assistant" or "system", got "tool"`},
		{"system messages only", func(b map[string]any) {
			b["messages"] = []any{map[string]any{"role": "system", "content": "x"}}
		}, "messages: holds no user or assistant message"},
		{"system message with an image", func(b map[string]any) {
			b["messages"] = append(user("Hi"), map[string]any{"role": "system", "content": []any{image}})
		}, "messages.1.content.0.type: image blocks are not supported"},
		{"no content", func(b map[string]any) { b["messages"] = []any{map[string]any{"role": "user"}} }, "messages.0.content: required"},
		{"content a number", func(b map[string]any) { b["messages"] = user(3) }, "messages.0.content: must be a string or an array"},
		{"image block", func(b map[string]any) { b["messages"] = user([]any{text, image}) }, "messages.0.content.1.type: image blocks are not supported"},
		{"document block", func(b map[string]any) {
			b["messages"] = user([]any{map[string]any{"type": "document", "source": map[string]any{}}})
		}, "messages.0.content.0.type: document blocks are not supported"},
		{"image in a tool_result", func(b map[string]any) {
			b["messages"] = user([]any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{text, image}}})
		}, "messages.0.content.0.content.1.type: image blocks are not supported"},
		{"unknown block", func(b map[string]any) { b["messages"] = user([]any{map[string]any{"type": "video"}}) }, `messages.0.content.0.type: "video" blocks are not supported`},
		{"block without text", func(b map[string]any) { b["messages"] = user([]any{map[string]any{"type": "text"}}) }, "messages.0.content.0.text: required"},
		{"tool_use from the user", func(b map[string]any) {
			b["messages"] = user([]any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "f", "input": map[string]any{}}})
		}, "messages.0.content.0.type: tool_use blocks belong in assistant messages"},
		{"tool_use input not an object", func(b map[string]any) {
			b["messages"] = append(user("Hi"), map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "f", "input": "x"}}})
		}, "messages.1.content.0.input must be an object"},
		{"tool_result without id", func(b map[string]any) {
			b["messages"] = user([]any{map[string]any{"type": "tool_result", "content": "x"}})
		}, "messages.0.content.0.tool_use_id: required"},
		{"system not text", func(b map[string]any) { b["system"] = []any{image} }, "system.0.type: image blocks are not supported"},
		{"thinking type", func(b map[string]any) { b["thinking"] = map[string]any{"type": "on"} }, "thinking.type: must be"},
		{"thinking budget", func(b map[string]any) { b["thinking"] = map[string]any{"type": "enabled", "budget_tokens": 0} }, "thinking.budget_tokens: must be at least 1"},
		{"tool_choice type", func(b map[string]any) { b["tool_choice"] = map[string]any{"type": "function"} }, "tool_choice.type: must be"},
		{"tool_choice unknown tool", func(b map[string]any) {
			b["tools"] = []any{weatherTool}
			b["tool_choice"] = map[string]any{"type": "tool", "name": "nope"}
		}, `"nope", which is not in tools`},
		{"tool_choice any without tools", func(b map[string]any) { b["tool_choice"] = map[string]any{"type": "any"} }, `tool_choice "any" needs at least one tool`},
		{"tool without name", func(b map[string]any) {
			b["tools"] = []any{map[string]any{"input_schema": map[string]any{"type": "object"}}}
		}, "tools.0.name: required"},
		{"input_schema not an object schema", func(b map[string]any) {
			b["tools"] = []any{map[string]any{"type": "bash_20250124", "name": "bash"}, map[string]any{"name": "f", "input_schema": map[string]any{"type": "string"}}}
		}, `tools.1.input_schema.type must be "object"`},
		{"too many tools", func(b map[string]any) { b["tools"] = tools }, fmt.Sprintf("at most %d", llm.MaxTools)},
		{"stop_sequences", func(b map[string]any) { b["stop_sequences"] = []any{"a", 3} }, "stop_sequences.1: must be a string"},
		{"temperature", func(b map[string]any) { b["temperature"] = 5 }, "temperature"},
		{"output_format", func(b map[string]any) { b["output_format"] = map[string]any{"type": "xml"} }, `output_format.type: must be "json_schema"`},
	}
	for _, c := range cases {
		body := messagesBody("Hi", 4)
		c.edit(body)
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			if path == "/v1/messages/count_tokens" && c.name == "no max_tokens" {
				continue
			}
			status, data := post(t, s, path, body)
			t.Run(c.name+" "+path, func(t *testing.T) { checkAnthropicError(t, status, data, 400, "invalid_request_error", c.msg) })
		}
	}
	status, data := post(t, s, "/v1/messages", "{not json")
	checkAnthropicError(t, status, data, 400, "invalid_request_error", "not valid JSON")
	body := messagesBody("Hi", 4)
	body["model"] = "claude-sonnet-4-5"
	status, data = post(t, s, "/v1/messages", body)
	checkAnthropicError(t, status, data, 404, "not_found_error", "claude-sonnet-4-5")
	big, _ := json.Marshal(messagesBody(strings.Repeat("word ", 8<<10), 4))
	status, data = postOversized(t, s, "/v1/messages", big)
	checkAnthropicError(t, status, data, 413, "request_too_large", "exceeds")
	// What this server leaves out is not an error: mcp_servers, container,
	// output_format (structured output).
	body = messagesBody("Hi", 40)
	body["mcp_servers"] = []any{map[string]any{"type": "url", "url": "https://example.com/sse", "name": "x"}}
	body["container"] = "c1"
	body["output_format"] = map[string]any{"type": "json_schema", "schema": map[string]any{"type": "object",
		"properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}, "additionalProperties": false}}
	m := postMessage(t, s, "/v1/messages", body)
	if b := blocks(t, m); m["stop_reason"] == "end_turn" {
		var v map[string]any
		if err := json.Unmarshal([]byte(b[0]["text"].(string)), &v); err != nil {
			t.Errorf("output_format: %v: %v", b, err)
		}
	}
}

func TestMessagesAPIKey(t *testing.T) {
	s := startServer(t, Config{APIKey: "sekret"})
	raw, _ := json.Marshal(messagesBody("Hi", 2))
	for _, c := range []struct {
		header, value string
		status        int
	}{{"", "", 401}, {"X-Api-Key", "wrong", 401}, {"X-Api-Key", "sekret", 200}, {"Authorization", "Bearer sekret", 200}} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			req, _ := http.NewRequest("POST", "http://"+s.Addr()+path, bytes.NewReader(raw))
			req.Header.Set("anthropic-version", "2023-06-01")
			if c.header != "" {
				req.Header.Set(c.header, c.value)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if c.status == 401 {
				checkAnthropicError(t, resp.StatusCode, data, 401, "authentication_error", "API key")
			} else if resp.StatusCode != c.status {
				t.Errorf("%s %s: status %d: %s", c.header, path, resp.StatusCode, data)
			}
		}
	}
}

func TestMessagesQueueFull(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 1, MaxQueue: 1})
	resp, data := postQueueFull(t, s, "/v1/messages", messagesBody("hi", 2))
	checkAnthropicError(t, resp.StatusCode, data, 529, "overloaded_error", "queue is full")
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("529 without Retry-After")
	}
}

// TestMessagesDisconnect hangs up a stream and an answer not streamed:
// each cancels its generation.
func TestMessagesDisconnect(t *testing.T) {
	s := startServer(t, Config{})
	send := func(stream bool) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		body := messagesBody("never ending", 1500)
		body["stream"] = stream
		raw, _ := json.Marshal(body)
		fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(raw), raw)
		return conn, bufio.NewReader(conn)
	}
	conn, r := send(true)
	for { // until the first text delta
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"text_delta"`) {
			break
		}
	}
	if st := s.Model().Stats(); st.OpenSequences != 1 {
		t.Fatalf("open sequences while streaming: %d", st.OpenSequences)
	}
	conn.Close()
	waitFor(t, func() bool {
		st := s.Model().Stats()
		return st.OpenSequences == 0 && st.Running == 0 && st.Finished.Cancelled == 1
	})
	conn, _ = send(false)
	waitFor(t, func() bool { return s.Model().Stats().Running == 1 })
	conn.Close()
	waitFor(t, func() bool {
		st := s.Model().Stats()
		return st.OpenSequences == 0 && st.Running == 0 && st.Finished.Cancelled == 2
	})
	if gen := s.Model().Stats().GenerationTokens; gen >= 3000 {
		t.Errorf("generated %d tokens: the requests ran to the end", gen)
	}
}

// TestMessagesStreamFailure closes the server in the middle of a stream:
// the stream ends with an error event, not a dropped connection.
func TestMessagesStreamFailure(t *testing.T) {
	s := startServer(t, Config{})
	body := messagesBody("never ending", 1500)
	body["stream"] = true
	raw, _ := json.Marshal(body)
	resp, err := http.Post("http://"+s.Addr()+"/v1/messages", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var rest strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"text_delta"`) {
			break
		}
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(&rest, r); done <- err }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after the server closed")
	}
	<-closed
	evs := readMessagesStream(t, []byte(rest.String()[strings.Index(rest.String(), "event: "):]))
	last := evs[len(evs)-1]
	if last.name != "error" || last.data["error"].(map[string]any)["type"] != "api_error" {
		t.Errorf("last event %v", last)
	}
	for _, ev := range evs {
		if ev.name == "message_stop" {
			t.Errorf("message_stop in a failed stream")
		}
	}
}

// A block with cache_control marks where the next request may diverge:
// the prefix cache keeps its state at the block's end, so that a request
// appending to the same message (as Claude Code does when it asks again)
// resumes there rather than at the message's start.
func TestMessagesCacheControlBreak(t *testing.T) {
	s := startServer(t, Config{})
	for _, marked := range []bool{false, true} {
		long := fmt.Sprintf("Case %v. ", marked) + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 60)
		body := func(extra string) map[string]any {
			block := map[string]any{"type": "text", "text": "Say hello."}
			if marked {
				block["cache_control"] = map[string]any{"type": "ephemeral"}
			}
			b := messagesBody("", 2)
			b["messages"] = []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": long}, block, map[string]any{"type": "text", "text": extra}}}}
			return b
		}
		first, second := body(strings.Repeat("Available agents: a, b, c. ", 30)), body(strings.Repeat("Please answer. ", 20))
		_, ids1, err1 := s.lm.ChatPrompt(mustParseMessages(t, s, first))
		_, ids2, err2 := s.lm.ChatPrompt(mustParseMessages(t, s, second))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		lcp := 0
		for lcp < min(len(ids1), len(ids2)) && ids1[lcp] == ids2[lcp] {
			lcp++
		}
		postMessage(t, s, "/v1/messages", first)
		u := postMessage(t, s, "/v1/messages", second)["usage"].(map[string]any)
		cached := int(u["cache_read_input_tokens"].(float64))
		t.Logf("cache_control %v: prompts of %d and %d tokens share %d; the second resumed at %d", marked, len(ids1), len(ids2), lcp, cached)
		if marked && (cached > lcp || cached <= lcp-llm.PrefixBlock) {
			t.Errorf("with cache_control the second request resumed at %d, want the block of %d", cached, lcp)
		}
		if !marked && cached > lcp-llm.PrefixBlock {
			t.Errorf("without cache_control the second request resumed at %d, near %d: the test does not test the break", cached, lcp)
		}
	}
}
