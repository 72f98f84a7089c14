package lora

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// drop marks a config key to leave out.
type dropKey struct{}

var drop = dropKey{}

// configJSON returns a plain LoRA config (r 2, alpha 4, target q_proj) with
// over's keys replaced (or dropped).
func configJSON(t *testing.T, over map[string]any) string {
	t.Helper()
	c := map[string]any{
		"peft_type":               "LORA",
		"peft_version":            "0.20.0",
		"base_model_name_or_path": "random/small",
		"task_type":               "CAUSAL_LM",
		"r":                       2,
		"lora_alpha":              4,
		"lora_dropout":            0.0,
		"target_modules":          []string{"q_proj"},
		"bias":                    "none",
		"fan_in_fan_out":          false,
		"use_dora":                false,
		"use_rslora":              false,
		"modules_to_save":         nil,
		"init_lora_weights":       true,
		"rank_pattern":            map[string]any{},
		"alpha_pattern":           map[string]any{},
		"layers_to_transform":     nil,
		"layers_pattern":          nil,
		"inference_mode":          true,
	}
	for k, v := range over {
		if v == drop {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeAdapter writes an adapter directory; tensors nil leaves out the
// safetensors file.
func writeAdapter(t *testing.T, cfg string, tensors []safetensors.Tensor) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if tensors != nil {
		if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// exactValues returns n random multiples of 1/64 in [-1, 1]: exact in F32,
// BF16 and F16, so that a factor stored in any of them reads back as these.
func exactValues(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.IntN(129)-64) / 64
	}
	return v
}

// tensor builds a tensor of values in dtype.
func tensor(t *testing.T, name string, dtype safetensors.DType, shape []int, values []float32) safetensors.Tensor {
	t.Helper()
	x, err := safetensors.FromFloat32(name, dtype, shape, values)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// linearPair returns the two factors of module (a PEFT module name) with
// rank r, in and out wide, and their values.
func linearPair(t *testing.T, rng *rand.Rand, module string, dtype safetensors.DType, r, in, out int) ([]safetensors.Tensor, []float32, []float32) {
	t.Helper()
	a, b := exactValues(rng, r*in), exactValues(rng, out*r)
	return []safetensors.Tensor{
		tensor(t, "base_model.model."+module+".lora_A.weight", dtype, []int{r, in}, a),
		tensor(t, "base_model.model."+module+".lora_B.weight", dtype, []int{out, r}, b),
	}, a, b
}

const qProj = "model.language_model.layers.0.self_attn.q_proj"

// qAdapter is the smallest valid adapter: q_proj of layer 0, rank 2.
func qAdapter(t *testing.T) []safetensors.Tensor {
	t.Helper()
	ts, _, _ := linearPair(t, rand.New(rand.NewPCG(1, 2)), qProj, safetensors.F32, 2, 6, 5)
	return ts
}
