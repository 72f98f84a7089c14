package model

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/modelpath"
)

// TestConfigModelType: Qwen3.5's model_types load; another architecture's
// config is refused naming its model_type (not misread, not refused for a
// missing Qwen3.5 size), and a config without model_type loads only as a
// flat text config with Qwen3.5's keys.
func TestConfigModelType(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "models", "tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// edit returns the tiny config changed by f (on the top level and
	// text_config), or flattened to its text_config when flat.
	edit := func(flat bool, f func(top, text map[string]any)) []byte {
		var top map[string]any
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatal(err)
		}
		text := top["text_config"].(map[string]any)
		if flat {
			top = text
		}
		f(top, text)
		out, err := json.Marshal(top)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// qwen3 is Qwen3's keys: no Gated DeltaNet.
	qwen3 := func(top, text map[string]any) {
		top["model_type"], top["architectures"] = "qwen3", []string{"Qwen3ForCausalLM"}
		for k := range top {
			if strings.HasPrefix(k, "linear_") || k == "layer_types" {
				delete(top, k)
			}
		}
	}
	for _, c := range []struct {
		name   string
		config []byte
		want   string // the error's words; "" loads
	}{
		{"qwen3_5", data, ""},
		{"qwen3_5_moe", edit(false, func(top, text map[string]any) {
			top["model_type"], text["model_type"] = "qwen3_5_moe", "qwen3_5_moe_text"
		}), ""},
		{"text export", edit(true, func(top, _ map[string]any) {}), ""},
		{"moe text export", edit(true, func(top, _ map[string]any) { top["model_type"] = "qwen3_5_moe_text" }), ""},
		{"flat without model_type", edit(true, func(top, _ map[string]any) { delete(top, "model_type") }), ""},
		{"nested without model_type", edit(false, func(top, text map[string]any) { delete(top, "model_type"); delete(text, "model_type") }),
			"not a Qwen3.5 model: no model_type"},
		{"flat without model_type or Qwen3.5 keys", edit(true, func(top, _ map[string]any) { qwen3(top, nil); delete(top, "model_type") }),
			"not a Qwen3.5 model: no model_type, and not a flat text config with Qwen3.5's keys"},
		{"Qwen3", edit(true, qwen3),
			`not a Qwen3.5 model: model_type is "qwen3" (Qwen3ForCausalLM); govinfer runs Qwen3.5 checkpoints (model_type qwen3_5, qwen3_5_text, qwen3_5_moe or qwen3_5_moe_text)`},
		{"Llama config, Qwen3.5 sizes", edit(true, func(top, _ map[string]any) {
			top["model_type"], top["architectures"] = "llama", []string{"LlamaForCausalLM"}
		}), `model_type is "llama" (LlamaForCausalLM)`},
		{"qwen4_exp", edit(false, func(top, text map[string]any) { top["model_type"], text["model_type"] = "qwen4_exp", "qwen4_exp_text" }),
			`model_type is "qwen4_exp"`},
		{"other text_config", edit(false, func(_, text map[string]any) { text["model_type"] = "qwen3_next" }), `model_type is "qwen3_next"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig(c.config)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrArchitecture) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want ErrArchitecture saying %q", err, c.want)
			}
			// And through LoadConfig, naming the file.
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), c.config, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadConfig(dir); !errors.Is(err, ErrArchitecture) || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) {
				t.Errorf("LoadConfig: %v", err)
			}
		})
	}
}

// TestLoadConfigPath: LoadConfig and Open answer a path that names no
// checkpoint with modelpath's errors.
func TestLoadConfigPath(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join("..", "testdata", "models", "tiny", "config.json")
	for _, c := range []struct {
		path string
		kind error
		want string
	}{
		{filepath.Join(dir, "nope"), modelpath.ErrNotFound, "no such file or folder"},
		{dir, modelpath.ErrNotCheckpoint, "no config.json or .gguf file in this folder"},
		{cfg, modelpath.ErrNotCheckpoint, "pass the folder, " + filepath.Dir(cfg)},
	} {
		if _, err := LoadConfig(c.path); !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadConfig(%s): %v, want %v saying %q", c.path, err, c.kind, c.want)
		}
		if _, err := Open(c.path, Options{}); !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want %v saying %q", c.path, err, c.kind, c.want)
		}
	}
}
