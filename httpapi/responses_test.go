package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/llm"
)

// respBody is a greedy Responses API request without reasoning.
func respBody(input any, maxTokens int) map[string]any {
	return map[string]any{
		"model":             "test-model",
		"input":             input,
		"temperature":       0,
		"max_output_tokens": maxTokens,
		"reasoning":         map[string]any{"effort": "none"},
	}
}

// postResponse posts a Responses API request that must succeed.
func postResponse(t *testing.T, s *Server, body map[string]any) map[string]any {
	t.Helper()
	status, data := post(t, s, "/v1/responses", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	return decodeJSON(t, data)
}

// respItems returns the output items of a response of the given type.
func respItems(resp map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, it := range resp["output"].([]any) {
		if m := it.(map[string]any); m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// respText is the text of a response's message items.
func respText(resp map[string]any) string {
	var b strings.Builder
	for _, m := range respItems(resp, "message") {
		for _, c := range m["content"].([]any) {
			b.WriteString(c.(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

func respUsageNum(resp map[string]any, path ...string) int {
	var v any = resp["usage"]
	for _, k := range path {
		v = v.(map[string]any)[k]
	}
	return int(v.(float64))
}

func TestResponsesStringInput(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("Hello there", 6)
	body["metadata"] = map[string]any{"k": "v"}
	body["instructions"] = "Be brief."
	body["user"] = "u1"
	resp := postResponse(t, s, body)
	if id, _ := resp["id"].(string); !strings.HasPrefix(id, "resp_") || resp["object"] != "response" {
		t.Errorf("id/object: %v %v", resp["id"], resp["object"])
	}
	if st := resp["status"]; st != "completed" && st != "incomplete" {
		t.Errorf("status %v", st)
	}
	msgs := respItems(resp, "message")
	if len(msgs) != 1 {
		t.Fatalf("want one message item: %v", resp["output"])
	}
	m := msgs[0]
	if !strings.HasPrefix(m["id"].(string), "msg_") || m["role"] != "assistant" {
		t.Errorf("message item %v", m)
	}
	part := m["content"].([]any)[0].(map[string]any)
	if part["type"] != "output_text" || part["annotations"] == nil || part["logprobs"] == nil {
		t.Errorf("content part %v", part)
	}
	if resp["metadata"].(map[string]any)["k"] != "v" || resp["instructions"] != "Be brief." || resp["user"] != "u1" || resp["store"] != true {
		t.Errorf("echoed fields: %v", resp)
	}
	if resp["error"] != nil || resp["model"] != "test-model" {
		t.Errorf("error/model %v %v", resp["error"], resp["model"])
	}
	in, out := respUsageNum(resp, "input_tokens"), respUsageNum(resp, "output_tokens")
	if in < 5 || out < 1 || respUsageNum(resp, "total_tokens") != in+out {
		t.Errorf("usage %v", resp["usage"])
	}
	respUsageNum(resp, "input_tokens_details", "cached_tokens")
	respUsageNum(resp, "output_tokens_details", "reasoning_tokens")
}

// respWeatherTool is a function tool of the Responses API.
var respWeatherTool = map[string]any{"type": "function", "name": "get_weather", "description": "Weather of a city",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required": []any{"city"}, "additionalProperties": false}, "strict": true}

func TestResponsesFunctionCallRoundTrip(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("Weather in Paris?", 60)
	body["tools"] = []any{respWeatherTool}
	body["tool_choice"] = map[string]any{"type": "function", "name": "get_weather"}
	resp := postResponse(t, s, body)
	calls := respItems(resp, "function_call")
	if len(calls) != 1 {
		t.Fatalf("want one function_call: %v", resp["output"])
	}
	fc := calls[0]
	callID, _ := fc["call_id"].(string)
	if !strings.HasPrefix(fc["id"].(string), "fc_") || callID == "" || fc["name"] != "get_weather" || fc["status"] != "completed" {
		t.Errorf("function_call %v", fc)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(fc["arguments"].(string)), &args); err != nil {
		t.Fatalf("arguments %q: %v", fc["arguments"], err)
	}
	if _, ok := args["city"].(string); !ok {
		t.Errorf("arguments %v lack the city", args)
	}
	// The call and its output go back; the model answers.
	body = respBody([]any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		fc,
		map[string]any{"type": "function_call_output", "call_id": callID, "output": "Sunny, 21 C"},
	}, 8)
	body["tools"] = []any{respWeatherTool}
	resp = postResponse(t, s, body)
	if st := resp["status"]; st != "completed" && st != "incomplete" {
		t.Errorf("status %v", st)
	}
	r, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil {
		t.Fatal(aerr)
	}
	msgs := r.req.Messages
	if len(msgs) != 3 || msgs[1].Role != "assistant" || len(msgs[1].ToolCalls) != 1 || msgs[1].ToolCalls[0].ID != callID ||
		msgs[2].Role != "tool" || msgs[2].ToolCallID != callID || msgs[2].Content != "Sunny, 21 C" {
		t.Errorf("messages %+v", msgs)
	}
	prompt, _, err := s.lm.ChatPrompt(r.req)
	if err != nil || !strings.Contains(prompt, "<function=get_weather>") || !strings.Contains(prompt, "Sunny, 21 C") {
		t.Errorf("prompt %q: %v", prompt, err)
	}
}

func respJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestResponsesItemsGrouping(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody([]any{
		map[string]any{"type": "message", "role": "developer", "content": "Rules."},
		map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "a"}, map[string]any{"type": "input_text", "text": "b"}}},
		map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}, "content": []any{map[string]any{"type": "reasoning_text", "text": "think"}}},
		map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Let me look."}}},
		map[string]any{"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
		map[string]any{"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": `{"city":"Rome"}`},
		map[string]any{"type": "function_call_output", "call_id": "c1", "output": "sun"},
		map[string]any{"type": "function_call_output", "call_id": "c2", "output": []any{map[string]any{"type": "input_text", "text": "rain"}}},
	}, 4)
	body["instructions"] = "Sys."
	r, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil {
		t.Fatal(aerr)
	}
	m := r.req.Messages
	if len(m) != 5 {
		t.Fatalf("messages %+v", m)
	}
	if m[0].Role != "system" || m[0].Content != "Sys.\n\nRules." || m[1].Role != "user" || m[1].Content != "a\nb" {
		t.Errorf("system/user %+v", m[:2])
	}
	a := m[2]
	if a.Role != "assistant" || a.Reasoning != "think" || a.Content != "Let me look." || len(a.ToolCalls) != 2 || a.ToolCalls[1].ID != "c2" {
		t.Errorf("assistant turn %+v", a)
	}
	if m[3].Role != "tool" || m[3].ToolCallID != "c1" || m[4].Content != "rain" {
		t.Errorf("tool messages %+v", m[3:])
	}
	postResponse(t, s, body)
}

// respSSEEvent is one server-sent event of a streamed response.
type respSSEEvent struct {
	name string
	data map[string]any
}

// readRespSSE reads a stream's events.
func readRespSSE(t *testing.T, r io.Reader) []respSSEEvent {
	t.Helper()
	var evs []respSSEEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			evs = append(evs, respSSEEvent{name, m})
			name = ""
		}
	}
	return evs
}

func postRespStream(t *testing.T, s *Server, body map[string]any) []respSSEEvent {
	t.Helper()
	body["stream"] = true
	resp, err := http.Post("http://"+s.Addr()+"/v1/responses", "application/json", bytes.NewReader(respJSON(t, body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	return readRespSSE(t, resp.Body)
}

// checkRespStream checks a stream's framing and returns its final response.
func checkRespStream(t *testing.T, evs []respSSEEvent) map[string]any {
	t.Helper()
	if len(evs) < 3 || evs[0].name != "response.created" || evs[1].name != "response.in_progress" {
		t.Fatalf("stream starts %v", evs)
	}
	for i, ev := range evs {
		if ev.data["type"] != ev.name {
			t.Errorf("event %d: type %v under event: %s", i, ev.data["type"], ev.name)
		}
		if seq, ok := ev.data["sequence_number"].(float64); !ok || int(seq) != i {
			t.Errorf("event %d (%s): sequence_number %v", i, ev.name, ev.data["sequence_number"])
		}
	}
	last := evs[len(evs)-1]
	if last.name != "response.completed" && last.name != "response.incomplete" {
		t.Fatalf("stream ends with %s", last.name)
	}
	return last.data["response"].(map[string]any)
}

func TestResponsesStream(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("Tell me a story", 12)
	body["ignore_eos"] = true
	evs := postRespStream(t, s, body)
	final := checkRespStream(t, evs)
	if final["status"] != "incomplete" || final["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Errorf("final %v", final)
	}
	var order []string
	var deltas strings.Builder
	for _, ev := range evs[2 : len(evs)-1] {
		if len(order) == 0 || order[len(order)-1] != ev.name {
			order = append(order, ev.name)
		}
		if ev.name == "response.output_text.delta" {
			deltas.WriteString(ev.data["delta"].(string))
			if ev.data["item_id"] == nil || ev.data["output_index"] == nil || ev.data["content_index"] == nil || ev.data["logprobs"] == nil {
				t.Errorf("delta %v", ev.data)
			}
		}
	}
	want := []string{"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("events %v, want %v", order, want)
	}
	if text := respText(final); text != deltas.String() || text == "" {
		t.Errorf("deltas %q, final text %q", deltas.String(), text)
	}
	if respUsageNum(final, "output_tokens") != 12 {
		t.Errorf("usage %v", final["usage"])
	}
	// With reasoning, the reasoning item comes first, with its own deltas.
	body = respBody("Think about it", 10)
	body["reasoning"] = map[string]any{"effort": "high"}
	body["include"] = []any{"reasoning.encrypted_content"}
	body["ignore_eos"] = true
	evs = postRespStream(t, s, body)
	final = checkRespStream(t, evs)
	rs := respItems(final, "reasoning")
	if len(rs) != 1 {
		t.Fatalf("want a reasoning item: %v", final["output"])
	}
	var rdeltas strings.Builder
	for _, ev := range evs {
		if ev.name == "response.reasoning_text.delta" {
			rdeltas.WriteString(ev.data["delta"].(string))
		}
	}
	text := rs[0]["content"].([]any)[0].(map[string]any)["text"].(string)
	if text != rdeltas.String() || text == "" || !strings.HasPrefix(rs[0]["id"].(string), "rs_") {
		t.Errorf("reasoning %v, deltas %q", rs[0], rdeltas.String())
	}
	if opened, ok := s.sealer.open(sealEncryptedContent, rs[0]["encrypted_content"].(string)); !ok || opened != text {
		t.Errorf("encrypted_content opens to %q (%v), want %q", opened, ok, text)
	}
	if respUsageNum(final, "output_tokens_details", "reasoning_tokens") == 0 {
		t.Errorf("usage %v", final["usage"])
	}
}

func TestResponsesPreviousResponseID(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("Remember the number seven.", 6)
	body["instructions"] = strings.Repeat("You are terse. ", 30)
	first := postResponse(t, s, body)
	r1, _ := s.parseResponses(respJSON(t, body))
	p1, _, _ := s.lm.ChatPrompt(r1.req)
	body = respBody("What was it?", 4)
	body["instructions"] = strings.Repeat("You are terse. ", 30)
	body["previous_response_id"] = first["id"]
	second := postResponse(t, s, body)
	if second["previous_response_id"] != first["id"] {
		t.Errorf("previous_response_id %v", second["previous_response_id"])
	}
	if c := respUsageNum(second, "input_tokens_details", "cached_tokens"); c == 0 {
		t.Errorf("no cached tokens on the second turn: %v", second["usage"])
	}
	r2, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil {
		t.Fatal(aerr)
	}
	p2, _, _ := s.lm.ChatPrompt(r2.req)
	head := p1[:strings.LastIndex(p1, "<|im_start|>assistant")]
	if !strings.HasPrefix(p2, head) || !strings.Contains(p2, "What was it?") {
		t.Errorf("second prompt %q does not continue %q", p2, head)
	}
	if m := r2.req.Messages; len(m) != 4 || m[2].Role != "assistant" || m[2].Content != respText(first) {
		t.Errorf("messages %+v", m)
	}
	// A third turn chains both.
	body = respBody("And again?", 3)
	body["previous_response_id"] = second["id"]
	r3, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil || len(r3.req.Messages) != 5 {
		t.Errorf("third turn %v %+v", aerr, r3)
	}
}

func TestResponsesUnknownPrevious(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("hi", 2)
	body["previous_response_id"] = "resp_nope"
	status, data := post(t, s, "/v1/responses", body)
	checkError(t, status, data, 400, "previous_response_id", "Previous response with id 'resp_nope' not found.")
	// Not stored: not found either.
	body = respBody("hi", 2)
	body["store"] = false
	resp := postResponse(t, s, body)
	if resp["store"] != false {
		t.Errorf("store %v", resp["store"])
	}
	body = respBody("hi", 2)
	body["previous_response_id"] = resp["id"]
	status, data = post(t, s, "/v1/responses", body)
	checkError(t, status, data, 400, "previous_response_id", "not found")
}

func respDo(t *testing.T, s *Server, method, path string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+s.Addr()+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func TestResponsesGetDelete(t *testing.T) {
	s := startServer(t, Config{})
	created := postResponse(t, s, respBody("hi", 3))
	id := created["id"].(string)
	resp, data := respDo(t, s, "GET", "/v1/responses/"+id)
	got := decodeJSON(t, data)
	if resp.StatusCode != 200 || got["id"] != id || respText(got) != respText(created) || got["status"] != created["status"] {
		t.Errorf("GET %d %s", resp.StatusCode, data)
	}
	resp, data = respDo(t, s, "DELETE", "/v1/responses/"+id)
	del := decodeJSON(t, data)
	if resp.StatusCode != 200 || del["id"] != id || del["object"] != "response.deleted" || del["deleted"] != true {
		t.Errorf("DELETE %d %s", resp.StatusCode, data)
	}
	resp, data = respDo(t, s, "GET", "/v1/responses/"+id)
	checkError(t, resp.StatusCode, data, 404, "", "No response found with id")
	resp, data = respDo(t, s, "DELETE", "/v1/responses/"+id)
	checkError(t, resp.StatusCode, data, 404, "", "No response found with id")
	resp, data = respDo(t, s, "POST", "/v1/responses/"+id)
	checkError(t, resp.StatusCode, data, 405, "", "GET or DELETE")
	if allow := resp.Header.Get("Allow"); allow != "GET, DELETE" {
		t.Errorf("Allow %q", allow)
	}
	resp, data = respDo(t, s, "GET", "/v1/responses/"+id+"/input_items")
	checkError(t, resp.StatusCode, data, 404, "", "")
}

func TestResponsesStoreEviction(t *testing.T) {
	entry := func(id string, n int) *storedResponse {
		return &storedResponse{id: id, body: bytes.Repeat([]byte("x"), n-len(id))}
	}
	// By count: the oldest goes first.
	st := newResponseStore(2, 1<<20)
	for _, id := range []string{"a", "b", "c"} {
		if !st.put(entry(id, 10)) {
			t.Fatalf("%s not kept", id)
		}
	}
	if _, ok := st.get("a"); ok {
		t.Error("a not evicted by count")
	}
	if n, b := st.stats(); n != 2 || b != 20 {
		t.Errorf("stats %d %d", n, b)
	}
	// By bytes.
	st = newResponseStore(100, 100)
	st.put(entry("a", 40))
	st.put(entry("b", 40))
	st.put(entry("c", 40))
	if _, ok := st.get("a"); ok {
		t.Error("a not evicted by bytes")
	}
	if _, ok := st.get("b"); !ok {
		t.Error("b evicted")
	}
	if n, b := st.stats(); n != 2 || b != 80 {
		t.Errorf("stats %d %d", n, b)
	}
	if st.put(entry("big", 101)) {
		t.Error("a response over the byte bound was kept")
	}
	if !st.delete("b") || st.delete("b") {
		t.Error("delete")
	}
	if n, b := st.stats(); n != 1 || b != 40 {
		t.Errorf("stats after delete %d %d", n, b)
	}
	// The conversation counts.
	r := &storedResponse{id: "x", conversation: []llm.Message{{Role: "user", Content: strings.Repeat("y", 50)}}}
	if storedSize(r) < 50+storedMessageOverhead {
		t.Errorf("size %d", storedSize(r))
	}
	// Negative keeps none.
	st = newResponseStore(-1, 100)
	if st.put(entry("a", 10)) {
		t.Error("kept with a negative bound")
	}
	// Through the server: a store of one keeps the last response.
	s := startServer(t, Config{ResponsesStoreMax: 1})
	first := postResponse(t, s, respBody("one", 2))
	second := postResponse(t, s, respBody("two", 2))
	if resp, _ := respDo(t, s, "GET", "/v1/responses/"+first["id"].(string)); resp.StatusCode != 404 {
		t.Errorf("first still kept: %d", resp.StatusCode)
	}
	if resp, _ := respDo(t, s, "GET", "/v1/responses/"+second["id"].(string)); resp.StatusCode != 200 {
		t.Errorf("second not kept: %d", resp.StatusCode)
	}
}

func TestResponsesEncryptedContent(t *testing.T) {
	s := startServer(t, Config{})
	other, err := newReasoningSealer([]byte("another key"))
	if err != nil {
		t.Fatal(err)
	}
	input := func(enc string) []any {
		return []any{
			map[string]any{"role": "user", "content": "Weather in Paris?"},
			map[string]any{"type": "reasoning", "id": "rs_x", "summary": []any{}, "encrypted_content": enc},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
		}
	}
	prompts := map[string]string{}
	tokens := map[string]int{}
	for name, enc := range map[string]string{
		"sealed": s.sealer.seal(sealEncryptedContent, "the secret plan"),
		"forged": other.seal(sealEncryptedContent, "the secret plan"),
		"junk":   "not base64 at all!",
	} {
		body := respBody(input(enc), 2)
		body["store"] = false
		body["include"] = []any{"reasoning.encrypted_content"}
		body["tools"] = []any{respWeatherTool}
		r, aerr := s.parseResponses(respJSON(t, body))
		if aerr != nil {
			t.Fatalf("%s: %v", name, aerr)
		}
		prompts[name], _, _ = s.lm.ChatPrompt(r.req)
		resp := postResponse(t, s, body)
		tokens[name] = respUsageNum(resp, "input_tokens")
	}
	if !strings.Contains(prompts["sealed"], "the secret plan") {
		t.Errorf("sealed reasoning not in the prompt: %q", prompts["sealed"])
	}
	if strings.Contains(prompts["forged"], "the secret plan") || prompts["forged"] != prompts["junk"] {
		t.Errorf("forged reasoning reached the prompt: %q", prompts["forged"])
	}
	if tokens["sealed"] <= tokens["forged"] {
		t.Errorf("prompt tokens: sealed %d, forged %d", tokens["sealed"], tokens["forged"])
	}
	// Plain reasoning text without encrypted_content is used.
	in := input("")
	in[1] = map[string]any{"type": "reasoning", "id": "rs_y", "summary": []any{}, "content": []any{map[string]any{"type": "reasoning_text", "text": "plain thoughts"}}}
	r, aerr := s.parseResponses(respJSON(t, respBody(in, 2)))
	if aerr != nil || r.req.Messages[1].Reasoning != "plain thoughts" {
		t.Errorf("plain reasoning: %v %+v", aerr, r)
	}
}

func TestResponsesHostedToolsIgnored(t *testing.T) {
	var log syncBuffer
	s := startServer(t, Config{Log: &log})
	body := respBody("Search the web", 3)
	body["tools"] = []any{
		map[string]any{"type": "web_search"},
		map[string]any{"type": "file_search", "vector_store_ids": []any{"vs_1"}},
		map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto"}},
		respWeatherTool,
		map[string]any{"type": "mcp", "server_label": "x"},
	}
	resp := postResponse(t, s, body)
	if n := len(resp["tools"].([]any)); n != 5 {
		t.Errorf("tools echoed: %d", n)
	}
	r, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil || len(r.req.Tools) != 1 || r.req.Tools[0].Name != "get_weather" || r.toolIndex[0] != 3 {
		t.Errorf("tools %v %+v", aerr, r.req.Tools)
	}
	if !strings.Contains(log.String(), `"web_search" is left out`) {
		t.Errorf("log lacks the hosted tool: %s", log.String())
	}
	// An error on a tool names it by its index in the request.
	body["tools"] = []any{map[string]any{"type": "web_search"}, map[string]any{"type": "function", "name": "f", "parameters": map[string]any{"type": "array"}}}
	status, data := post(t, s, "/v1/responses", body)
	checkError(t, status, data, 400, "tools[1].parameters.type", "")
}

func TestResponsesRejected(t *testing.T) {
	s := startServer(t, Config{})
	user := map[string]any{"role": "user", "content": "hi"}
	manyTools := []any{}
	for i := range llm.MaxTools + 1 {
		manyTools = append(manyTools, map[string]any{"type": "function", "name": fmt.Sprintf("f%d", i)})
	}
	cases := []struct {
		name   string
		set    map[string]any
		status int
		param  string
	}{
		{"background", map[string]any{"background": true}, 400, "background"},
		{"conversation", map[string]any{"conversation": "conv_1"}, 400, "conversation"},
		{"prompt", map[string]any{"prompt": map[string]any{"id": "pmpt_1"}}, 400, "prompt"},
		{"item type", map[string]any{"input": []any{user, map[string]any{"type": "item_reference", "id": "x"}}}, 400, "input[1].type"},
		{"image part", map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "x"}}}}}, 400, "input[0].content[0].type"},
		{"role", map[string]any{"input": []any{map[string]any{"role": "wizard", "content": "x"}}}, 400, "input[0].role"},
		{"input kind", map[string]any{"input": 42}, 400, "input"},
		{"no input", map[string]any{"input": nil}, 400, "input"},
		{"arguments", map[string]any{"input": []any{user, map[string]any{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}}}, 400, "input[1].arguments"},
		{"too many tools", map[string]any{"tools": manyTools}, 400, "tools"},
		{"tool_choice unknown", map[string]any{"tools": []any{respWeatherTool}, "tool_choice": map[string]any{"type": "function", "name": "nope"}}, 400, "tool_choice"},
		{"tool_choice string", map[string]any{"tool_choice": "sometimes"}, 400, "tool_choice"},
		{"text format", map[string]any{"text": map[string]any{"format": map[string]any{"type": "yaml"}}}, 400, "text.format.type"},
		{"bad schema", map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "x", "schema": map[string]any{"type": 7}}}}, 400, "text.format.schema"},
		{"effort", map[string]any{"reasoning": map[string]any{"effort": "extreme"}}, 400, "reasoning.effort"},
		{"temperature", map[string]any{"temperature": 9}, 400, "temperature"},
		{"max_output_tokens", map[string]any{"max_output_tokens": 0}, 400, "max_output_tokens"},
		{"truncation", map[string]any{"truncation": "middle"}, 400, "truncation"},
		{"metadata", map[string]any{"metadata": map[string]any{"k": 1}}, 400, "metadata.k"},
		{"custom format", map[string]any{"tools": []any{map[string]any{"type": "custom", "name": "x", "format": map[string]any{"type": "xml"}}}}, 400, "tools[0].format.type"},
		{"model", map[string]any{"model": "other"}, 404, "model"},
	}
	for _, c := range cases {
		body := respBody("hi", 2)
		for k, v := range c.set {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		status, data := post(t, s, "/v1/responses", body)
		if status != c.status {
			t.Errorf("%s: status %d: %s", c.name, status, data)
			continue
		}
		if e := decodeJSON(t, data)["error"].(map[string]any); e["param"] != c.param {
			t.Errorf("%s: param %v, want %s: %s", c.name, e["param"], c.param, data)
		}
	}
	for _, raw := range []string{"", "[]", "{", `{"input": "x", "tools": {}}`, `{"input": [1]}`, `{"input": "x", "include": [3]}`} {
		status, data := post(t, s, "/v1/responses", raw)
		checkError(t, status, data, 400, "", "")
	}
	// A body past the limit is refused.
	small := startServer(t, Config{MaxBodyBytes: 1 << 10})
	big, _ := json.Marshal(respBody(strings.Repeat("x", 4<<10), 2))
	status, _ := postOversized(t, small, "/v1/responses", big)
	if status != 413 {
		t.Errorf("large body: %d", status)
	}
}

