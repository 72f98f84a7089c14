package httpapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/llm"
)

// TestPrefixCacheThroughServer replays a conversation through a server
// with the prefix cache and one without: every turn's choices (text,
// logprobs, finish) are identical, and from the second turn on the usage
// says how much of the prompt came from the cache, which the metrics count.
func TestPrefixCacheThroughServer(t *testing.T) {
	warm := startServer(t, Config{})
	cold := startServer(t, Config{}, llm.Options{NoPrefixCache: true})
	msgs := []any{
		map[string]any{"role": "system", "content": strings.Repeat("Answer in one word. ", 30)},
		map[string]any{"role": "user", "content": "Name a colour."},
	}
	for turn := range 4 {
		body := map[string]any{"model": "test-model", "messages": msgs, "max_tokens": 8, "n": 2, "seed": 5,
			"temperature": 0.8, "logprobs": true, "top_logprobs": 2, "ignore_eos": true}
		var resp [2]map[string]any
		for i, s := range []*Server{cold, warm} {
			status, data := post(t, s, "/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("turn %d: status %d: %s", turn, status, data)
			}
			resp[i] = decodeJSON(t, data)
		}
		if !reflect.DeepEqual(resp[0]["choices"], resp[1]["choices"]) {
			t.Fatalf("turn %d: choices differ with the prefix cache:\n%v\n%v", turn, resp[1]["choices"], resp[0]["choices"])
		}
		cached := func(r map[string]any) float64 {
			return r["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		}
		prompt := resp[1]["usage"].(map[string]any)["prompt_tokens"].(float64)
		if cached(resp[0]) != 0 || (turn > 0 && cached(resp[1]) < prompt/2) || cached(resp[1]) >= prompt {
			t.Errorf("turn %d: %v of %v prompt tokens cached (%v without the cache)", turn, cached(resp[1]), prompt, cached(resp[0]))
		}
		content := resp[1]["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]
		msgs = append(msgs, map[string]any{"role": "assistant", "content": content},
			map[string]any{"role": "user", "content": fmt.Sprintf("And another, %d?", turn)})
	}
	_, metrics := get(t, warm, "/metrics")
	for _, name := range []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
		"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total", "govinfer:prefix_cache_bytes"} {
		line := metricLine(string(metrics), name)
		if line == "" || strings.HasSuffix(line, " 0") {
			t.Errorf("metric %s: %q", name, line)
		}
	}
	if st := warm.Model().Stats(); st.PrefixHitTokens == 0 || st.PrefixHitTokens >= st.PrefixQueryTokens {
		t.Errorf("prefix hits %d of %d", st.PrefixHitTokens, st.PrefixQueryTokens)
	}
}

// metricLine returns the sample line of a metric.
func metricLine(text, name string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+"{") {
			return l
		}
	}
	return ""
}

