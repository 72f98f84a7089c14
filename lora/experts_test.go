package lora

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// The stacked expert tensors of one Qwen3.5-MoE layer as transformers
// holds them: gate_up_proj [E, 2F, H], down_proj [E, H, F].
const (
	nExperts = 3
	hidden   = 6
	ffn      = 5
	experts  = "model.language_model.layers.0.mlp.experts"
)

// expertFactors is one ParamWrapper's pair as the file stores it.
type expertFactors struct {
	r, rows, cols int       // lora_A is [r·E, cols], lora_B [rows, r·E]
	a, b          []float32 // row-major
}

func newExpertFactors(rng *rand.Rand, r, rows, cols int) expertFactors {
	return expertFactors{r: r, rows: rows, cols: cols, a: exactValues(rng, r*nExperts*cols), b: exactValues(rng, rows*r*nExperts)}
}

func (f expertFactors) tensors(t *testing.T, path string, dtype safetensors.DType) []safetensors.Tensor {
	return []safetensors.Tensor{
		tensor(t, "base_model.model."+path+".lora_A.weight", dtype, []int{f.r * nExperts, f.cols}, f.a),
		tensor(t, "base_model.model."+path+".lora_B.weight", dtype, []int{f.rows, f.r * nExperts}, f.b),
	}
}

// peftDelta is PEFT's ParamWrapper.get_delta_weight for a 3-D parameter,
// written out: lora_A reshaped (E, r, in'), lora_B (out', r, E), and
// einsum "o r e, e r i -> e o i" (PEFT ≥ 0.19.1 on an [E, out, in] tensor)
// or "-> e i o" (before, reading the tensor as [E, in, out]). It returns
// the update of the parameter, [E][d1][d2].
func peftDelta(f expertFactors, scale float64, old bool) [][][]float64 {
	E, r := nExperts, f.r
	in, out := f.cols, f.rows // lora_A's columns, lora_B's rows
	d1, d2 := out, in
	if old {
		d1, d2 = in, out
	}
	delta := make([][][]float64, E)
	for e := range delta {
		delta[e] = make([][]float64, d1)
		for x := range delta[e] {
			delta[e][x] = make([]float64, d2)
		}
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				var s float64
				for j := 0; j < r; j++ {
					s += float64(f.b[o*r*E+j*E+e]) * float64(f.a[(e*r+j)*in+i])
				}
				if old {
					delta[e][i][o] = s * scale
				} else {
					delta[e][o][i] = s * scale
				}
			}
		}
	}
	return delta
}

// moduleDelta is Scale·B_e·A_e of each expert, [E][Out][In].
func moduleDelta(m *Module) [][][]float64 {
	delta := make([][][]float64, m.Experts)
	for e := range delta {
		delta[e] = make([][]float64, m.Out)
		for o := range delta[e] {
			delta[e][o] = make([]float64, m.In)
			for i := range delta[e][o] {
				var s float64
				for j := 0; j < m.Rank; j++ {
					s += float64(m.B[(e*m.Out+o)*m.Rank+j]) * float64(m.A[(e*m.Rank+j)*m.In+i])
				}
				delta[e][o][i] = s * m.Scale
			}
		}
	}
	return delta
}

func sameDelta(t *testing.T, name string, got, want [][][]float64) {
	t.Helper()
	if len(got) != len(want) || len(got[0]) != len(want[0]) || len(got[0][0]) != len(want[0][0]) {
		t.Fatalf("%s: update is %d×%d×%d, want %d×%d×%d", name, len(got), len(got[0]), len(got[0][0]), len(want), len(want[0]), len(want[0][0]))
	}
	for e := range want {
		for x := range want[e] {
			for y := range want[e][x] {
				// Sums of products of multiples of 1/64: exact in float64.
				if got[e][x][y] != want[e][x][y] {
					t.Fatalf("%s: expert %d [%d][%d] = %v, PEFT's update is %v", name, e, x, y, got[e][x][y], want[e][x][y])
				}
			}
		}
	}
}

func expertsConfig(version string) string {
	return fmt.Sprintf(`{"peft_type": "LORA", "peft_version": %q, "r": 3, "lora_alpha": 6, "target_modules": ["q_proj"],
		"target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
		"rank_pattern": {"experts.gate_up_proj": 2}}`, version)
}