func TestResponsesJSONSchema(t *testing.T) {
	s := startServer(t, Config{})
	schema := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"ok": map[string]any{"type": "boolean"}, "n": map[string]any{"type": "integer"}},
		"required":             []any{"ok", "n"},
		"additionalProperties": false,
	}
	finished := 0
	for seed := range 4 {
		body := respBody("Give me JSON.", 120)
		body["temperature"] = 1.0
		body["seed"] = seed
		body["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "x", "schema": schema, "strict": true}}
		resp := postResponse(t, s, body)
		if resp["text"].(map[string]any)["format"].(map[string]any)["name"] != "x" {
			t.Errorf("text.format not echoed: %v", resp["text"])
		}
		if resp["status"] != "completed" {
			continue
		}
		finished++
		var v struct {
			OK *bool  `json:"ok"`
			N  *int64 `json:"n"`
		}
		dec := json.NewDecoder(strings.NewReader(respText(resp)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || v.OK == nil || v.N == nil {
			t.Errorf("seed %d: %q does not match the schema: %v", seed, respText(resp), err)
		}
	}
	if finished == 0 {
		t.Error("no constrained output finished")
	}
}

func TestResponsesMaxOutputTokens(t *testing.T) {
	s := startServer(t, Config{})
	body := respBody("Go on", 3)
	body["ignore_eos"] = true
	resp := postResponse(t, s, body)
	if resp["status"] != "incomplete" || resp["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" ||
		resp["max_output_tokens"].(float64) != 3 || respUsageNum(resp, "output_tokens") != 3 {
		t.Errorf("response %v", resp)
	}
	if m := respItems(resp, "message"); len(m) != 1 || m[0]["status"] != "incomplete" {
		t.Errorf("message %v", m)
	}
}

func TestResponsesCustomTool(t *testing.T) {
	s := startServer(t, Config{})
	patch := map[string]any{"type": "custom", "name": "apply_patch", "description": "Apply a patch",
		"format": map[string]any{"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
	body := respBody("Fix the bug", 40)
	body["tools"] = []any{patch}
	body["tool_choice"] = map[string]any{"type": "custom", "name": "apply_patch"}
	resp := postResponse(t, s, body)
	calls := respItems(resp, "custom_tool_call")
	if len(calls) != 1 {
		t.Fatalf("want one custom_tool_call: %v", resp["output"])
	}
	c := calls[0]
	if !strings.HasPrefix(c["id"].(string), "ctc_") || c["call_id"] == "" || c["name"] != "apply_patch" {
		t.Errorf("custom_tool_call %v", c)
	}
	if _, ok := c["input"].(string); !ok {
		t.Errorf("input %v", c["input"])
	}
	// Streamed: the input events.
	body["stream"] = true
	evs := postRespStream(t, s, body)
	final := checkRespStream(t, evs)
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.name] = true
	}
	if !seen["response.custom_tool_call_input.delta"] || !seen["response.custom_tool_call_input.done"] || len(respItems(final, "custom_tool_call")) != 1 {
		t.Errorf("custom tool stream: %v", seen)
	}
	// Round trip.
	body = respBody([]any{
		map[string]any{"role": "user", "content": "Fix the bug"},
		c,
		map[string]any{"type": "custom_tool_call_output", "call_id": c["call_id"], "output": "Done!"},
	}, 3)
	body["tools"] = []any{patch}
	r, aerr := s.parseResponses(respJSON(t, body))
	if aerr != nil || !r.req.Messages[1].ToolCalls[0].Custom || r.req.Messages[1].ToolCalls[0].Input != c["input"] {
		t.Errorf("history call %v %+v", aerr, r)
	}
	postResponse(t, s, body)
}

func TestResponsesQueueFull503(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 1, MaxQueue: 1})
	resp, data := postQueueFull(t, s, "/v1/responses", respBody("hi", 2))
	checkError(t, resp.StatusCode, data, 503, "", "queue is full")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

func TestResponsesDisconnectCancels(t *testing.T) {
	s := startServer(t, Config{})
	for i, stream := range []bool{true, false} {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		body := respBody("never ending", 1500)
		body["ignore_eos"] = true
		body["stream"] = stream
		raw := respJSON(t, body)
		fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(raw), raw)
		if stream {
			r := bufio.NewReader(conn)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "event: response.output_text.delta") {
					break
				}
			}
		} else {
			waitFor(t, func() bool { return s.Model().Stats().Running == 1 })
		}
		if st := s.Model().Stats(); st.OpenSequences != 1 {
			t.Fatalf("open sequences while generating: %d", st.OpenSequences)
		}
		conn.Close()
		waitFor(t, func() bool {
			st := s.Model().Stats()
			return st.OpenSequences == 0 && st.Running == 0 && st.Finished.Cancelled == uint64(i+1)
		})
	}
	if gen := s.Model().Stats().GenerationTokens; gen >= 1500 {
		t.Errorf("generated %d tokens: a request ran to the end", gen)
	}
}

