package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/safetensors"
)

// An adapter for testdata/models/moe-tiny that updates every kind of
// matrix a MoE layer has, the stacked experts through PEFT's
// target_parameters, and the same model written out with the updates
// added in float64: the reference the adapted model must match.

const moeTinyPrefix = "model.language_model."

// moeUpdate is one module's update: W += scale · B A, per expert for
// stacked experts (a [E][rank][in], b [E][out][rank]).
type moeUpdate struct {
	experts, rank, in, out int
	a, b                   [][]float64
}

// makeMoEAdapter writes a rank-r PEFT adapter for moe-tiny into dir and
// returns each tensor's update by the checkpoint's tensor name.
func makeMoEAdapter(t *testing.T, dir string, c *Config, r int, alpha float64) map[string]moeUpdate {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	val := func() float64 { return float64(rng.IntN(129)-64) / 512 }
	h, f, e := c.HiddenSize, c.MoEIntermediateSize, c.NumExperts
	ups := map[string]moeUpdate{}
	var tensors []safetensors.Tensor
	add := func(name string, shape []int, v []float32) {
		x, err := safetensors.FromFloat32(name, safetensors.F32, shape, v)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, x)
	}
	linear := func(module string, out, in int) {
		u := moeUpdate{rank: r, in: in, out: out, a: make([][]float64, 1), b: make([][]float64, 1)}
		a, b := make([]float32, r*in), make([]float32, out*r)
		u.a[0], u.b[0] = make([]float64, r*in), make([]float64, out*r)
		for i := range a {
			u.a[0][i] = val()
			a[i] = float32(u.a[0][i])
		}
		for i := range b {
			u.b[0][i] = val()
			b[i] = float32(u.b[0][i])
		}
		add("base_model.model."+module+".lora_A.weight", []int{r, in}, a)
		add("base_model.model."+module+".lora_B.weight", []int{out, r}, b)
		ups[module+".weight"] = u
	}
	// PEFT's ParamWrapper: lora_A [r·E, in], rows expert-major; lora_B
	// [out, r·E], column j·E+e being expert e's column j.
	stacked := func(param, fileModule string, out, in int) {
		u := moeUpdate{experts: e, rank: r, in: in, out: out, a: make([][]float64, e), b: make([][]float64, e)}
		a, b := make([]float32, r*e*in), make([]float32, out*r*e)
		for x := range e {
			u.a[x], u.b[x] = make([]float64, r*in), make([]float64, out*r)
			for j := range r {
				for i := range in {
					v := val()
					u.a[x][j*in+i] = v
					a[(x*r+j)*in+i] = float32(v)
				}
			}
			for o := range out {
				for j := range r {
					v := val()
					u.b[x][o*r+j] = v
					b[o*r*e+j*e+x] = float32(v)
				}
			}
		}
		add("base_model.model."+fileModule+".lora_A.weight", []int{r * e, in}, a)
		add("base_model.model."+fileModule+".lora_B.weight", []int{out, r * e}, b)
		ups[param] = u
	}
	for l, kind := range c.LayerTypes {
		p := fmt.Sprintf("%slayers.%d.", moeTinyPrefix, l)
		if kind == LinearAttention {
			linear(p+"linear_attn.in_proj_qkv", c.ConvDim(), h)
		} else {
			linear(p+"self_attn.q_proj", 2*c.NumHeads*c.HeadDim, h)
		}
		linear(p+"mlp.gate", e, h)
		linear(p+"mlp.shared_expert.gate_proj", c.SharedExpertIntermediateSize, h)
		// Both parameters of one module: gate_up_proj's wrapper is the
		// inner one (base_layer), as PEFT nests them.
		stacked(p+"mlp.experts.gate_up_proj", p+"mlp.experts.base_layer", 2*f, h)
		stacked(p+"mlp.experts.down_proj", p+"mlp.experts", h, f)
	}
	cfg := map[string]any{
		"peft_type": "LORA", "r": r, "lora_alpha": alpha, "bias": "none", "peft_version": "0.19.1",
		"target_modules":    []string{"in_proj_qkv", "q_proj", "gate", "shared_expert.gate_proj"},
		"target_parameters": []string{"mlp.experts.gate_up_proj", "mlp.experts.down_proj"},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, lora.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, lora.WeightsFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
	return ups
}

