package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/randmodel"
	"github.com/govinfer/govinfer/tokenizer"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serve(ctx context.Context, args ...string) (int, *syncBuffer, *syncBuffer) {
	var out, errOut syncBuffer
	code := runServe(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut}, args)
	return code, &out, &errOut
}

func TestServeFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, exitOK, "-max-num-seqs"},
		{nil, exitUsage, "--model is required"},
		{[]string{"--model", "x", "--port", "70000"}, exitUsage, "not a TCP port"},
		{[]string{"--model", "x", "--max-num-seqs", "0"}, exitUsage, "max-num-seqs"},
		{[]string{"--model", "x", "--backend", "tpu"}, exitUsage, "unknown backend"},
		{[]string{"--model", "x", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"--help"}, exitOK, "-default-chat-template-kwargs"},
		{[]string{"--help"}, exitOK, "-max-connections"},
		{[]string{"--help"}, exitOK, "-idle-timeout"},
		{[]string{"--help"}, exitOK, "-read-timeout"},
		{[]string{"--model", "x", "--default-chat-template-kwargs", "[1]"}, exitUsage, "must be a JSON object"},
		{[]string{"--model", "x", "--max-connections", "0"}, exitUsage, "max-connections"},
		{[]string{"--model", "x", "--read-timeout", "0s"}, exitUsage, "read-timeout"},
		{[]string{"--model", "x", "--state-memory", "8XB"}, exitUsage, "--state-memory"},
		{[]string{"--model", "x", "--state-memory", "1.5"}, exitUsage, "fraction"},
		{[]string{"--model", "x", "--kv-cache-dtype", "fp8"}, exitUsage, "--kv-cache-dtype"},
		{[]string{"--model", "x", "--cpu-moe", "--n-cpu-moe", "2"}, exitUsage, "give one"},
		{[]string{"--model", "x", "--n-cpu-moe", "-1"}, exitUsage, "--n-cpu-moe must not be negative"},
		{[]string{"--help"}, exitOK, "-cpu-moe"},
		{[]string{"--help"}, exitOK, "-speculative-config"},
		{[]string{"--model", "x", "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 5}`}, exitUsage, "num_speculative_tokens must be 1 to 4"},
		{[]string{"--model", "x", "--speculative-config", `{"method": "eagle", "num_speculative_tokens": 2}`}, exitUsage, "unknown method"},
		{[]string{"--model", "x", "--speculative-config", "mtp"}, exitUsage, "--speculative-config"},
		{[]string{"--model", filepath.Join(t.TempDir(), "missing"), "--port", "0"}, exitUsage, "missing: no such file or folder"},
	}
	for _, c := range cases {
		code, out, errOut := serve(context.Background(), c.args...)
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
			t.Errorf("%v: exit %d, want %d; output %q %q lacks %q", c.args, code, c.code, out, errOut, c.want)
		}
	}
}

// servableCheckpoint writes a random model with the Qwen3 tokenizer of
// testdata and the Qwen3.5 chat template.
func servableCheckpoint(t *testing.T) string {
	dir := t.TempDir()
	for src, dst := range map[string]string{
		"../../testdata/tokenizer/qwen3/tokenizer.json":        "tokenizer.json",
		"../../testdata/tokenizer/qwen3/tokenizer_config.json": "tokenizer_config.json",
		"../../testdata/chat/chat_template.jinja":              "chat_template.jinja",
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	shape := randmodel.Shape{Name: "serve-test", Hidden: 32, Intermediate: 64, Layers: 4, Vocab: tok.VocabSize(),
		Heads: 2, KVHeads: 1, HeadDim: 16, LinearKeyHeads: 1, LinearValueHeads: 2, LinearKeyHeadDim: 16, LinearValueHeadDim: 16,
		Tied: true, MaxPositionEmbeddings: 4096}
	if err := randmodel.Write(dir, shape, randmodel.Options{Seed: 5, EOS: []int{imEnd, eot}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestServeEndToEnd(t *testing.T) {
	dir := servableCheckpoint(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code        int
		out, errOut *syncBuffer
	}
	done := make(chan result, 1)
	var out, errOut syncBuffer
	go func() {
		code := runServe(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut},
			[]string{"--model", dir, "--port", "0", "--served-model-name", "m", "--max-model-len", "1024", "--threads", "1",
				"--state-memory", "8MiB", "--kv-cache-dtype", "bf16"})
		done <- result{code, &out, &errOut}
	}()
	var url string
	deadline := time.Now().Add(30 * time.Second)
	for url == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no listening line; stderr: %s", errOut.String())
		}
		if i := strings.Index(out.String(), "http://"); i >= 0 {
			url = strings.Fields(out.String()[i:])[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(errOut.String(), "loading ") {
		t.Errorf("no loading progress in %q", errOut.String())
	}
	if !strings.Contains(errOut.String(), "state memory 8.0 MiB holds ") || !strings.Contains(errOut.String(), "bf16 KV cache") {
		t.Errorf("no state memory line in %q", errOut.String())
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	cancel()
	r := <-done
	if r.code != exitOK {
		t.Errorf("exit %d; stderr %s", r.code, r.errOut)
	}
	log := r.errOut.String()
	if !strings.Contains(log, "prompt_tokens=") || !strings.Contains(log, "shutting down") || strings.Contains(log, "hi\"") {
		t.Errorf("stderr %q: want one request line without the prompt and a shutdown line", log)
	}
}
