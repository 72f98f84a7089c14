package randmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/govinfer/govinfer/safetensors"
)

// loraTargets are the module names (the last component) of the text
// model's linears a random adapter updates: every one a Qwen3.5 layer has
// (attention, Gated DeltaNet, dense MLP, the MoE's shared expert).
var loraTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj",
	"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj",
	"gate_proj", "up_proj", "down_proj"}

// LoRAOptions configure WriteLoRA.
type LoRAOptions struct {
	// Rank is every module's rank; Alpha its lora_alpha (0 means Rank,
	// a scale of 1).
	Rank  int
	Alpha float64
	Seed  uint64
}

// WriteLoRA writes into dir a random LoRA adapter in PEFT's layout
// (adapter_config.json, adapter_model.safetensors with F32 lora_A [r, in]
// and lora_B [out, r]) for the checkpoint in modelDir: one update on every
// linear of its text model that loraTargets names, experts excluded. A's
// entries are N(0, 1/in), B's N(0, 0.02/r), so the update changes the
// model's outputs without swamping them. It returns the modules written.
func WriteLoRA(dir, modelDir string, o LoRAOptions) (int, error) {
	if o.Rank <= 0 {
		return 0, fmt.Errorf("randmodel: LoRA rank must be positive, got %d", o.Rank)
	}
	if o.Alpha == 0 {
		o.Alpha = float64(o.Rank)
	}
	ck, err := safetensors.OpenCheckpoint(modelDir)
	if err != nil {
		return 0, fmt.Errorf("randmodel: %w", err)
	}
	defer ck.Close()
	type mod struct {
		name    string
		in, out int
	}
	var mods []mod
	for _, name := range ck.Names() {
		base, ok := strings.CutSuffix(name, ".weight")
		if !ok || strings.Contains(name, "visual") || strings.HasPrefix(name, "mtp.") || strings.Contains(name, ".experts.") {
			continue
		}
		last := base[strings.LastIndexByte(base, '.')+1:]
		if !contains(loraTargets, last) || !strings.Contains(base, "layers.") {
			continue
		}
		info, err := ck.Info(name)
		if err != nil {
			return 0, fmt.Errorf("randmodel: %w", err)
		}
		if len(info.Shape) != 2 {
			continue
		}
		mods = append(mods, mod{base, info.Shape[1], info.Shape[0]})
	}
	if len(mods) == 0 {
		return 0, fmt.Errorf("randmodel: %s has no linear a LoRA adapter could update", modelDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("randmodel: %w", err)
	}
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	fill := func(n int, std float64) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64()*std)))
		}
		return b
	}
	var tensors []safetensors.Tensor
	for _, m := range mods {
		p := "base_model.model." + m.name
		tensors = append(tensors,
			safetensors.Tensor{Name: p + ".lora_A.weight", DType: safetensors.F32, Shape: []int{o.Rank, m.in}, Data: fill(o.Rank*m.in, 1/math.Sqrt(float64(m.in)))},
			safetensors.Tensor{Name: p + ".lora_B.weight", DType: safetensors.F32, Shape: []int{m.out, o.Rank}, Data: fill(m.out*o.Rank, 0.02/math.Sqrt(float64(o.Rank)))})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return 0, fmt.Errorf("randmodel: %w", err)
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": o.Rank, "lora_alpha": o.Alpha, "lora_dropout": 0.0,
		"target_modules": loraTargets, "bias": "none", "use_rslora": false, "use_dora": false,
		"base_model_name_or_path": filepath.Base(filepath.Clean(modelDir)), "inference_mode": true,
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), append(cfg, '\n'), 0o644); err != nil {
		return 0, fmt.Errorf("randmodel: %w", err)
	}
	return len(mods), nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
