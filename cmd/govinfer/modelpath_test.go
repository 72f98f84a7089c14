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

// TestModelFlagErrors: every command that takes --model (and diag's
// --model-dir) answers a path that names no checkpoint alike, before
// anything loads, with what is wrong and what to pass instead.
func TestModelFlagErrors(t *testing.T) {
	tiny, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	t.Chdir(root) // relative paths, and no Qwen folder: Qwen/... is a Hub name
	t.Setenv("HF_HUB_CACHE", filepath.Join(root, "hub"))
	var top map[string]any
	if err := json.Unmarshal(tiny, &top); err != nil {
		t.Fatal(err)
	}
	// Llama's model_type over Qwen3.5's sizes; Qwen3's config.
	text := top["text_config"].(map[string]any)
	text["model_type"], text["architectures"] = "llama", []string{"LlamaForCausalLM"}
	llama, _ := json.Marshal(text)
	qwen3 := `{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 1024}`
	for name, data := range map[string]string{
		"ck/config.json": string(tiny), "ck/model.safetensors": "x", "ck/tokenizer.json": "{}",
		"notok/config.json": string(tiny), "notok/model.safetensors": "x",
		"qwen3/config.json": qwen3, "qwen3/tokenizer.json": "{}",
		"llama/config.json": string(llama), "llama/tokenizer.json": "{}",
		"empty/.keep": "",
	} {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The commands, and whether each needs the tokenizer and the config.
	commands := []struct {
		name      string
		args      func(path string) []string
		code      int
		tok, arch bool
	}{
		{"serve", func(p string) []string { return []string{"serve", "--model", p, "--port", "0"} }, exitUsage, true, true},
		{"chat", func(p string) []string { return []string{"chat", "--model", p, "hi"} }, exitUsage, true, true},
		{"generate", func(p string) []string { return []string{"generate", "--model", p, "--prompt", "hi"} }, exitUsage, true, true},
		{"generate --ids", func(p string) []string { return []string{"generate", "--model", p, "--ids", "1"} }, exitUsage, false, true},
		{"bench", func(p string) []string { return []string{"bench", "--model", p} }, exitUsage, false, true},
		{"quantize", func(p string) []string {
			return []string{"quantize", "--model", p, "--out", "x.gguf", "--type", "q8_0"}
		}, exitUsage, false, false},
		{"diag", func(p string) []string { return []string{"diag", "--model-dir", p, "--report", "r.json"} }, exitRunBroken, true, true},
		{"tokenize", func(p string) []string { return []string{"tokenize", "--model", p} }, exitUsage, true, false},
		{"render", func(p string) []string { return []string{"render", "--model", p} }, exitUsage, false, false},
	}
	cases := []struct {
		name, path string
		want       string
		tok, arch  bool // the case is the tokenizer's or the config's
	}{
		{name: "missing", path: "nope", want: "nope: no such file or folder"},
		{name: "Hub name", path: "Qwen/Qwen3.5-9B", want: "Qwen/Qwen3.5-9B: no such file or folder. If it names a model of the Hugging Face Hub: " +
			"govinfer reads local checkpoints and downloads nothing, so download it first, with `huggingface-cli download Qwen/Qwen3.5-9B --local-dir Qwen3.5-9B` " +
			"(or `hf download Qwen/Qwen3.5-9B --local-dir Qwen3.5-9B`), and pass the folder, Qwen3.5-9B"},
		{name: "folder without config.json", path: "empty", want: "empty: no config.json"},
		{name: "safetensors file", path: "ck/model.safetensors", want: "ck/model.safetensors: a file of the checkpoint folder ck, not the checkpoint: pass the folder, ck"},
		{name: "config.json", path: "ck/config.json", want: "ck/config.json: a file of the checkpoint folder ck, not the checkpoint: pass the folder, ck"},
		{name: "no tokenizer", path: "notok", tok: true, want: "notok: no tokenizer.json in this checkpoint folder"},
		{name: "Qwen3", path: "qwen3", arch: true, want: `qwen3/config.json: not a Qwen3.5 model: model_type is "qwen3" (Qwen3ForCausalLM); ` +
			"govinfer runs Qwen3.5 checkpoints (model_type qwen3_5, qwen3_5_text, qwen3_5_moe or qwen3_5_moe_text)"},
		{name: "Llama", path: "llama", arch: true, want: `llama/config.json: not a Qwen3.5 model: model_type is "llama" (LlamaForCausalLM)`},
	}
	// For serve, a cancelled context: one that got past the path stops at
	// once.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, cmd := range commands {
		for _, c := range cases {
			if c.tok && !cmd.tok || c.arch && !cmd.arch {
				continue
			}
			t.Run(cmd.name+"/"+c.name, func(t *testing.T) {
				var out, errOut bytes.Buffer
				ctx := context.Background()
				if cmd.name == "serve" {
					ctx = stopped
				}
				code := dispatch(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut}, cmd.args(c.path))
				flag := "--model "
				if cmd.name == "diag" {
					flag = "--model-dir "
				}
				want := c.want
				if !c.arch {
					want = flag + want
				}
				if code != cmd.code || !strings.Contains(errOut.String(), want) {
					t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), cmd.code, want)
				}
			})
		}
	}
}