// A stream whose generation fails (here: the server closes under it) ends
// with response.failed, status failed and the error, never by a dropped
// connection alone.
func TestResponsesStreamFailure(t *testing.T) {
	s := startServer(t, Config{})
	raw, _ := json.Marshal(map[string]any{"model": "test-model", "input": "never ending", "max_output_tokens": 1500,
		"stream": true, "ignore_eos": true, "reasoning": map[string]any{"effort": "none"}})
	resp, err := http.Post("http://"+s.Addr()+"/v1/responses", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"response.output_text.delta"`) {
			break
		}
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	var rest strings.Builder
	done := make(chan error, 1)
	go func() { _, err := io.Copy(&rest, r); done <- err }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after the server closed")
	}
	<-closed
	var last map[string]any
	for _, line := range strings.Split(rest.String(), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			last = nil
			if err := json.Unmarshal([]byte(data), &last); err != nil {
				t.Fatalf("event data %q: %v", data, err)
			}
			if last["type"] == "response.completed" || last["type"] == "response.incomplete" {
				t.Errorf("%s in a failed stream", last["type"])
			}
		}
	}
	if last == nil || last["type"] != "response.failed" {
		t.Fatalf("last event %v, want response.failed", last)
	}
	rs := last["response"].(map[string]any)
	if e, _ := rs["error"].(map[string]any); rs["status"] != "failed" || e == nil || e["message"] == "" {
		t.Errorf("failed response %v", rs)
	}
}
