package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	ksmallDir  = filepath.Join("..", "..", "testdata", "gguf", "ksmall")
	qwen3Vocab = filepath.Join("..", "..", "testdata", "gguf", "qwen3-vocab.gguf")
)

// TestQuantizeCommand writes testdata/gguf's checkpoint as GGUF files with
// a progress line and a read-back summary, then runs the files where a
// checkpoint directory goes: generate gives the checkpoint's tokens from the
// BF16 file, and bench runs the q4_k_m one.
func TestQuantizeCommand(t *testing.T) {
	files := map[string]string{}
	for _, typ := range []string{"bf16", "q4_k_m"} {
		out := filepath.Join(t.TempDir(), "ksmall-"+typ+".gguf")
		code, stdout, stderr := run(t, "", "quantize", "--model", ksmallDir, "--out", out, "--type", typ)
		if code != exitOK {
			t.Fatalf("quantize --type %s: exit %d\nstdout %s\nstderr %s", typ, code, stdout, stderr)
		}
		if !strings.Contains(stderr, "writing "+out+" ("+typ+"): 56/56 tensors") {
			t.Errorf("no final progress line in %q", stderr)
		}
		if !strings.Contains(stdout, "wrote "+out+": "+typ) || !strings.Contains(stdout, "read back: 4 layers, hidden 256, vocabulary 2048, 56 tensors") {
			t.Errorf("stdout %q", stdout)
		}
		files[typ] = out
	}
	args := []string{"--ids", "785,922,865,293", "-n", "6"}
	_, want, _ := run(t, "", append([]string{"generate", "--model", ksmallDir}, args...)...)
	code, got, stderr := run(t, "", append([]string{"generate", "--model", files["bf16"]}, args...)...)
	if code != exitOK || got != want {
		t.Errorf("generate from the BF16 file: exit %d, %q (stderr %q); from the checkpoint %q", code, got, stderr, want)
	}
	code, stdout, stderr := run(t, "", "bench", "--model", files["q4_k_m"], "--prompt", "8", "--gen", "2", "--repeat", "1", "--json")
	if code != exitOK || !strings.Contains(stdout, "decode_bytes_per_token") {
		t.Errorf("bench on the q4_k_m file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestQuantizeErrors checks the usage errors.
func TestQuantizeErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--model", ksmallDir, "--out", out}, exitUsage, "--model, --out and --type are required"},
		{[]string{"--model", ksmallDir, "--out", out, "--type", "q3_k"}, exitUsage, `--type "q3_k": want one of bf16, q8_0, q4_k_m`},
		{[]string{"--model", qwen3Vocab, "--out", out, "--type", "bf16"}, exitError, "not a Hugging Face checkpoint directory"},
	} {
		code, _, stderr := run(t, "", append([]string{"quantize"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed run left a file")
	}
	code, _, stderr := run(t, "", "generate", "--model", filepath.Join(ksmallDir, "config.json"), "--ids", "1")
	if code != exitUsage || !strings.Contains(stderr, "a file of the checkpoint folder "+ksmallDir+", not the checkpoint: pass the folder") {
		t.Errorf("generate --model config.json: exit %d, stderr %q", code, stderr)
	}
}

// TestTokenizeRenderGGUF runs tokenize and render on llama.cpp's
// vocabulary-only file: the ids and renderings of the tokenizer.json and
// chat_template.jinja it was made from.
func TestTokenizeRenderGGUF(t *testing.T) {
	in := `{"text": "Hello, world!"}` + "\n" + `{"text": "<|im_start|>user\n你好<|im_end|>"}` + "\n"
	_, want, _ := tokenizeCmd(t, in, "--model", qwen3TokenizerDir)
	code, got, stderr := tokenizeCmd(t, in, "--model", qwen3Vocab)
	if code != exitOK || got != want {
		t.Errorf("tokenize: exit %d, %q (stderr %q), want %q", code, got, stderr, want)
	}
	req := `{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}`
	_, want, _ = renderCmd(t, req, "--model", renderFixture(t))
	code, got, stderr = renderCmd(t, req, "--model", qwen3Vocab)
	if code != exitOK || got != want || want == "" {
		t.Errorf("render: exit %d, %q (stderr %q), want %q", code, got, stderr, want)
	}
}

// TestDiagInProcessGGUF runs the diagnostic against govinfer's own server
// serving a GGUF file written from a random checkpoint: weights, tokenizer,
// chat template and sampling defaults all come from the file.
func TestDiagInProcessGGUF(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	tok := filepath.Join("..", "..", "testdata", "tokenizer", "qwen3")
	tmpl := filepath.Join("..", "..", "testdata", "chat", "chat_template.jinja")
	if code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--layers", "2",
		"--tokenizer", tok, "--chat-template", tmpl); code != exitOK {
		t.Fatalf("make-random: %s", errOut)
	}
	file := filepath.Join(t.TempDir(), "tiny.gguf")
	if code, _, errOut := run(t, "", "quantize", "--model", dir, "--out", file, "--type", "q8_0"); code != exitOK {
		t.Fatalf("quantize: %s", errOut)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := run(t, "", "diag", "--model-dir", file, "--report", report, "--long-context-tokens", "600")
	if code != exitOK {
		t.Fatalf("diag exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Status    string `json:"status"`
		Identical bool   `json:"identical_greedy_completions"`
		Isolation bool   `json:"request_isolation_passed"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != "complete" || !rep.Identical || !rep.Isolation {
		t.Errorf("status %q, identical %v, isolation %v", rep.Status, rep.Identical, rep.Isolation)
	}
}
