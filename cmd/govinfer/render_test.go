package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func renderCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runRender(context.Background(), stdio{in: strings.NewReader(stdin), out: &out, err: &errb}, args)
	return code, out.String(), errb.String()
}

// renderFixture makes a checkpoint-like directory with the Qwen3.5 chat
// template and a tokenizer_config.json naming the special tokens.
func renderFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "chat", "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"bos_token": null, "eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRenderGoldens(t *testing.T) {
	dir := renderFixture(t)
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "chat", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			Name     string          `json:"name"`
			Inputs   json.RawMessage `json:"inputs"`
			Rendered *string         `json:"rendered"`
			Error    *string         `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	// These two lost their number literals in cases.json; the package
	// tests cover them with restored inputs.
	skip := map[string]bool{"tool_args_number_formats": true, "tojson_escaping": true}
	n := 0
	for _, c := range f.Cases {
		if skip[c.Name] {
			continue
		}
		n++
		code, out, errOut := renderCmd(t, string(c.Inputs), "--model", dir)
		if c.Error != nil {
			if code != exitError || out != "" || !strings.Contains(errOut, *c.Error) {
				t.Errorf("%s: code %d, stdout %q, stderr %q; want exit 1 and %q", c.Name, code, out, errOut, *c.Error)
			}
			continue
		}
		if code != exitOK || out != *c.Rendered || errOut != "" {
			t.Errorf("%s: code %d, stderr %q\n got: %q\nwant: %q", c.Name, code, errOut, out, *c.Rendered)
		}
	}
	if n != 48 {
		t.Fatalf("ran %d cases, want 48", n)
	}
}

func TestRenderTemplateFlag(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jinja")
	src := "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}|{{ enable_thinking }}|{{ add_generation_prompt }}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := renderCmd(t, `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":false}`, "--template", path)
	// A --template alone has no tokenizer config, so eos_token is None;
	// Jinja drops the template's single trailing newline.
	if want := "[user:hi]None|False|False"; code != exitOK || out != want {
		t.Fatalf("code %d, stderr %q, got %q want %q", code, errOut, out, want)
	}
}

func TestRenderErrors(t *testing.T) {
	dir := renderFixture(t)
	bad := filepath.Join(t.TempDir(), "bad.jinja")
	if err := os.WriteFile(bad, []byte("{% if %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"no source", `{}`, nil, exitUsage, "--model"},
		{"bad flag", `{}`, []string{"--nope"}, exitUsage, "nope"},
		{"extra arg", `{}`, []string{"--model", dir, "x"}, exitUsage, "unexpected argument"},
		{"bad json", `{"messages": [`, []string{"--model", dir}, exitError, "request"},
		{"not object", `[1]`, []string{"--model", dir}, exitError, "one JSON object"},
		{"no messages", `{}`, []string{"--model", dir}, exitError, "no \"messages\""},
		{"bad agp", `{"messages": [], "add_generation_prompt": "yes"}`, []string{"--model", dir}, exitError, "add_generation_prompt"},
		{"raise", `{"messages": []}`, []string{"--model", dir}, exitError, "TemplateError: No messages provided."},
		{"missing dir", `{}`, []string{"--model", filepath.Join(dir, "none")}, exitUsage, "none: no such file or folder"},
		{"syntax", `{"messages": []}`, []string{"--template", bad}, exitError, "TemplateSyntaxError"},
	} {
		code, out, errOut := renderCmd(t, tc.stdin, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%s: code %d stdout %q stderr %q; want code %d and %q", tc.name, code, out, errOut, tc.code, tc.msg)
		}
	}
	code, out, _ := renderCmd(t, "", "--help")
	if code != exitOK || !strings.Contains(out, "--template") {
		t.Errorf("--help: code %d, out %q", code, out)
	}
}
