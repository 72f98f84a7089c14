package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var qwen3TokenizerDir = filepath.Join("..", "..", "testdata", "tokenizer", "qwen3")

func tokenizeCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runTokenize(context.Background(), stdio{in: strings.NewReader(stdin), out: &out, err: &errb}, args)
	return code, out.String(), errb.String()
}

func TestTokenizeEncodeDecode(t *testing.T) {
	in := `{"text": "Hello, world!"}` + "\n\n" +
		`{"text": "<|im_start|>user\n你好<|im_end|>"}` + "\n" +
		`{"text": ""}`
	for _, args := range [][]string{
		{"--model", qwen3TokenizerDir},
		{"--tokenizer", filepath.Join(qwen3TokenizerDir, "tokenizer.json")},
	} {
		code, out, errs := tokenizeCmd(t, in, args...)
		if code != exitOK || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		want := `{"ids":[9707,11,1879,0]}` + "\n" + `{"ids":[151644,872,198,108386,151645]}` + "\n" + `{"ids":[]}` + "\n"
		if out != want {
			t.Errorf("%v: output\n%s\nwant\n%s", args, out, want)
		}
	}

	in = `{"ids": [151644, 872, 198, 9707, 0, 151645], "skip_special_tokens": false}` + "\n" +
		`{"ids": [151644, 872, 198, 9707, 0, 151645], "skip_special_tokens": true}` + "\n" +
		`{"ids": [172, 253, 246]}` + "\n" +
		`{"ids": [151667, 27, 151668]}`
	code, out, errs := tokenizeCmd(t, in, "--model", qwen3TokenizerDir, "--decode")
	if code != exitOK || errs != "" {
		t.Fatalf("decode: exit %d, stderr %q", code, errs)
	}
	var texts []string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r struct{ Text string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		texts = append(texts, r.Text)
	}
	want := []string{"<|im_start|>user\nHello!<|im_end|>", "user\nHello!", "\uFFFD", "<think><</think>"}
	if !slices.Equal(texts, want) {
		t.Errorf("decoded %q, want %q", texts, want)
	}
	if strings.Contains(out, `\u003c`) {
		t.Errorf("output escapes '<' as HTML: %s", out)
	}
}

func TestTokenizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		err   string // part of the one-line message
		out   string
	}{
		{"no source", "", nil, exitUsage, "give exactly one of", ""},
		{"both sources", "", []string{"--model", qwen3TokenizerDir, "--tokenizer", "x.json"}, exitUsage, "give exactly one of", ""},
		{"bad flag", "", []string{"--bogus"}, exitUsage, "bogus", ""},
		{"extra argument", "", []string{"--model", qwen3TokenizerDir, "extra"}, exitUsage, "unexpected argument", ""},
		{"missing dir", "", []string{"--model", filepath.Join(t.TempDir(), "nope")}, exitUsage, "nope: no such file or folder", ""},
		{"no tokenizer", "", []string{"--model", t.TempDir()}, exitUsage, "no config.json, tokenizer.json or .gguf file in this folder", ""},
		{"not json", "{\"text\": \"a\"}\nnot json\n", []string{"--model", qwen3TokenizerDir}, exitError, "line 2", "{\"ids\":[64]}\n"},
		{"ids without --decode", `{"ids": [1]}`, []string{"--model", qwen3TokenizerDir}, exitError, "--decode", ""},
		{"text with --decode", `{"text": "a"}`, []string{"--model", qwen3TokenizerDir, "--decode"}, exitError, `missing "ids"`, ""},
		{"id out of range", `{"ids": [1, 999999]}`, []string{"--model", qwen3TokenizerDir, "--decode"}, exitError, "999999", ""},
		{"negative id", `{"ids": [-1]}`, []string{"--model", qwen3TokenizerDir, "--decode"}, exitError, "-1", ""},
		{"ids not numbers", `{"ids": ["a"]}`, []string{"--model", qwen3TokenizerDir, "--decode"}, exitError, "line 1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := tokenizeCmd(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errs)
			}
			if !strings.Contains(errs, tc.err) || strings.Count(errs, "\n") != 1 {
				t.Errorf("stderr %q, want one line containing %q", errs, tc.err)
			}
			if out != tc.out {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
		})
	}
}

func TestTokenizeBadTokenizerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, []byte(`{"model": {"type": "Unigram", "vocab": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := tokenizeCmd(t, `{"text":"a"}`, "--tokenizer", path)
	if code != exitError || !strings.Contains(errs, "Unigram") {
		t.Errorf("exit %d, stderr %q; want 1 and a message naming the model type", code, errs)
	}
}

func TestTokenizeHelp(t *testing.T) {
	code, out, errs := tokenizeCmd(t, "", "--help")
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"--model", "--tokenizer", "--decode", `{"text"`, `{"ids"`, "skip_special_tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}
