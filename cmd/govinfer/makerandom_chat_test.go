package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMakeRandomThenChat is a newcomer's first commands: make-random --out
// D with no other flag writes a checkpoint with the bundled tokenizer and
// chat template and says what to run next; chat answers one question on it
// and serve opens it as it is. With --no-tokenizer it says that chat needs
// one, and chat says which file is missing.
func TestMakeRandomThenChat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "D")
	args := []string{"make-random", "--out", dir}
	if testing.Short() {
		args = append(args, "--shape", "tiny") // 19 MB, not the small shape's 169
	}
	code, _, errOut := run(t, "", args...)
	if code != exitOK {
		t.Fatalf("make-random: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"with the Qwen3 tokenizer and the Qwen3.5 chat template (bundled; --no-tokenizer leaves them out)",
		"next: govinfer chat --model " + dir} {
		if !strings.Contains(errOut, want) {
			t.Errorf("make-random's output lacks %q:\n%s", want, errOut)
		}
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// The vocabulary grew to cover the tokenizer's ids.
	var cfg struct {
		Text struct {
			Vocab int `json:"vocab_size"`
		} `json:"text_config"`
	}
	data, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.Text.Vocab != 151669 {
		t.Errorf("vocab_size %d (%v), want the tokenizer's 151669", cfg.Text.Vocab, err)
	}

	code, out, errOut := run(t, "", "chat", "--model", dir, "hi", "--think", "off", "--max-tokens", "4", "--threads", "1")
	if code != exitOK || strings.TrimSpace(out) == "" {
		t.Errorf("chat --model D hi --think off: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// serve opens it: it listens, and stops with its context.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sout, serr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, stdio{in: strings.NewReader(""), out: &sout, err: &serr},
			[]string{"--model", dir, "--port", "0", "--threads", "1", "--max-model-len", "512", "--state-memory", "8MiB"})
	}()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(sout.String(), "serving on http://"); {
		select {
		case code := <-done:
			t.Fatalf("serve --model D: exit %d: %s", code, serr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve --model D did not listen: %s", serr.String())
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("serve: exit %d: %s", code, serr.String())
	}

	bare := filepath.Join(t.TempDir(), "bare")
	code, _, errOut = run(t, "", "make-random", "--out", bare, "--shape", "tiny", "--no-tokenizer")
	if code != exitOK || !strings.Contains(errOut, "without a tokenizer (--no-tokenizer)") ||
		!strings.Contains(errOut, "next: govinfer generate --model "+bare+" --ids") {
		t.Errorf("make-random --no-tokenizer: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(bare, "tokenizer.json")); err == nil {
		t.Error("--no-tokenizer wrote tokenizer.json")
	}
	code, _, errOut = run(t, "", "chat", "--model", bare, "hi")
	if want := bare + ": no tokenizer.json in this checkpoint folder"; code != exitUsage || !strings.Contains(errOut, want) ||
		!strings.Contains(errOut, "make-random writes one unless told --no-tokenizer") {
		t.Errorf("chat on a checkpoint without a tokenizer: exit %d, %q; want %q", code, errOut, want)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vocab", "300"}, "--vocab 300 is smaller than the bundled tokenizer's 151669 ids: add --no-tokenizer"},
		{[]string{"--no-tokenizer", "--chat-template", "x.jinja"}, "--no-tokenizer leaves the tokenizer and chat template out"},
	} {
		code, _, errOut := run(t, "", append([]string{"make-random", "--out", t.TempDir(), "--shape", "tiny"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("make-random %v: exit %d, %q; want %q", c.args, code, errOut, c.want)
		}
	}
}
