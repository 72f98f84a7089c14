package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/model"
)

// checkUnavailable checks a lifecycle 503: OpenAI's error shape with type
// unavailable_error.
func checkUnavailable(t *testing.T, status int, data []byte, msg string) {
	t.Helper()
	checkError(t, status, data, 503, "", msg)
	if typ := decodeJSON(t, data)["error"].(map[string]any)["type"]; typ != "unavailable_error" {
		t.Errorf("error type %v, want unavailable_error: %s", typ, data)
	}
}

func TestHealthAndModelsWhileLoading(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	var log syncBuffer
	s, err := StartLoading(context.Background(), checkpoint(t), llm.Options{Progress: func(p model.Progress) { once.Do(func() { <-release }) }},
		Config{Addr: "127.0.0.1:0", ServedModelName: "m", Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 { // a load balancer's polls
		status, data := get(t, s, "/health")
		checkUnavailable(t, status, data, "loading")
	}
	status, data := post(t, s, "/v1/completions", `{"prompt":"x"}`)
	checkUnavailable(t, status, data, "loading")
	// The router polls /v1/models: it answers while loading, with the
	// context length read from config.json.
	status, data = get(t, s, "/v1/models")
	if status != 200 {
		t.Fatalf("models while loading: %d %s", status, data)
	}
	card := decodeJSON(t, data)["data"].([]any)[0].(map[string]any)
	if card["id"] != "m" || card["max_model_len"].(float64) != 8192 {
		t.Errorf("card while loading %v", card)
	}
	close(release)
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	status, data = get(t, s, "/health")
	if status != 200 || string(data) != `{"status":"ok"}` {
		t.Errorf("health when ready: %d %s", status, data)
	}
	// The log: the state changes once each, no line per /health poll, the
	// refused completion with its reason.
	lines := log.String()
	if strings.Count(lines, " server loading model=\"m\"") != 1 || strings.Count(lines, " server ready model=\"m\"") != 1 ||
		strings.Contains(lines, "GET /health") || !strings.Contains(lines, `rejected POST /v1/completions status=503 reason="the model is still loading"`) {
		t.Errorf("log:\n%s", lines)
	}
}

func TestHealthWhenLoadFailed(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(checkpoint(t), f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	var log syncBuffer
	s, err := StartLoading(context.Background(), dir, llm.Options{}, Config{Addr: "127.0.0.1:0", Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitReady(context.Background()); err == nil {
		t.Fatal("a checkpoint without weights loaded")
	}
	status, data := get(t, s, "/health")
	checkUnavailable(t, status, data, "failed to load")
	status, data = post(t, s, "/v1/chat/completions", chatBody("x", 1))
	checkUnavailable(t, status, data, "failed to load")
	lines := log.String()
	if strings.Count(lines, " server failed model=") != 1 || strings.Contains(lines, "GET /health") ||
		!strings.Contains(lines, `rejected POST /v1/chat/completions status=503 reason="model failed to load: `) {
		t.Errorf("log:\n%s", lines)
	}
}

// startStream posts a streaming request and returns a channel that gets
// its whole body once the response ends.
func startStream(t *testing.T, s *Server, path string, body map[string]any) <-chan string {
	t.Helper()
	body["stream"] = true
	raw, _ := json.Marshal(body)
	resp, err := http.Post("http://"+s.Addr()+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, data)
	}
	out := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		out <- string(data)
	}()
	return out
}

func TestDrainFinishesRunningAndQueued(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 1})
	long := chatBody("go", 1500)
	long["ignore_eos"] = true
	stream := startStream(t, s, "/v1/chat/completions", long)
	waitFor(t, func() bool { return s.Model().Stats().Running == 1 })
	queued := make(chan []byte, 1)
	go func() {
		body := chatBody("queued", 20)
		body["ignore_eos"] = true
		_, data := post(t, s, "/v1/chat/completions", body)
		queued <- data
	}()
	waitFor(t, func() bool { return s.Model().Stats().Waiting == 1 })

	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background()) }()
	waitFor(t, s.Draining)
	status, data := get(t, s, "/health")
	checkUnavailable(t, status, data, "shutting down")
	resp, err := http.Post("http://"+s.Addr()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"new","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	checkUnavailable(t, resp.StatusCode, data, "shutting down")
	if ra := resp.Header.Get("Retry-After"); ra == "" {
		t.Error("a request refused while draining has no Retry-After")
	}
	if status, _ := get(t, s, "/v1/models"); status != 200 {
		t.Errorf("models while draining: %d", status)
	}
	if _, data := get(t, s, "/metrics"); !strings.Contains(string(data), "govinfer:ready 0") &&
		!strings.Contains(string(data), `govinfer:ready{model_name="test-model"} 0`) {
		t.Errorf("metrics while draining do not say not ready:\n%s", data)
	}
	if r, w, _ := s.InFlight(); r+w == 0 {
		t.Fatal("the requests finished before the checks: make them longer")
	}

	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("drain did not finish")
	}
	if r, w, n := s.InFlight(); r+w+n != 0 {
		t.Errorf("in flight after drain: %d running, %d waiting, %d requests", r, w, n)
	}
	text := <-stream
	if !strings.HasSuffix(text, "data: [DONE]\n\n") || !strings.Contains(text, `"finish_reason":"length"`) {
		t.Errorf("the running stream did not end properly: ...%s", text[max(0, len(text)-300):])
	}
	q := decodeJSON(t, <-queued)
	if q["usage"].(map[string]any)["completion_tokens"].(float64) != 20 {
		t.Errorf("queued request: %v", q)
	}
	if st := s.Model().Stats(); st.Finished.Length != 2 || st.Finished.Cancelled != 0 {
		t.Errorf("finished %v", st.Finished)
	}
}

