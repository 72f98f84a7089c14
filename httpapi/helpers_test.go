package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

var (
	ckptOnce sync.Once
	ckptDir  string
	ckptErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ckptDir != "" {
		os.RemoveAll(ckptDir)
	}
	if vlDir != "" {
		os.RemoveAll(vlDir) // vlCheckpoint's
	}
	os.Exit(code)
}

// checkpoint returns a random Qwen3.5-layout model with tiny widths whose
// vocabulary covers the Qwen3 tokenizer of testdata, with that tokenizer
// and the Qwen3.5 chat template; made once per test binary.
func checkpoint(t testing.TB) string {
	t.Helper()
	ckptOnce.Do(func() {
		ckptDir, ckptErr = os.MkdirTemp("", "httpapi-ckpt-")
		if ckptErr != nil {
			return
		}
		ckptErr = makeCheckpoint(ckptDir)
	})
	if ckptErr != nil {
		t.Fatal(ckptErr)
	}
	return ckptDir
}

func makeCheckpoint(dir string) error { return testckpt.Write(dir, "../testdata") }

// startServer starts a server on the test checkpoint (see startServerDir).
func startServer(t testing.TB, cfg Config, o ...llm.Options) *Server {
	t.Helper()
	var opts llm.Options
	if len(o) > 0 {
		opts = o[0]
	}
	return startServerDir(t, checkpoint(t), cfg, opts)
}

// startServerDir starts a server on a free loopback port that opens the
// checkpoint in dir (StartLoading), by default as "test-model" with a
// max_model_len of 2048, and waits for it.
func startServerDir(t testing.TB, dir string, cfg Config, o llm.Options) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.ServedModelName == "" {
		cfg.ServedModelName = "test-model"
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = 2048
	}
	s, err := StartLoading(context.Background(), dir, o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// post sends a JSON body and returns status and body.
func post(t testing.TB, s *Server, path string, body any) (int, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+s.Addr()+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

func get(t testing.TB, s *Server, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// chatBody is a greedy chat request without thinking.
func chatBody(user string, maxTokens int) map[string]any {
	return map[string]any{
		"model":                "test-model",
		"messages":             []any{map[string]any{"role": "user", "content": user}},
		"temperature":          0,
		"max_tokens":           maxTokens,
		"chat_template_kwargs": map[string]any{"enable_thinking": false},
	}
}

func decodeJSON(t testing.TB, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, data)
	}
	return m
}