// TestExperts builds target_parameters adapters for stacked experts in the
// layouts PEFT writes and checks every expert's update against PEFT's.
func TestExperts(t *testing.T) {
	gateUpShape := []int{nExperts, 2 * ffn, hidden}
	downShape := []int{nExperts, hidden, ffn}
	for _, c := range []struct {
		version string
		old     bool // the file holds the pre-0.19.1 layout
		fit     bool // only FitBase can tell the layout
	}{
		{"0.20.0", false, false},
		{"0.19.1", false, false},
		{"0.18.0", true, false},
		{"0.19.0", true, false},
		{"", true, true}, // no peft_version: Load assumes the current layout
	} {
		t.Run(fmt.Sprintf("peft %q old layout %v", c.version, c.old), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(15, uint64(len(c.version))))
			// lora_A's columns and lora_B's rows: (in, out) of the
			// [E, out, in] tensor now, (out, in) before 0.19.1.
			gu := newExpertFactors(rng, 2, 2*ffn, hidden)
			dn := newExpertFactors(rng, 3, hidden, ffn)
			if c.old {
				gu = newExpertFactors(rng, 2, hidden, 2*ffn)
				dn = newExpertFactors(rng, 3, ffn, hidden)
			}
			q, _, _ := linearPair(t, rng, qProj, safetensors.F32, 3, 4, 4)
			// PEFT wraps gate_up_proj first (it is registered first), so
			// down_proj's wrapper is the outer one and gate_up_proj's sits
			// in its base_layer.
			ts := append(gu.tensors(t, experts+".base_layer", safetensors.BF16), dn.tensors(t, experts, safetensors.BF16)...)
			ad, err := Load(writeAdapter(t, expertsConfig(c.version), append(ts, q...)))
			if err != nil {
				t.Fatal(err)
			}
			if len(ad.Modules) != 3 {
				t.Fatalf("%d modules", len(ad.Modules))
			}
			for _, x := range []struct {
				name  string
				f     expertFactors
				shape []int
				scale float64
			}{
				{experts + ".gate_up_proj", gu, gateUpShape, 3},
				{experts + ".down_proj", dn, downShape, 2},
			} {
				m, ok := ad.Module(x.name)
				if !ok {
					t.Fatalf("no module %s", x.name)
				}
				if m.Experts != nExperts || m.Rank != x.f.r || m.Scale != x.scale {
					t.Fatalf("%s: experts %d rank %d scale %v", x.name, m.Experts, m.Rank, m.Scale)
				}
				fits := m.Out == x.shape[1] && m.In == x.shape[2]
				if fits == c.fit {
					t.Fatalf("%s: [%d, %d] (out, in) before FitBase, base %v", x.name, m.Out, m.In, x.shape)
				}
				if err := m.FitBase(x.shape); err != nil {
					t.Fatal(err)
				}
				if m.Out != x.shape[1] || m.In != x.shape[2] || len(m.A) != nExperts*m.Rank*m.In || len(m.B) != nExperts*m.Out*m.Rank {
					t.Fatalf("%s: [%d, %d] (out, in), %d and %d values", x.name, m.Out, m.In, len(m.A), len(m.B))
				}
				sameDelta(t, x.name, moduleDelta(m), peftDelta(x.f, x.scale, c.old))
				if err := m.FitBase(x.shape); err != nil || m.Out != x.shape[1] {
					t.Fatalf("FitBase twice: %v", err)
				}
				wantErr(t, m.FitBase([]int{nExperts + 1, x.shape[1], x.shape[2]}), "experts × [")
				wantErr(t, m.FitBase(x.shape[1:]), "but the base tensor is")
			}
			if ad.MaxRank() != 3 {
				t.Errorf("MaxRank %d", ad.MaxRank())
			}
		})
	}
}

// TestParameterTargets covers target_parameters on a 2-D weight, a single
// stacked tensor, and the errors.
func TestParameterTargets(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const gate = "model.language_model.layers.0.mlp.gate"
	router, a, b := linearPair(t, rng, gate, safetensors.F32, 2, hidden, nExperts)
	ad, err := Load(writeAdapter(t, `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": [], "target_parameters": ["mlp.gate.weight"]}`, router))
	if err != nil {
		t.Fatal(err)
	}
	m := ad.Modules[0]
	if m.Name != gate || m.Experts != 0 || m.In != hidden || m.Out != nExperts || m.Scale != 1 || len(m.A) != len(a) || len(m.B) != len(b) {
		t.Errorf("router module %+v", m)
	}

	dn := newExpertFactors(rng, 2, hidden, ffn)
	one := `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": null, "target_parameters": ["experts.down_proj"]}`
	ad, err = Load(writeAdapter(t, one, dn.tensors(t, experts, safetensors.F16)))
	if err != nil {
		t.Fatal(err)
	}
	if m := ad.Modules[0]; m.Name != experts+".down_proj" || m.Experts != nExperts || m.In != ffn || m.Out != hidden {
		t.Errorf("down_proj module %s experts %d in %d out %d", m.Name, m.Experts, m.In, m.Out)
	}

	allLinear := `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": "all-linear", "target_parameters": ["experts.down_proj"]}`
	q, _, _ := linearPair(t, rng, qProj, safetensors.F32, 2, 4, 4)
	ad, err = Load(writeAdapter(t, allLinear, append(q, dn.tensors(t, experts, safetensors.F16)...)))
	if err != nil || len(ad.Modules) != 2 || ad.Modules[0].Experts != nExperts || ad.Modules[1].Name != qProj {
		t.Fatalf("all-linear with target_parameters: %v", err)
	}

	gu := newExpertFactors(rng, 3, 2*ffn, hidden)
	both := append(gu.tensors(t, experts+".base_layer", safetensors.F32), dn.tensors(t, experts, safetensors.F32)...)
	for _, c := range []struct {
		name, cfg string
		tensors   []safetensors.Tensor
		say       string
	}{
		{"one wrapper for two", expertsConfig("0.20.0"), dn.tensors(t, experts, safetensors.F32),
			"has 1 LoRA wrappers, but target_parameters select 2 of its parameters (gate_up_proj, down_proj)"},
		{"too deep", one, both, "nested 2 deep, but target_parameters select 1"},
		{"unknown order", `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_parameters": ["experts.w1", "experts.w2"]}`, both,
			"cannot tell which nested wrapper"},
		{"rank", `{"peft_type": "LORA", "r": 4, "lora_alpha": 2, "target_parameters": ["experts.down_proj"]}`, dn.tensors(t, experts, safetensors.F32),
			"6 rows, not a multiple of adapter_config.json's rank 4"},
		{"both ways", `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["experts"], "target_parameters": ["experts.down_proj"]}`,
			dn.tensors(t, experts, safetensors.F32), "selected both by target_modules and by target_parameters"},
		{"not targeted", `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q_proj"], "target_parameters": ["shared_expert.down_proj"]}`,
			dn.tensors(t, experts, safetensors.F32), "do not select it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeAdapter(t, c.cfg, c.tensors))
			wantErr(t, err, c.say)
			if !strings.Contains(err.Error(), WeightsFile) {
				t.Errorf("%v does not name the file", err)
			}
		})
	}
}