// TestStateBudgetLoad is the state memory load test: 32 clients send
// prompts near the context length at once to a server whose state memory
// holds four of them. Every request either succeeds with exactly the
// output it gets alone, or gets the documented refusal: 503 when the queue
// is full. Two ask for more tokens than the context leaves: they are
// lowered to the room left, not refused.
// State memory never exceeds the budget and is all released afterwards
// (bar the evictable prefix cache).
func TestStateBudgetLoad(t *testing.T) {
	const (
		maxLen    = 1024
		maxTokens = 16
		clients   = 32
	)
	probe := startServer(t, Config{}, llm.Options{MaxModelLen: maxLen, NoPrefixCache: true})
	sm := probe.Model().StateMemory()
	budget := sm.PerSequence + 4*(maxLen)*sm.PerToken
	s := startServer(t, Config{}, llm.Options{MaxModelLen: maxLen, MaxNumSeqs: 16, MaxQueue: 16, StateMemory: budget})
	r := rand.New(rand.NewPCG(1, 2))
	vocab := 150000
	type job struct {
		prompt    []int
		maxTokens int
	}
	jobs := make([]job, clients)
	for i := range jobs {
		n := maxLen - maxTokens - r.IntN(200)
		jobs[i] = job{prompt: make([]int, n), maxTokens: maxTokens}
		for k := range jobs[i].prompt {
			jobs[i].prompt[k] = r.IntN(vocab)
		}
		if i%4 == 0 { // a shared prefix, as a common system prompt
			copy(jobs[i].prompt, jobs[0].prompt[:400])
		}
	}
	// Two that ask for more than the context leaves: lowered to it.
	jobs[5].maxTokens, jobs[9].maxTokens = maxLen, maxLen
	body := func(j job) map[string]any {
		return map[string]any{"model": "test-model", "prompt": j.prompt, "max_tokens": j.maxTokens, "ignore_eos": true,
			"logprobs": 1, "temperature": 0.7, "seed": len(j.prompt)}
	}
	type answer struct {
		status int
		data   []byte
	}
	answers := make([]answer, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i, j := range jobs {
		wg.Go(func() {
			status, data := post(t, s, "/v1/completions", body(j))
			answers[i] = answer{status, data}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	counts := map[int]int{}
	for i, a := range answers {
		counts[a.status]++
		switch a.status {
		case 200:
			// Alone, on a server without a cache or budget.
			status, want := post(t, probe, "/v1/completions", body(jobs[i]))
			if status != 200 {
				t.Fatalf("request %d alone: status %d: %s", i, status, want)
			}
			got, exp := decodeJSON(t, a.data)["choices"], decodeJSON(t, want)["choices"]
			if !reflect.DeepEqual(got, exp) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(exp)
				t.Errorf("request %d under load differs from its solo run:\n%s\n%s", i, g, w)
			}
			if i == 5 || i == 9 {
				u := decodeJSON(t, a.data)["usage"].(map[string]any)
				if want := float64(maxLen - len(jobs[i].prompt)); u["completion_tokens"] != want {
					t.Errorf("request %d asked %d tokens: usage %v, want the %v the context leaves", i, maxLen, u, want)
				}
			}
		case 503:
		default:
			t.Errorf("request %d: status %d: %s", i, a.status, a.data)
		}
	}
	if counts[200] < 4 || counts[200]+counts[503] != clients {
		t.Errorf("statuses %v", counts)
	}
	lm := s.Model()
	waitFor(t, func() bool { return lm.Stats().OpenSequences == 0 })
	st := lm.Stats().State
	if st.Peak > budget || st.Running != 0 || st.Peak < 2*(sm.PerSequence+int64(maxLen-200)*sm.PerToken) {
		t.Errorf("state memory: %+v, budget %d", st, budget)
	}
	report, _ := json.Marshal(map[string]any{"clients": clients, "budget_bytes": budget, "peak_bytes": st.Peak,
		"cached_bytes_after": st.Cached, "running_bytes_after": st.Running, "statuses": counts, "seconds": elapsed.Seconds()})
	t.Logf("load under a state budget: %s", report)
}

// A max_tokens that fits the context but could never fit the state memory
// of one sequence is lowered to what that holds; a prompt that leaves no
// room there is a 400 that says so, with the numbers.
func TestStateBudgetLowers(t *testing.T) {
	probe := startServer(t, Config{}, llm.Options{MaxModelLen: 1024, NoPrefixCache: true})
	sm := probe.Model().StateMemory()
	s := startServer(t, Config{}, llm.Options{MaxModelLen: 1024, StateMemory: sm.PerSequence + 500*sm.PerToken})
	prompt := make([]int, 400)
	for i := range prompt {
		prompt[i] = 1 + i%1000
	}
	status, data := post(t, s, "/v1/completions", map[string]any{"model": "test-model", "prompt": prompt, "max_tokens": 600, "ignore_eos": true})
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	// 500 tokens of state; the last sampled token is never fed.
	if got := decodeJSON(t, data)["usage"].(map[string]any)["completion_tokens"]; got != 101.0 {
		t.Errorf("%v completion tokens, want the 101 that 500 tokens of state leave after 400", got)
	}
	status, data = post(t, s, "/v1/completions", map[string]any{"model": "test-model", "prompt": append(prompt, prompt[:200]...), "max_tokens": 5})
	if status != 400 || !strings.Contains(string(data), "state memory") || !strings.Contains(string(data), "600 tokens") {
		t.Errorf("a prompt past the state memory: status %d: %s", status, data)
	}
}
