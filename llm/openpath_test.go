package llm_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/modelpath"
)

// link makes dir hold links to the test checkpoint's files named.
func link(t *testing.T, dir string, names ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		src, err := filepath.Abs(filepath.Join(checkpointDir, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenPathErrors: llm.Open answers a path that names no checkpoint, a
// checkpoint without its tokenizer and a config of another architecture as
// the commands do, with modelpath's and model's errors.
func TestOpenPathErrors(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	t.Setenv("HF_HUB_CACHE", filepath.Join(root, "hub"))
	link(t, "notok", "config.json", "model.safetensors")
	link(t, "empty")
	// A Qwen3 config beside the weights and tokenizer.
	link(t, "qwen3", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
	cfg := map[string]any{"model_type": "qwen3", "architectures": []string{"Qwen3ForCausalLM"}, "hidden_size": 64, "num_hidden_layers": 4,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 151669, "intermediate_size": 128}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join("qwen3", "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		kind error
		want string
	}{
		{"nope", modelpath.ErrNotFound, "llm: nope: no such file or folder"},
		{"Qwen/Qwen3.5-9B", modelpath.ErrHubName, "huggingface-cli download Qwen/Qwen3.5-9B --local-dir Qwen3.5-9B"},
		{"empty", modelpath.ErrNotCheckpoint, "llm: empty: no config.json or .gguf file in this folder"},
		{"notok/model.safetensors", modelpath.ErrNotCheckpoint, "a file of the checkpoint folder notok, not the checkpoint: pass the folder, notok"},
		{"notok", modelpath.ErrNoTokenizer, "llm: notok: no tokenizer.json in this checkpoint folder"},
		{"qwen3", model.ErrArchitecture, `not a Qwen3.5 model: model_type is "qwen3" (Qwen3ForCausalLM)`},
	} {
		m, err := llm.Open(c.path, llm.Options{MaxModelLen: 256})
		if err == nil {
			m.Close()
		}
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v; want %v saying %q", c.path, err, c.kind, c.want)
		}
	}
}

// TestOpenHubCache: a Hub name whose one snapshot is in the Hugging Face
// cache opens that snapshot, named Org/Name.
func TestOpenHubCache(t *testing.T) {
	hub := t.TempDir()
	t.Setenv("HF_HUB_CACHE", hub)
	t.Chdir(t.TempDir())
	link(t, filepath.Join(hub, "models--Org--Random", "snapshots", "0123abc"),
		"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
	for _, path := range []string{"Org/Random", filepath.Join(hub, "models--Org--Random")} {
		m, err := llm.Open(path, llm.Options{MaxModelLen: 256})
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		if m.Name() != "Org/Random" {
			t.Errorf("Open(%s): name %q, want Org/Random", path, m.Name())
		}
		m.Close()
	}
}
