package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// TestTextOnlyExport rewrites the tiny checkpoint as a text-only export (a
// flat config.json, tensors under "model." instead of
// "model.language_model.", no vision or MTP tensors) and checks the engine
// computes the same logits from it.
func TestTextOnlyExport(t *testing.T) {
	src := filepath.Join("..", "testdata", "models", "tiny")
	dst := t.TempDir()

	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	flat := cfg["text_config"].(map[string]any)
	flat["architectures"] = []string{"Qwen3_5ForCausalLM"}
	out, _ := json.Marshal(flat)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}

	ck, err := safetensors.OpenCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var tensors []safetensors.Tensor
	skipped := 0
	for _, name := range ck.Names() {
		ten, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(name, "model.language_model."):
			ten.Name = "model." + strings.TrimPrefix(name, "model.language_model.")
		case strings.HasPrefix(name, "model.visual.") || strings.HasPrefix(name, "mtp."):
			skipped++
			continue
		}
		tensors = append(tensors, ten)
	}
	if skipped == 0 {
		t.Fatal("the tiny checkpoint should carry vision and MTP tensors to skip")
	}
	if err := safetensors.WriteFile(filepath.Join(dst, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}

	prompt := []int{5, 77, 300, 1000, 12, 9}
	a, err := Open(src, withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(dst, withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sa, want := prefill(t, a, prompt, 0, true)
	sa.Close()
	sb, got := prefill(t, b, prompt, 0, true)
	sb.Close()
	checkClose(t, "text-only export logits", got, want, 0)
}

// TestCheckpointErrors checks that broken checkpoints give errors naming
// what is wrong.
func TestCheckpointErrors(t *testing.T) {
	src := filepath.Join("..", "testdata", "models", "tiny")
	cfgData, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(t *testing.T, cfg string, withWeights bool) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if withWeights {
			if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), weights, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	cases := []struct {
		name, cfg string
		weights   bool
		want      string
	}{
		{"config not JSON", "{", true, "not valid JSON"},
		{"no weights", string(cfgData), false, "safetensors"},
		{"hidden size disagrees", strings.Replace(string(cfgData), `"hidden_size": 64`, `"hidden_size": 96`, 1), true, "config.json implies"},
		{"bad layer type", strings.Replace(string(cfgData), `"full_attention"`, `"sliding_attention"`, 1), true, "sliding_attention"},
		{"heads not a multiple", strings.Replace(string(cfgData), `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1), true, "multiple"},
		// Absurd sizes fail before anything is allocated for them.
		{"a trillion layers", strings.Replace(string(cfgData), `"num_hidden_layers": 4`, `"num_hidden_layers": 1000000000000`, 1), true, "at most 4096"},
		{"more layers than weights", manyLayers(t, cfgData, 4000), true, "weights for 4 layers"},
		{"huge width", strings.Replace(string(cfgData), `"intermediate_size": 160`, `"intermediate_size": 1000000000`, 1), true, "at most 1048576"},
		{"huge vocabulary", strings.Replace(string(cfgData), `"vocab_size": 1024`, `"vocab_size": 99999999999`, 1), true, "at most 16777216"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(write(t, c.cfg, c.weights), withCPU(t, Options{}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
	if _, err := Open(t.TempDir(), withCPU(t, Options{})); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("empty directory: %v", err)
	}
}

// manyLayers returns the config with n layers and no layer_types list (so
// that the defaults fill it).
func manyLayers(t *testing.T, cfgData []byte, n int) string {
	return editTextConfig(t, cfgData, func(text map[string]any) {
		text["num_hidden_layers"] = n
		delete(text, "layer_types")
	})
}

// editTextConfig returns the config cfgData with its text model's part
// (text_config, or the whole of a flat config) changed by edit.
func editTextConfig(t *testing.T, cfgData []byte, edit func(text map[string]any)) string {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		t.Fatal(err)
	}
	text := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		text = tc
	}
	edit(text)
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
