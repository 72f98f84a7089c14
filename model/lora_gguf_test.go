package model

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/safetensors"
)

// writeLinearAdapter writes a random rank-r PEFT adapter of the text
// model's linears of config c (prefix: the checkpoint's text prefix)
// into dir: the Gated DeltaNet projections, q_proj and o_proj, and the
// MLP's down_proj.
func writeLinearAdapter(t *testing.T, dir, prefix string, c *Config, r int, alpha float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 5))
	var tensors []safetensors.Tensor
	add := func(module string, out, in int) {
		for _, f := range []struct {
			name  string
			shape []int
		}{{"lora_A", []int{r, in}}, {"lora_B", []int{out, r}}} {
			v := make([]float32, f.shape[0]*f.shape[1])
			for i := range v {
				v[i] = float32(rng.IntN(129)-64) / 256
			}
			x, err := safetensors.FromFloat32("base_model.model."+module+"."+f.name+".weight", safetensors.F32, f.shape, v)
			if err != nil {
				t.Fatal(err)
			}
			tensors = append(tensors, x)
		}
	}
	h := c.HiddenSize
	for l, kind := range c.LayerTypes {
		p := fmt.Sprintf("%slayers.%d.", prefix, l)
		if kind == LinearAttention {
			add(p+"linear_attn.in_proj_qkv", c.ConvDim(), h)
			add(p+"linear_attn.in_proj_z", c.ValueDim(), h)
			add(p+"linear_attn.in_proj_b", c.LinearNumValueHeads, h)
			add(p+"linear_attn.out_proj", h, c.ValueDim())
		} else {
			add(p+"self_attn.q_proj", 2*c.NumHeads*c.HeadDim, h)
			add(p+"self_attn.o_proj", h, c.NumHeads*c.HeadDim)
		}
		add(p+"mlp.down_proj", h, c.IntermediateSize)
	}
	cfg, err := json.Marshal(map[string]any{"peft_type": "LORA", "r": r, "lora_alpha": alpha, "bias": "none",
		"target_modules": []string{"in_proj_qkv", "in_proj_z", "in_proj_b", "out_proj", "q_proj", "o_proj", "down_proj"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, lora.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, lora.WeightsFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLoRAGGUFTiled attaches an adapter of the Gated DeltaNet projections
// to a GGUF base whose layers keep in_proj_z and out_proj in the file's
// tiled value-head order (every linear-attention layer forced onto that
// path, as TestGGUFTiledMatchesGrouped does), unmerged and merged, and
// compares it with the same adapter on the safetensors checkpoint the
// file was converted from.
func TestLoRAGGUFTiled(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	hf := filepath.Join(ggufDir, "ksmall")
	cfg, err := LoadConfig(hf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeLinearAdapter(t, dir, "model.language_model.", cfg, 4, 8)
	ad, err := lora.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts := readPrompts(t, filepath.Join(ggufDir, "logits", "prompts.txt"))
	run := func(m *Model, a *Adapter) []float32 {
		var uses []AdapterUse
		if a != nil {
			uses = []AdapterUse{{Adapter: a, Scale: 1}}
		}
		var got []float32
		for _, p := range prompts {
			got = append(got, adapterLogits(t, m, uses, p)...)
		}
		return got
	}
	ref, err := Open(hf, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ra, err := ref.AttachAdapter("x", ad)
	if err != nil {
		t.Fatal(err)
	}
	want, base := run(ref, ra), run(ref, nil)
	if e := relErr(base, want); e < 1e-3 {
		t.Fatalf("the adapter barely changes the logits (rel %.3g)", e)
	}

	f, err := gguf.Open(filepath.Join(ggufDir, "ksmall-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gcfg, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	heads := qwen35.Heads{Nk: gcfg.LinearNumKeyHeads, Nv: gcfg.LinearNumValueHeads, Dk: gcfg.LinearKeyHeadDim, Dv: gcfg.LinearValueHeadDim}
	if heads.Nv == heads.Nk {
		t.Fatal("ksmall's value heads are its key heads: nothing is tiled")
	}
	names := map[string]bool{}
	for l, typ := range gcfg.LayerTypes {
		if typ == LinearAttention {
			p := fmt.Sprintf("%slayers.%d.linear_attn.", ggufPrefix, l)
			names[p+"in_proj_z.weight"], names[p+"out_proj.weight"] = true, true
		}
	}
	open := func(o Options) *Model {
		o.Backend = be
		m, err := newModel(gcfg, &ggufSource{f: f, heads: heads, tiled: names}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		for _, l := range m.w.layers {
			if g, ok := l.mixer.(*gatedDeltaNet); ok {
				g.tiled = &heads
			}
		}
		return m
	}
	m := open(Options{})
	a, err := m.AttachAdapter("x", ad)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "unmerged on the tiled GGUF against the checkpoint", run(m, a), want, ggufFaithful)
	merged := open(Options{Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}})
	checkClose(t, "merged into the tiled GGUF against the checkpoint", run(merged, nil), want, ggufFaithful)
}
