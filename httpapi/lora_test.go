package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/lora"
)

var (
	smallOnce sync.Once
	smallDir  string
	smallErr  error
)

// smallCheckpoint returns testdata/models/small as a checkpoint the server
// opens (testckpt.WriteSmall), for testdata/lora's adapters; made once per
// test binary and removed by the OS's temporary-file cleanup.
func smallCheckpoint(t *testing.T) string {
	t.Helper()
	smallOnce.Do(func() {
		if smallDir, smallErr = os.MkdirTemp("", "httpapi-small-"); smallErr == nil {
			smallErr = testckpt.WriteSmall(smallDir, "../testdata")
		}
	})
	if smallErr != nil {
		t.Fatal(smallErr)
	}
	t.Cleanup(func() {}) // the directory is shared by the tests
	return smallDir
}

func loraPath(name string) string { return filepath.Join("..", "testdata", "lora", name) }

// loraPrompt is the longest golden prompt of testdata/lora's adapter name
// and its greedy tokens.
func loraPrompt(t *testing.T, name string) ([]int, []int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(loraPath(name), "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Prompt []int `json:"prompt"`
			Greedy []int `json:"greedy_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	c := g.Cases[len(g.Cases)-1]
	return c.Prompt, c.Greedy
}

// goTokens runs a greedy completion through the Go API.
func goTokens(t *testing.T, lm *llm.Model, prompt []int, n int, uses ...llm.LoRAUse) []int {
	t.Helper()
	st, err := lm.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: prompt}},
		Params: llm.Params{MaxTokens: n, Temperature: llm.F64(0), IgnoreEOS: true, LoRA: uses}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ids []int
	for ev := range st.Events() {
		for _, tk := range ev.Tokens {
			ids = append(ids, tk.ID)
		}
	}
	return ids
}

// httpTokens runs a greedy completion through /v1/completions with the
// request's extra fields and returns its token ids.
func httpTokens(t *testing.T, s *Server, prompt []int, n int, extra map[string]any) []int {
	t.Helper()
	body := map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": true, "return_token_ids": true}
	for k, v := range extra {
		body[k] = v
	}
	status, data := post(t, s, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("completion %v: %d %s", extra, status, data)
	}
	var r struct {
		Model   string `json:"model"`
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("completion: %v: %s", err, data)
	}
	return r.Choices[0].TokenIDs
}

// TestLoRAServe serves the small model with testdata/lora's two adapters:
// /v1/models lists them with their parent, the request's model picks one
// (greedy tokens equal the Go API's and the goldens) on every endpoint,
// llama-server's lora list takes scales, one batch mixes adapters, and an
// unknown model is vLLM's 404. Without EnableLoRA the run-time endpoints
// do not exist.
func TestLoRAServe(t *testing.T) {
	s := startServerDir(t, smallCheckpoint(t), Config{}, llm.Options{
		LoRA: []llm.LoRAAdapter{{Name: "a", Path: loraPath("lora-small-a")}, {Name: "b", Path: loraPath("lora-small-b")}}})
	lm := s.Model()
	pa, ga := loraPrompt(t, "lora-small-a")
	pb, gb := loraPrompt(t, "lora-small-b")

	_, data := get(t, s, "/v1/models")
	var models struct {
		Data []map[string]any `json:"data"`
	}
	json.Unmarshal(data, &models)
	if len(models.Data) != 3 || models.Data[1]["id"] != "a" || models.Data[1]["parent"] != "test-model" ||
		models.Data[2]["id"] != "b" || models.Data[2]["root"] != loraPath("lora-small-b") {
		t.Fatalf("/v1/models: %s", data)
	}
	if status, data := get(t, s, "/v1/models/b"); status != 200 || !strings.Contains(string(data), `"parent":"test-model"`) {
		t.Errorf("/v1/models/b: %d %s", status, data)
	}

	if got := httpTokens(t, s, pa, len(ga), map[string]any{"model": "a"}); !slices.Equal(got, ga) {
		t.Fatalf("model a: %v, golden %v", got, ga)
	}
	if got := httpTokens(t, s, pb, len(gb), map[string]any{"model": "b"}); !slices.Equal(got, gb) {
		t.Fatalf("model b: %v, golden %v", got, gb)
	}
	// llama-server's list: ids in load order, with scales.
	half := goTokens(t, lm, pa, 12, llm.LoRAUse{Name: "a", Scale: llm.F64(0.5)}, llm.LoRAUse{Name: "b"})
	if got := httpTokens(t, s, pa, 12, map[string]any{"lora": []any{map[string]any{"id": 0, "scale": 0.5}, map[string]any{"id": 1, "scale": 1}}}); !slices.Equal(got, half) {
		t.Fatalf("lora list: %v, Go API %v", got, half)
	}
	if status, data := post(t, s, "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 1, "lora": []any{map[string]any{"id": 7}}}); status != 400 || !strings.Contains(string(data), "lora[0].id") {
		t.Errorf("unknown lora id: %d %s", status, data)
	}

	// One batch of both adapters and the base, at once.
	want := map[string][]int{"a": goTokens(t, lm, pb, 24, llm.LoRAUse{Name: "a"}), "b": goTokens(t, lm, pb, 24, llm.LoRAUse{Name: "b"}),
		"test-model": goTokens(t, lm, pb, 24)}
	var wg sync.WaitGroup
	got := make([][]int, 9)
	names := []string{"a", "b", "test-model"}
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = httpTokens(t, s, pb, 24, map[string]any{"model": names[i%3]})
		}()
	}
	wg.Wait()
	for i, g := range got {
		if !slices.Equal(g, want[names[i%3]]) {
			t.Errorf("batched request %d (%s): %v, alone %v", i, names[i%3], g, want[names[i%3]])
		}
	}

	// Every endpoint takes an adapter as its model, and refuses an
	// unknown one with vLLM's 404.
	msgs := []any{map[string]any{"role": "user", "content": "hi"}}
	for path, body := range map[string]map[string]any{
		"/v1/chat/completions": {"messages": msgs, "max_tokens": 4},
		"/v1/completions":      {"prompt": "hi", "max_tokens": 4},
		"/v1/responses":        {"input": "hi", "max_output_tokens": 4},
		"/v1/messages":         {"messages": msgs, "max_tokens": 4},
	} {
		body["model"] = "b"
		if status, data := post(t, s, path, body); status != 200 || !strings.Contains(string(data), `"model":"b"`) {
			t.Errorf("%s with model b: %d %s (the response must name the adapter, as vLLM's do)", path, status, data)
		}
		body["stream"] = true
		if status, data := post(t, s, path, body); status != 200 || !strings.Contains(string(data), `"model":"b"`) || strings.Contains(string(data), `"model":"test-model"`) {
			t.Errorf("%s streamed with model b: %d %s (every event must name the adapter)", path, status, data)
		}
		delete(body, "stream")
		body["model"] = "nope"
		status, data := post(t, s, path, body)
		if status != 404 || !strings.Contains(string(data), "The model `nope` does not exist.") {
			t.Errorf("%s with an unknown model: %d %s", path, status, data)
		}
	}
	_, metrics := get(t, s, "/metrics")
	for _, want := range []string{`govinfer:lora_requests_total{model_name="test-model",lora_name="b"} 13`, `vllm:lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""}`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(metrics), "lora"))
		}
	}
	for _, path := range []string{"/v1/load_lora_adapter", "/v1/unload_lora_adapter"} {
		if status, _ := post(t, s, path, map[string]any{"lora_name": "c", "lora_path": loraPath("lora-small-b")}); status != 404 {
			t.Errorf("%s without EnableLoRA: %d", path, status)
		}
	}
	if status, data := get(t, s, "/lora-adapters"); status != 200 || !strings.Contains(string(data), `{"id":1,"path":"../testdata/lora/lora-small-b","scale":1}`) {
		t.Errorf("GET /lora-adapters: %d %s", status, data)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// postKey posts with the API key.
func postKey(t *testing.T, s *Server, key, path string, body any) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestLoRARuntime loads and unloads adapters at run time, behind the API
// key: vLLM's answers, the bounds (a 400 naming the limit), each bad
// adapter a 4xx leaving the server and the other adapters as they were,
// and an unload under a running request, which finishes.
func TestLoRARuntime(t *testing.T) {
	const key = "sekrit"
	s := startServerDir(t, smallCheckpoint(t), Config{EnableLoRA: true, APIKey: key}, llm.Options{
		LoRA: []llm.LoRAAdapter{{Name: "b", Path: loraPath("lora-small-b")}}, MaxLoRAs: 2, MaxLoRARank: 4})
	lm := s.Model()
	pb, gb := loraPrompt(t, "lora-small-b")
	load := func(name, path string) (int, string) {
		return postKey(t, s, key, "/v1/load_lora_adapter", map[string]any{"lora_name": name, "lora_path": path})
	}
	if status, _ := post(t, s, "/v1/load_lora_adapter", map[string]any{"lora_name": "c", "lora_path": loraPath("lora-small-b")}); status != 401 {
		t.Errorf("load without the key: %d", status)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, lora.ConfigFile), []byte(`{"peft_type": "IA3"}`), 0o644)
	os.WriteFile(filepath.Join(bad, lora.WeightsFile), []byte("{}"), 0o644)
	for _, c := range []struct {
		name, path string
		status     int
		want       string
	}{
		{"", loraPath("lora-small-b"), 400, "Both 'lora_name' and 'lora_path' must be provided."},
		{"b", loraPath("lora-small-b"), 400, "The lora adapter 'b' has already been loaded."},
		{"test-model", loraPath("lora-small-b"), 400, "has already been loaded"},
		{"a", loraPath("lora-small-a"), 400, "max_lora_rank"},
		{"gone", filepath.Join(bad, "absent"), 404, "absent"},
		{"ia3", bad, 400, "IA3"},
		{"other", filepath.Join("..", "testdata", "models", "small"), 404, lora.ConfigFile},
	} {
		status, body := load(c.name, c.path)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("load %q from %s: %d %s, want %d containing %q", c.name, c.path, status, body, c.status, c.want)
		}
	}
	if status, body := load("b2", loraPath("lora-small-b")); status != 200 || body != "Success: LoRA adapter 'b2' added successfully." {
		t.Fatalf("load b2: %d %q", status, body)
	}
	if status, body := load("b3", loraPath("lora-small-b")); status != 400 || !strings.Contains(body, "max_loras") {
		t.Errorf("a third adapter: %d %s", status, body)
	}
	if got := httpTokens2(t, s, key, pb, len(gb), "b2"); !slices.Equal(got, gb) {
		t.Fatalf("model b2: %v, golden %v", got, gb)
	}

	// Unload b2 while a request streams with it: the request finishes.
	body, _ := json.Marshal(map[string]any{"model": "b2", "prompt": pb, "max_tokens": 64, "temperature": 0, "ignore_eos": true, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: {") {
	}
	if status, body := postKey(t, s, key, "/v1/unload_lora_adapter", map[string]any{"lora_name": "b2"}); status != 200 || body != "Success: LoRA adapter 'b2' removed successfully." {
		t.Fatalf("unload b2: %d %q", status, body)
	}
	finish := ""
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"finish_reason":"length"`) {
			finish = "length"
		}
	}
	if finish != "length" {
		t.Error("the request running with an unloaded adapter did not finish")
	}
	if status, body := postKey(t, s, key, "/v1/unload_lora_adapter", map[string]any{"lora_name": "b2"}); status != 404 || body == "" ||
		!strings.Contains(body, "The lora adapter 'b2' cannot be found.") {
		t.Errorf("unload twice: %d %s", status, body)
	}
	if status, body := postKey(t, s, key, "/v1/completions", map[string]any{"model": "b2", "prompt": "x"}); status != 404 {
		t.Errorf("an unloaded model: %d %s", status, body)
	}
	// The base and b are unharmed.
	if got := httpTokens2(t, s, key, pb, len(gb), "b"); !slices.Equal(got, gb) {
		t.Fatalf("model b after the errors: %v, golden %v", got, gb)
	}
	if got, want := httpTokens2(t, s, key, pb, 8, "test-model"), goTokens(t, lm, pb, 8); !slices.Equal(got, want) {
		t.Fatalf("the base after the errors: %v, want %v", got, want)
	}
	// llama-server's POST /lora-adapters sets default scales.
	if status, body := postKey(t, s, key, "/lora-adapters", []any{map[string]any{"id": 0, "scale": 0}}); status != 200 || !strings.Contains(body, `"scale":0`) {
		t.Errorf("POST /lora-adapters: %d %s", status, body)
	}
	if got, want := httpTokens2(t, s, key, pb, 8, "b"), goTokens(t, lm, pb, 8); !slices.Equal(got, want) {
		t.Fatalf("model b at scale 0: %v, want the base's %v", got, want)
	}
}

// httpTokens2 is httpTokens with the API key and a model.
func httpTokens2(t *testing.T, s *Server, key string, prompt []int, n int, model string) []int {
	t.Helper()
	status, body := postKey(t, s, key, "/v1/completions", map[string]any{"model": model, "prompt": prompt, "max_tokens": n,
		"temperature": 0, "ignore_eos": true, "return_token_ids": true})
	if status != 200 {
		t.Fatalf("%s: %d %s", model, status, body)
	}
	var r struct {
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) != 1 {
		t.Fatal(fmt.Errorf("%v: %s", err, body))
	}
	return r.Choices[0].TokenIDs
}