func TestDrainTimeoutAborts(t *testing.T) {
	s, err := StartLoading(context.Background(), checkpoint(t), llm.Options{MaxModelLen: 8192},
		Config{Addr: "127.0.0.1:0", ServedModelName: "test-model"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	long := chatBody("go", 8000)
	long["ignore_eos"] = true
	stream := startStream(t, s, "/v1/chat/completions", long)
	waitFor(t, func() bool { return s.Model().Stats().Running == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain of an 8000-token stream in 100ms: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The aborted stream ends with an error event and [DONE], not a cut.
	text := <-stream
	if !strings.HasSuffix(text, "data: [DONE]\n\n") || !strings.Contains(text, `"error"`) {
		t.Errorf("the aborted stream ends ...%s", text[max(0, len(text)-300):])
	}
}

// TestKVEventsCleared checks the events' topic and that subscribers are
// told to forget this replica's blocks when the model is loaded and when
// the server drains.
func TestKVEventsCleared(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	s, err := StartLoading(context.Background(), checkpoint(t), llm.Options{Progress: func(model.Progress) { once.Do(func() { <-release }) }},
		Config{Addr: "127.0.0.1:0", ServedModelName: "test-model", KVEvents: "tcp://127.0.0.1:0", PodID: "pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Events().Topic(); got != "kv@pod-1@test-model" {
		t.Errorf("topic %q", got)
	}
	msgs := subscribeEvents(t, s)
	for quiet := false; !quiet; {
		select {
		case <-msgs:
		case <-time.After(200 * time.Millisecond):
			quiet = true
		}
	}
	cleared := func(when string) {
		t.Helper()
		select {
		case m := <-msgs:
			if m.Err != nil || m.Topic != "kv@pod-1@test-model" || len(m.Batch.Events) != 1 || m.Batch.Events[0].Tag != kvevents.TagAllBlocksCleared {
				t.Errorf("%s: %+v", when, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no AllBlocksCleared %s", when)
		}
	}
	close(release)
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	cleared("once loaded")
	if err := s.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	cleared("on drain")
	_, data := get(t, s, "/metrics")
	if v := metricValue(t, string(data), `govinfer:kv_events_dropped_batches_total{model_name="test-model"}`); v != 0 {
		t.Errorf("dropped batches %v", v)
	}
	if v := metricValue(t, string(data), `govinfer:kv_events_batches_total{model_name="test-model"}`); v < 3 {
		t.Errorf("batches %v", v)
	}
}

// TestStartOnOpenedModel: a server on a model the program opened is ready
// at once, names it by default as llm does, and leaves it open and usable
// when it closes.
func TestStartOnOpenedModel(t *testing.T) {
	m, err := llm.Open(checkpoint(t), llm.Options{MaxModelLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := Start(context.Background(), m, Config{Addr: "127.0.0.1:0", KVEvents: "tcp://127.0.0.1:0", PodID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitReady(context.Background()); err != nil || s.Model() != m {
		t.Fatalf("WaitReady: %v; Model %p, want %p", err, s.Model(), m)
	}
	if status, data := get(t, s, "/health"); status != 200 {
		t.Errorf("health: %d %s", status, data)
	}
	_, data := get(t, s, "/v1/models")
	card := decodeJSON(t, data)["data"].([]any)[0].(map[string]any)
	if card["id"] != m.Name() || card["max_model_len"].(float64) != 2048 {
		t.Errorf("card %v, want id %q", card, m.Name())
	}
	body := map[string]any{"model": m.Name(), "prompt": "Once upon a time", "max_tokens": 3, "ignore_eos": true}
	if status, data := post(t, s, "/v1/completions", body); status != 200 {
		t.Fatalf("completion: %d %s", status, data)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Once upon a time"}},
		Params: llm.Params{MaxTokens: 3, IgnoreEOS: true}})
	if err != nil {
		t.Fatalf("the model after the server closed: %v", err)
	}
	for range st.Events() {
	}
	st.Close()
	if n := m.Stats().Finished.Length; n != 2 {
		t.Errorf("%d requests finished, want the server's and the program's", n)
	}
	if _, err := Start(context.Background(), nil, Config{}); err == nil {
		t.Error("Start without a model")
	}
}