// writeAdaptedMoE writes moe-tiny into dir with every update of ups added
// (scale s) in float64 and the changed tensors stored as F32.
func writeAdaptedMoE(t *testing.T, dir string, ups map[string]moeUpdate, s float64) {
	t.Helper()
	src := filepath.Join("..", "testdata", "models", "moe-tiny")
	for _, name := range []string{"config.json", "generation_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []safetensors.Tensor
	for _, name := range f.Names() {
		x, _ := f.Tensor(name)
		u, ok := ups[name]
		if !ok {
			out = append(out, x)
			continue
		}
		w, err := x.ToFloat32()
		if err != nil {
			t.Fatal(err)
		}
		per := u.out * u.in
		for e := range max(u.experts, 1) {
			for o := range u.out {
				for i := range u.in {
					var d float64
					for j := range u.rank {
						d += u.b[e][o*u.rank+j] * u.a[e][j*u.in+i]
					}
					w[e*per+o*u.in+i] = float32(float64(w[e*per+o*u.in+i]) + s*d)
				}
			}
		}
		y, err := safetensors.FromFloat32(name, safetensors.F32, x.Shape, w)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, y)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), out, nil); err != nil {
		t.Fatal(err)
	}
}

// moeLoRACase returns the adapter's directory and the adapted checkpoint.
func moeLoRACase(t *testing.T) (adapterDir, adaptedDir string) {
	t.Helper()
	c, err := LoadConfig(filepath.Join("..", "testdata", "models", "moe-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	adapterDir, adaptedDir = t.TempDir(), t.TempDir()
	const r, alpha = 4, 8.0
	ups := makeMoEAdapter(t, adapterDir, c, r, alpha)
	writeAdaptedMoE(t, adaptedDir, ups, alpha/r)
	return adapterDir, adaptedDir
}

// moeLoRAReference loads the adapter of moeLoRACase and returns it with
// a prompt and the prompt's last logits on the adapted checkpoint (CPU).
func moeLoRAReference(t *testing.T) (*lora.Adapter, []int, []float32) {
	t.Helper()
	adapterDir, adaptedDir := moeLoRACase(t)
	ad, err := lora.Load(adapterDir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{17, 300, 5, 801, 44, 12, 650, 9, 9, 131}
	ref, err := Open(adaptedDir, withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	return ad, prompt, adapterLogits(t, ref, nil, prompt)
}

// adapterLogits runs a prompt on a new sequence of m with uses and
// returns its last logits.
func adapterLogits(t *testing.T, m *Model, uses []AdapterUse, prompt []int) []float32 {
	t.Helper()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	if err := seq.SetAdapters(uses); err != nil {
		t.Fatal(err)
	}
	out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Logits
}

// TestLoRAMoEMerged checks an adapter of every MoE matrix, the stacked
// experts included, merged at load, against the checkpoint with the
// updates added in float64.
func TestLoRAMoEMerged(t *testing.T) {
	ad, prompt, want := moeLoRAReference(t)
	m, err := Open(filepath.Join("..", "testdata", "models", "moe-tiny"), withCPU(t, Options{Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got := adapterLogits(t, m, nil, prompt)
	if e := relErr(got, want); e > 1e-5 {
		t.Errorf("merged: rel err %.3g against the adapted checkpoint", e)
	}
	base, err := Open(filepath.Join("..", "testdata", "models", "moe-tiny"), withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	if e := relErr(adapterLogits(t, base, nil, prompt), want); e < 1e-3 {
		t.Errorf("the adapter barely changes the logits (rel %.3g): the test cannot tell", e)
	}
}

// checkLoRAMoEUnmerged checks the same adapter attached unmerged to a
// model opened with o: a prompt, a batch mixing it with the base, and a
// row of each equal to its run alone.
func checkLoRAMoEUnmerged(t *testing.T, o Options) {
	ad, prompt, want := moeLoRAReference(t)
	m, err := Open(filepath.Join("..", "testdata", "models", "moe-tiny"), withCPU(t, o))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, err := m.AttachAdapter("moe", ad)
	if err != nil {
		t.Fatal(err)
	}
	uses := []AdapterUse{{Adapter: a, Scale: 1}}
	solo := adapterLogits(t, m, uses, prompt)
	if e := relErr(solo, want); e > 1e-5 {
		t.Errorf("unmerged: rel err %.3g against the adapted checkpoint", e)
	}
	base := adapterLogits(t, m, nil, prompt)
	// One step: the base sequence's prompt, then the adapter's, sharing
	// experts.
	s1, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.SetAdapters(uses); err != nil {
		t.Fatal(err)
	}
	out, err := m.Step(context.Background(), []Input{{Seq: s1, Tokens: prompt}, {Seq: s2, Tokens: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out[0].Logits, base) || !slices.Equal(out[1].Logits, solo) {
		t.Errorf("a batch of the base and the adapter differs from their runs alone (rel %.3g, %.3g)", relErr(out[0].Logits, base), relErr(out[1].Logits, solo))
	}
}

// TestLoRAMoEUnmerged checks expert updates unmerged on the CPU.
func TestLoRAMoEUnmerged(t *testing.T) { checkLoRAMoEUnmerged(t, Options{}) }
