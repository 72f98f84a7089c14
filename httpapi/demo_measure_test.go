package httpapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/internal/schemacheck"
	"github.com/govinfer/govinfer/llm"
)

// TestDemoForcedCallsAndHangUps measures, on the checkpoint named by
// GOVINFER_DEMO_DIR (make demo's, ~/.cache/govinfer/demo-qwen3.5-random),
// what issue 19 asks: 100 forced tool calls with random tools (every JSON
// type, nesting, enums, bounds; required or named; thinking on, the
// default, bounded by thinking_token_budget 64 to keep the run short)
// must all end with finish_reason tool_calls and arguments that validate
// against their schema; and the time from a client's hang-up to its
// sequence being freed, running (streaming or not) or queued. It skips
// without GOVINFER_DEMO_DIR.
func TestDemoForcedCallsAndHangUps(t *testing.T) {
	dir := os.Getenv("GOVINFER_DEMO_DIR")
	if dir == "" {
		t.Skip("GOVINFER_DEMO_DIR is not set (make demo writes the checkpoint to ~/.cache/govinfer/demo-qwen3.5-random)")
	}
	s := startServerDir(t, dir, Config{}, llm.Options{MaxModelLen: 4096, MaxNumSeqs: 1, MaxQueue: 4})
	rng := rand.New(rand.NewPCG(19, 19))
	const calls = 100
	var tokens []int
	start := time.Now()
	for i := range calls {
		var tools []any
		schemas := map[string][]byte{}
		for k := range 1 + rng.IntN(4) {
			params := schemacheck.RandomParameters(rng)
			name := fmt.Sprintf("tool_%d", k)
			raw, _ := json.Marshal(params)
			schemas[name] = raw
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": params}})
		}
		var choice any = "required"
		if i%2 == 1 {
			choice = map[string]any{"type": "function", "function": map[string]any{"name": "tool_0"}}
		}
		body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Call a tool."}}, "tools": tools,
			"tool_choice": choice, "max_tokens": 300, "thinking_token_budget": 64, "seed": i}
		status, data := post(t, s, "/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("call %d: %d %s", i, status, data)
		}
		resp := decodeJSON(t, data)
		ch := resp["choices"].([]any)[0].(map[string]any)
		got, _ := ch["message"].(map[string]any)["tool_calls"].([]any)
		if ch["finish_reason"] != "tool_calls" || len(got) != 1 {
			t.Fatalf("call %d: finish_reason %v with %d calls: %s", i, ch["finish_reason"], len(got), data)
		}
		fn := got[0].(map[string]any)["function"].(map[string]any)
		if err := schemacheck.ValidateJSON(schemas[fn["name"].(string)], []byte(fn["arguments"].(string))); err != nil {
			t.Fatalf("call %d: %s(%s) does not match %s: %v", i, fn["name"], fn["arguments"], schemas[fn["name"].(string)], err)
		}
		tokens = append(tokens, int(resp["usage"].(map[string]any)["completion_tokens"].(float64)))
		if (i+1)%10 == 0 {
			t.Logf("%d calls valid after %v", i+1, time.Since(start).Round(time.Second))
		}
	}
	sort.Ints(tokens)
	t.Logf("%d forced calls, all valid, in %v; completion tokens min %d, median %d, max %d", calls, time.Since(start).Round(time.Millisecond),
		tokens[0], tokens[len(tokens)/2], tokens[len(tokens)-1])

	lm := s.Model()
	var lines []string
	for _, stream := range []bool{false, true} {
		for range 5 {
			cancel, done := startRequest(t, s, longBody(stream), stream)
			waitUntil(t, "running", 30*time.Second, func() bool { return lm.Stats().Running == 1 })
			qcancel, qdone := startRequest(t, s, longBody(stream), false)
			waitUntil(t, "queued", 30*time.Second, func() bool { return lm.Stats().Waiting == 1 })
			time.Sleep(50 * time.Millisecond)
			qcancel()
			queued := waitUntil(t, "queued freed", 5*time.Second, func() bool { return lm.Stats().Waiting == 0 })
			<-qdone
			st := lm.Stats()
			step := time.Duration(st.StepSeconds / float64(st.Steps) * float64(time.Second))
			cancel()
			running := waitUntil(t, "running freed", 5*time.Second, func() bool { s := lm.Stats(); return s.Running == 0 && s.OpenSequences == 0 })
			<-done
			lines = append(lines, fmt.Sprintf("stream=%v: running freed %v, queued freed %v (mean step %v)", stream, running.Round(10*time.Microsecond),
				queued.Round(10*time.Microsecond), step.Round(10*time.Microsecond)))
		}
	}
	t.Logf("hang-up to freed:\n%s", strings.Join(lines, "\n"))
}
