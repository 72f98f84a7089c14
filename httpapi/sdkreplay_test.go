package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/schemacheck"
	"github.com/govinfer/govinfer/llm"
)

// TestReplaySDKRequests sends the requests the OpenAI, Vercel AI and
// LangChain SDKs sent in cmd/govinfer's TestSDKs (recorded by
// httpapi/sdktest/sdk.test.mjs with GOVINFER_RECORD into
// testdata/sdkrequests), so that what those SDKs rely on is checked
// without node: each answers as the SDK expects, forced tool calls end
// with finish_reason tool_calls and arguments matching their tool's
// schema, structured outputs match their schema, streams carry usage when
// asked, and the two error requests get the error classes the SDK maps.
func TestReplaySDKRequests(t *testing.T) {
	files, err := filepath.Glob("testdata/sdkrequests/*.json")
	if err != nil || len(files) < 20 {
		t.Fatalf("recorded SDK requests: %v files, %v", len(files), err)
	}
	s := startServer(t, Config{ServedModelName: "sdk-model"}, llm.Options{MaxModelLen: 4096, DefaultTemplateArgs: map[string]any{"enable_thinking": false}})
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Path string         `json:"path"`
			Body map[string]any `json:"body"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body := rec.Body
		if body["ignore_eos"] == true {
			body["max_tokens"] = 24 // the abort requests: no one hangs up here
		}
		status, resp := post(t, s, rec.Path, body)
		switch {
		case body["model"] != "sdk-model":
			checkError(t, status, resp, 404, "model", "does not exist")
			continue
		case body["temperature"] != nil && body["temperature"].(float64) > 2:
			checkError(t, status, resp, 400, "temperature", "between 0 and 2")
			continue
		case status != 200:
			t.Errorf("%s: status %d: %s", name, status, resp)
			continue
		}
		msgs, finishes, usage := replayAnswer(t, name, body, resp)
		forced := false
		switch tc := body["tool_choice"].(type) {
		case string:
			forced = tc == "required"
		case map[string]any:
			forced = true
		}
		for i, msg := range msgs {
			if forced {
				if finishes[i] != "tool_calls" {
					t.Errorf("%s: finish_reason %q for a forced call", name, finishes[i])
				}
				calls, _ := msg["tool_calls"].([]any)
				if len(calls) != 1 {
					t.Errorf("%s: %d tool calls", name, len(calls))
				}
				for _, c := range calls {
					fn := c.(map[string]any)["function"].(map[string]any)
					params, _ := json.Marshal(toolParameters(body, fn["name"].(string)))
					if err := schemacheck.ValidateJSON(params, []byte(fn["arguments"].(string))); err != nil {
						t.Errorf("%s: %s(%s): %v", name, fn["name"], fn["arguments"], err)
					}
				}
			}
			if rf, ok := body["response_format"].(map[string]any); ok && rf["type"] == "json_schema" {
				schema, _ := json.Marshal(rf["json_schema"].(map[string]any)["schema"])
				content, _ := msg["content"].(string)
				if err := schemacheck.ValidateJSON(schema, []byte(content)); err != nil || finishes[i] != "stop" {
					t.Errorf("%s: structured output %q (finish %s): %v", name, content, finishes[i], err)
				}
			}
		}
		if so, ok := body["stream_options"].(map[string]any); ok && so["include_usage"] == true {
			if usage == nil || usage["completion_tokens_details"] == nil {
				t.Errorf("%s: stream without its usage chunk", name)
			}
		}
	}
}

// replayAnswer reads a chat response, streamed or not, into its messages,
// finish reasons and usage.
func replayAnswer(t *testing.T, name string, body map[string]any, resp []byte) ([]map[string]any, []string, map[string]any) {
	t.Helper()
	if body["stream"] != true {
		r := decodeJSON(t, resp)
		var msgs []map[string]any
		var finishes []string
		for _, c := range r["choices"].([]any) {
			ch := c.(map[string]any)
			msgs = append(msgs, ch["message"].(map[string]any))
			finishes = append(finishes, ch["finish_reason"].(string))
		}
		return msgs, finishes, r["usage"].(map[string]any)
	}
	msgs := map[int]map[string]any{}
	finishes := map[int]string{}
	var usage map[string]any
	for _, c := range sseChunks(t, resp) {
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		for _, x := range c["choices"].([]any) {
			ch := x.(map[string]any)
			i := int(ch["index"].(float64))
			m := msgs[i]
			if m == nil {
				m = map[string]any{"content": ""}
				msgs[i] = m
			}
			d := ch["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				m["content"] = m["content"].(string) + s
			}
			if tc, ok := d["tool_calls"].([]any); ok {
				calls, _ := m["tool_calls"].([]any)
				m["tool_calls"] = append(calls, tc...)
			}
			if f, ok := ch["finish_reason"].(string); ok {
				finishes[i] = f
			}
		}
	}
	out := make([]map[string]any, len(msgs))
	fin := make([]string, len(msgs))
	for i := range out {
		out[i], fin[i] = msgs[i], finishes[i]
	}
	if len(out) == 0 {
		t.Errorf("%s: an empty stream", name)
	}
	return out, fin, usage
}

// toolParameters returns the parameters schema of the named tool of a
// request.
func toolParameters(body map[string]any, name string) any {
	for _, t := range body["tools"].([]any) {
		fn := t.(map[string]any)["function"].(map[string]any)
		if fn["name"] == name {
			return fn["parameters"]
		}
	}
	return nil
}
