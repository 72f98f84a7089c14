package lora

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// The shared fixtures, as testdata/lora/README.md describes them.
var fixtures = []struct {
	dir     string
	r       int
	alpha   float64
	scale   float64
	dtype   safetensors.DType
	modules int
	targets []string
}{
	{"lora-small-a", 8, 16, 2, safetensors.F32, 50,
		[]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv", "in_proj_z", "out_proj"}},
	{"lora-small-b", 4, 4, 1, safetensors.BF16, 28,
		[]string{"in_proj_a", "in_proj_b", "out_proj", "down_proj", "o_proj"}},
}

func TestFixtures(t *testing.T) {
	base, err := safetensors.Open("../testdata/models/small/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	for _, fx := range fixtures {
		t.Run(fx.dir, func(t *testing.T) {
			dir := filepath.Join("../testdata/lora", fx.dir)
			a, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			c := a.Config
			if c.R != fx.r || c.Alpha != fx.alpha || c.UseRSLoRA || c.PeftType != "LORA" || c.BaseModel != "random/small" {
				t.Errorf("config: r %d alpha %v rslora %v type %q base %q", c.R, c.Alpha, c.UseRSLoRA, c.PeftType, c.BaseModel)
			}
			if !slices.Equal(c.TargetModules.Names, fx.targets) || c.TargetModules.Regex != "" {
				t.Errorf("target_modules %q, want %q", c.TargetModules.Names, fx.targets)
			}
			if a.Dir != dir || len(a.Modules) != fx.modules || a.MaxRank() != fx.r {
				t.Errorf("dir %q, %d modules, max rank %d", a.Dir, len(a.Modules), a.MaxRank())
			}

			// The module list the goldens were made with.
			var g struct {
				Adapter struct {
					Modules []string `json:"modules"`
					Scale   float64  `json:"scale"`
					DType   string   `json:"dtype"`
				} `json:"adapter"`
			}
			raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range a.Modules {
				names = append(names, m.Name+".weight")
			}
			if !slices.Equal(names, g.Adapter.Modules) {
				t.Errorf("modules %q,\nwant %q", names, g.Adapter.Modules)
			}
			if g.Adapter.Scale != fx.scale || g.Adapter.DType != string(fx.dtype) {
				t.Fatalf("golden.json says scale %v dtype %s", g.Adapter.Scale, g.Adapter.DType)
			}

			file, err := safetensors.Open(filepath.Join(dir, WeightsFile))
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			var bytes int64
			seen := map[string]bool{}
			for _, m := range a.Modules {
				if m.Rank != fx.r || m.Scale != fx.scale || m.Experts != 0 {
					t.Errorf("%s: rank %d scale %v experts %d", m.Name, m.Rank, m.Scale, m.Experts)
				}
				info, ok := base.Info(m.Name + ".weight")
				if !ok {
					t.Fatalf("%s is not a module of models/small", m.Name)
				}
				if err := m.FitBase(info.Shape); err != nil {
					t.Error(err)
				}
				seen[m.Name[strings.LastIndexByte(m.Name, '.')+1:]] = true
				// A and B are the file's values, decoded here on their own.
				for _, f := range []struct {
					suffix string
					got    []float32
					shape  []int
				}{{".lora_A.weight", m.A, []int{m.Rank, m.In}}, {".lora_B.weight", m.B, []int{m.Out, m.Rank}}} {
					ft, ok := file.Tensor("base_model.model." + m.Name + f.suffix)
					if !ok || ft.DType != fx.dtype || !slices.Equal(ft.Shape, f.shape) {
						t.Fatalf("%s%s: %v %s %v", m.Name, f.suffix, ok, ft.DType, ft.Shape)
					}
					want := decode(t, ft)
					if len(want) != len(f.got) {
						t.Fatalf("%s%s: %d values, want %d", m.Name, f.suffix, len(f.got), len(want))
					}
					for i := range want {
						if math.Float32bits(want[i]) != math.Float32bits(f.got[i]) {
							t.Fatalf("%s%s[%d] = %v, file has %v", m.Name, f.suffix, i, f.got[i], want[i])
						}
					}
					bytes += 4 * int64(len(want))
				}
				if got, ok := a.Module(m.Name); !ok || got.Name != m.Name {
					t.Errorf("Module(%q) = %v, %v", m.Name, got, ok)
				}
			}
			if a.Bytes() != bytes {
				t.Errorf("Bytes() = %d, want %d", a.Bytes(), bytes)
			}
			for _, tg := range fx.targets {
				if !seen[tg] {
					t.Errorf("no module for target %s", tg)
				}
			}
			if _, ok := a.Module(qProj + "x"); ok {
				t.Error("Module found a name the adapter lacks")
			}
		})
	}
}

// decode reads an F32 or BF16 tensor's bytes without the safetensors
// package's converters.
func decode(t *testing.T, x safetensors.Tensor) []float32 {
	t.Helper()
	switch x.DType {
	case safetensors.F32:
		out := make([]float32, len(x.Data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
		}
		return out
	case safetensors.BF16:
		out := make([]float32, len(x.Data)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(x.Data[2*i:])) << 16)
		}
		return out
	}
	t.Fatalf("decode: dtype %s", x.DType)
	return nil
}

func TestDTypesExact(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16} {
		rng := rand.New(rand.NewPCG(3, uint64(len(dt))))
		ts, a, b := linearPair(t, rng, qProj, dt, 2, 7, 3)
		ad, err := Load(writeAdapter(t, configJSON(t, nil), ts))
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		m := ad.Modules[0]
		if !slices.Equal(m.A, a) || !slices.Equal(m.B, b) || m.In != 7 || m.Out != 3 || m.Rank != 2 || m.Scale != 2 {
			t.Errorf("%s: module %+v", dt, m)
		}
	}
}

// TestNames covers the tensor-name forms: with PEFT's adapter-name segment,
// without the base_model.model. prefix.
func TestNames(t *testing.T) {
	ts := qAdapter(t)
	t.Run("adapter segment", func(t *testing.T) {
		renamed := []safetensors.Tensor{ts[0], ts[1]}
		renamed[0].Name = strings.Replace(ts[0].Name, "lora_A.weight", "lora_A.default.weight", 1)
		renamed[1].Name = strings.Replace(ts[1].Name, "lora_B.weight", "lora_B.default.weight", 1)
		a, err := Load(writeAdapter(t, configJSON(t, nil), renamed))
		if err != nil || a.Modules[0].Name != qProj {
			t.Fatalf("%v %+v", err, a)
		}
		renamed[1].Name = strings.Replace(ts[1].Name, "lora_B.weight", "lora_B.other.weight", 1)
		_, err = Load(writeAdapter(t, configJSON(t, nil), renamed))
		wantErr(t, err, "mixes adapter-name segments")
	})
	t.Run("no prefix", func(t *testing.T) {
		bare := []safetensors.Tensor{ts[0], ts[1]}
		bare[0].Name = strings.TrimPrefix(ts[0].Name, "base_model.model.")
		bare[1].Name = strings.TrimPrefix(ts[1].Name, "base_model.model.")
		a, err := Load(writeAdapter(t, configJSON(t, nil), bare))
		if err != nil || a.Modules[0].Name != qProj {
			t.Fatalf("%v %+v", err, a)
		}
		_, err = Load(writeAdapter(t, configJSON(t, nil), append(bare, ts[0])))
		wantErr(t, err, "are the same LoRA factor")
	})
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", substr)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not say %q", err, substr)
	}
}

// TestRefusals checks that what govinfer cannot apply is refused with an
// error naming it, matching ErrUnsupported.
func TestRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	q := qAdapter(t)
	extra := func(name string, shape []int) []safetensors.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return append(slices.Clone(q), tensor(t, name, safetensors.F32, shape, exactValues(rng, n)))
	}
	emb, _, _ := linearPair(t, rng, "model.language_model.embed_tokens", safetensors.F32, 2, 4, 4)
	emb[0].Name = strings.Replace(emb[0].Name, "lora_A.weight", "lora_embedding_A", 1)
	emb[1].Name = strings.Replace(emb[1].Name, "lora_B.weight", "lora_embedding_B", 1)
	vis, _, _ := linearPair(t, rng, "model.visual.blocks.0.attn.qkv", safetensors.F32, 2, 4, 4)
	cases := []struct {
		name    string
		over    map[string]any
		tensors []safetensors.Tensor
		say     string
	}{
		{"peft type", map[string]any{"peft_type": "IA3"}, q, `PEFT type "IA3"`},
		{"dora", map[string]any{"use_dora": true}, q, "DoRA (use_dora)"},
		{"dora tensor", nil, extra("base_model.model."+qProj+".lora_magnitude_vector", []int{5}), "DoRA"},
		{"modules_to_save", map[string]any{"modules_to_save": []string{"lm_head"}}, q, "modules_to_save"},
		{"modules_to_save tensor", nil, extra("base_model.model.lm_head.modules_to_save.weight", []int{4, 6}), "modules_to_save"},
		{"full weight", nil, extra("base_model.model.model.language_model.embed_tokens.weight", []int{4, 6}), "full weights"},
		{"embedding", map[string]any{"target_modules": []string{"q_proj", "embed_tokens"}}, append(slices.Clone(q), emb...), "LoRA on embeddings"},
		{"bias all", map[string]any{"bias": "all"}, q, `bias "all"`},
		{"bias lora_only", map[string]any{"bias": "lora_only"}, q, `bias "lora_only"`},
		{"bias tensor", nil, extra("base_model.model."+qProj+".bias", []int{5}), "trained biases"},
		{"lora_bias", map[string]any{"lora_bias": true}, q, "lora_bias"},
		{"lora_bias tensor", nil, extra("base_model.model."+qProj+".lora_B.bias", []int{5}), "lora_bias"},
		{"vision", map[string]any{"target_modules": []string{"q_proj", "qkv"}}, append(slices.Clone(q), vis...), "LoRA on the vision tower"},
		{"fan_in_fan_out experts", map[string]any{"fan_in_fan_out": true, "target_parameters": []string{"mlp.experts.down_proj"}}, q, "fan_in_fan_out with target_parameters"},
		{"pissa", map[string]any{"init_lora_weights": "pissa_niter_4"}, q, `init_lora_weights "pissa_niter_4"`},
		{"olora", map[string]any{"init_lora_weights": "olora"}, q, `init_lora_weights "olora"`},
		{"corda", map[string]any{"init_lora_weights": "corda"}, q, `init_lora_weights "corda"`},
		{"loftq", map[string]any{"init_lora_weights": "loftq"}, q, `init_lora_weights "loftq"`},
		{"lora_ga", map[string]any{"init_lora_weights": "lora_ga"}, q, `init_lora_weights "lora_ga"`},
		{"qalora", map[string]any{"use_qalora": true}, q, "QALoRA"},
		{"alora", map[string]any{"alora_invocation_tokens": []int{1, 2}}, q, "aLoRA"},
		{"bdlora", map[string]any{"use_bdlora": map[string]any{"nblocks": 2}}, q, "BD-LoRA"},
		{"arrow", map[string]any{"arrow_config": map[string]any{"top_k": 2}}, q, "Arrow"},
		{"kasa", map[string]any{"kasa_config": map[string]any{}}, q, "KaSA"},
		{"kasa tensor", nil, extra("base_model.model."+qProj+".lora_diag", []int{2}), "KaSA"},
		{"monteclora", map[string]any{"monteclora_config": map[string]any{}}, q, "MonteCLoRA"},
		{"layer_replication", map[string]any{"layer_replication": [][]int{{0, 2}, {1, 3}}}, q, "layer_replication"},
		{"trainable tokens", map[string]any{"trainable_token_indices": []int{3}}, q, "trainable_token_indices"},
		{"trainable tokens tensor", nil, extra("base_model.model.model.language_model.embed_tokens.token_adapter.trainable_tokens_delta", []int{1, 6}), "trainable_token_indices"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeAdapter(t, configJSON(t, c.over), c.tensors))
			wantErr(t, err, "govinfer cannot apply "+c.say)
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%v does not match ErrUnsupported", err)
			}
		})
	}
}

// TestAccepted covers config values PEFT writes that do not change the
// numbers: fan_in_fan_out on linears (PEFT resets it for nn.Linear), the
// initialisations that leave the base alone, MiCA, VeLoRA.
func TestAccepted(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ts, a, b := linearPair(t, rng, qProj, safetensors.F32, 2, 6, 5)
	velora := append(slices.Clone(ts), tensor(t, "base_model.model."+qProj+".lora_velora_embed", safetensors.F32, []int{3}, []float32{1, 0, 0}))
	for _, c := range []struct {
		name    string
		over    map[string]any
		tensors []safetensors.Tensor
	}{
		{"fan_in_fan_out", map[string]any{"fan_in_fan_out": true}, ts},
		{"init false", map[string]any{"init_lora_weights": false}, ts},
		{"gaussian", map[string]any{"init_lora_weights": "gaussian"}, ts},
		{"eva", map[string]any{"init_lora_weights": "eva", "eva_config": map[string]any{"rho": 2}}, ts},
		{"mica", map[string]any{"init_lora_weights": "mica"}, ts},
		{"velora", map[string]any{"velora_config": map[string]any{"num_groups": 3}}, velora},
		{"false variants", map[string]any{"lora_bias": false, "use_qalora": false, "alora_invocation_tokens": nil, "trainable_token_indices": nil}, ts},
		{"no optional keys", map[string]any{"rank_pattern": drop, "alpha_pattern": drop, "bias": drop, "use_dora": drop, "peft_version": drop, "init_lora_weights": drop}, ts},
		{"unknown keys", map[string]any{"future_option": map[string]any{"x": 1}}, ts},
	} {
		t.Run(c.name, func(t *testing.T) {
			ad, err := Load(writeAdapter(t, configJSON(t, c.over), c.tensors))
			if err != nil {
				t.Fatal(err)
			}
			m := ad.Modules[0]
			if len(ad.Modules) != 1 || !slices.Equal(m.A, a) || !slices.Equal(m.B, b) || m.Scale != 2 {
				t.Fatalf("modules %+v", ad.Modules)
			}
		})
	}
}

// TestBadInput covers malformed adapters: each gives an error naming the
// file and what is wrong, never a panic.
func TestBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	q := qAdapter(t)
	good := configJSON(t, nil)
	fixture, err := os.ReadFile("../testdata/lora/lora-small-b/" + WeightsFile)
	if err != nil {
		t.Fatal(err)
	}
	fixtureCfg, err := os.ReadFile("../testdata/lora/lora-small-b/" + ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	withFile := func(t *testing.T, cfg []byte, st []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, WeightsFile), st, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("missing dir", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "nope"))
		wantErr(t, err, "nope")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v is not ErrNotExist", err)
		}
	})
	t.Run("a file", func(t *testing.T) {
		_, err := Load("../testdata/lora/lora-small-b/" + ConfigFile)
		wantErr(t, err, "is not a directory")
	})
	t.Run("missing config", func(t *testing.T) {
		dir := writeAdapter(t, good, q)
		os.Remove(filepath.Join(dir, ConfigFile))
		_, err := Load(dir)
		wantErr(t, err, ConfigFile)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v is not ErrNotExist", err)
		}
	})
	t.Run("missing weights", func(t *testing.T) {
		_, err := Load(writeAdapter(t, good, nil))
		wantErr(t, err, WeightsFile)
	})
	t.Run("pickle", func(t *testing.T) {
		dir := writeAdapter(t, good, nil)
		os.WriteFile(filepath.Join(dir, "adapter_model.bin"), []byte("PK"), 0o644)
		_, err := Load(dir)
		wantErr(t, err, "adapter_model.bin")
	})
	t.Run("truncated", func(t *testing.T) {
		_, err := Load(withFile(t, fixtureCfg, fixture[:len(fixture)-100]))
		wantErr(t, err, "truncated")
		if !errors.Is(err, safetensors.ErrInvalid) {
			t.Errorf("%v is not safetensors.ErrInvalid", err)
		}
		_, err = Load(withFile(t, fixtureCfg, fixture[:5]))
		wantErr(t, err, WeightsFile)
	})
	t.Run("corrupt header", func(t *testing.T) {
		bad := slices.Clone(fixture)
		copy(bad[8:], "[nonsense")
		_, err := Load(withFile(t, fixtureCfg, bad))
		wantErr(t, err, WeightsFile)
	})
	configCases := []struct {
		name, cfg, say string
	}{
		{"not json", "{r: 8", "not JSON"},
		{"not an object", "[1, 2]", "not a JSON object"},
		{"empty", "", "not JSON"},
		{"no peft_type", configJSON(t, map[string]any{"peft_type": drop}), "peft_type is missing"},
		{"no r", configJSON(t, map[string]any{"r": drop}), "r is missing"},
		{"r string", configJSON(t, map[string]any{"r": "8"}), "r must be a number"},
		{"r fraction", configJSON(t, map[string]any{"r": 2.5}), "r must be an integer"},
		{"r zero", configJSON(t, map[string]any{"r": 0}), "r must be a positive integer"},
		{"no alpha", configJSON(t, map[string]any{"lora_alpha": drop}), "lora_alpha is missing"},
		{"alpha bool", configJSON(t, map[string]any{"lora_alpha": true}), "lora_alpha must be a number"},
		{"targets number", configJSON(t, map[string]any{"target_modules": 3}), "target_modules must be a list"},
		{"targets list of numbers", configJSON(t, map[string]any{"target_modules": []int{3}}), "target_modules[0] must be a string"},
		{"no targets", configJSON(t, map[string]any{"target_modules": drop}), "target_modules is missing"},
		{"bad regex", configJSON(t, map[string]any{"target_modules": `.*(?=q_proj)`}), "not a regular expression govinfer can read"},
		{"regex with layers", configJSON(t, map[string]any{"target_modules": `.*q_proj`, "layers_to_transform": []int{0}}), "cannot be used with a regular expression"},
		{"pattern without layers", configJSON(t, map[string]any{"layers_pattern": "layers"}), "layers_pattern needs layers_to_transform"},
		{"rank_pattern value", `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"rank_pattern":{"q_proj":"x"}}`, `rank_pattern["q_proj"]`},
		{"rank_pattern zero", `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"rank_pattern":{"q_proj":0}}`, "positive integer"},
		{"rank_pattern regex", `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"rank_pattern":{"(?<=x)q":4}}`, "rank_pattern: key"},
		{"alpha_pattern value", `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"alpha_pattern":{"q_proj":[1]}}`, `alpha_pattern["q_proj"]`},
		{"target_parameters string", configJSON(t, map[string]any{"target_parameters": "mlp.experts.down_proj"}), "target_parameters must be a list"},
		{"init weights number", configJSON(t, map[string]any{"init_lora_weights": 3}), "init_lora_weights must be a boolean or a string"},
		{"bool field", configJSON(t, map[string]any{"use_rslora": "yes"}), "use_rslora must be a boolean"},
	}
	for _, c := range configCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeAdapter(t, c.cfg, q))
			wantErr(t, err, ConfigFile)
			wantErr(t, err, c.say)
		})
	}
	t.Run("config too large", func(t *testing.T) {
		big := make([]byte, MaxConfigSize+10)
		_, err := Load(withFile(t, big, fixture))
		wantErr(t, err, "over the")
	})

	tensorCases := []struct {
		name    string
		over    map[string]any
		tensors func() []safetensors.Tensor
		say     string
	}{
		{"no factors", nil, func() []safetensors.Tensor { return []safetensors.Tensor{} }, "no LoRA factors"},
		{"missing B", nil, func() []safetensors.Tensor { return q[:1] }, "has no lora_B beside it"},
		{"missing A", nil, func() []safetensors.Tensor { return q[1:] }, "has no lora_A beside it"},
		{"rank disagrees with config", map[string]any{"r": 4}, func() []safetensors.Tensor { return q }, "has rank 2, but adapter_config.json gives " + qProj + " rank 4"},
		{"A and B disagree", nil, func() []safetensors.Tensor {
			return []safetensors.Tensor{q[0], tensor(t, q[1].Name, safetensors.F32, []int{5, 3}, exactValues(rng, 15))}
		}, "disagree on the rank"},
		{"3-D factor", nil, func() []safetensors.Tensor {
			return []safetensors.Tensor{tensor(t, q[0].Name, safetensors.F32, []int{2, 3, 2}, exactValues(rng, 12)), q[1]}
		}, "a LoRA factor is a non-empty matrix"},
		{"empty factor", nil, func() []safetensors.Tensor {
			return []safetensors.Tensor{tensor(t, q[0].Name, safetensors.F32, []int{2, 0}, nil), q[1]}
		}, "a LoRA factor is a non-empty matrix"},
		{"F64", nil, func() []safetensors.Tensor {
			x := q[0]
			x.DType = safetensors.F64
			x.Data = make([]byte, 2*len(q[0].Data))
			return []safetensors.Tensor{x, q[1]}
		}, "must be F32, BF16 or F16"},
		{"NaN", nil, func() []safetensors.Tensor {
			v := exactValues(rng, 12)
			v[7] = float32(math.NaN())
			return []safetensors.Tensor{tensor(t, q[0].Name, safetensors.F32, []int{2, 6}, v), q[1]}
		}, "element 7 is NaN"},
		{"Inf", nil, func() []safetensors.Tensor {
			v := exactValues(rng, 10)
			v[9] = float32(math.Inf(-1))
			return []safetensors.Tensor{q[0], tensor(t, q[1].Name, safetensors.BF16, []int{5, 2}, v)}
		}, "element 9 is -Inf"},
		{"not a target", map[string]any{"target_modules": []string{"k_proj", "v_proj"}}, func() []safetensors.Tensor { return q }, `module "` + qProj + `" has LoRA factors, but adapter_config.json's target_modules [k_proj v_proj] do not select it`},
		{"unknown tensor", nil, func() []safetensors.Tensor {
			return append(slices.Clone(q), tensor(t, "base_model.model.model.something", safetensors.F32, []int{1}, []float32{1}))
		}, `"base_model.model.model.something" is not a LoRA factor`},
		{"bad module name", nil, func() []safetensors.Tensor {
			x := []safetensors.Tensor{q[0], q[1]}
			x[0].Name, x[1].Name = "base_model.model..lora_A.weight", "base_model.model..lora_B.weight"
			return x
		}, "is not a module name"},
		{"nested without target_parameters", nil, func() []safetensors.Tensor {
			x := []safetensors.Tensor{q[0], q[1]}
			x[0].Name = strings.Replace(x[0].Name, ".lora_A", ".base_layer.lora_A", 1)
			x[1].Name = strings.Replace(x[1].Name, ".lora_B", ".base_layer.lora_B", 1)
			return x
		}, "target_parameters select no parameter of it"},
	}
	t.Run("long names", func(t *testing.T) {
		long := strings.Repeat("x", 5000)
		_, err := Load(writeAdapter(t, configJSON(t, nil), append(slices.Clone(q), tensor(t, long, safetensors.F32, []int{1}, []float32{1}))))
		wantErr(t, err, "a 5000-byte name")
		_, err = Load(writeAdapter(t, configJSON(t, map[string]any{"target_modules": long + "("}), q))
		wantErr(t, err, "is not a regular expression")
		if len(err.Error()) > 1000 {
			t.Errorf("a %d-byte error", len(err.Error()))
		}
		_, err = Load(writeAdapter(t, configJSON(t, map[string]any{"target_modules": []string{long}}), q))
		wantErr(t, err, "do not select it")
		if len(err.Error()) > 1000 {
			t.Errorf("a %d-byte error", len(err.Error()))
		}
	})
	for _, c := range tensorCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeAdapter(t, configJSON(t, c.over), c.tensors()))
			wantErr(t, err, WeightsFile)
			wantErr(t, err, c.say)
		})
	}
}

func TestFitBase(t *testing.T) {
	a, err := Load(writeAdapter(t, configJSON(t, nil), qAdapter(t)))
	if err != nil {
		t.Fatal(err)
	}
	m := &a.Modules[0]
	if err := m.FitBase([]int{5, 6}); err != nil {
		t.Error(err)
	}
	for _, shape := range [][]int{{6, 5}, {5, 7}, {5}, {1, 5, 6}} {
		err := m.FitBase(shape)
		wantErr(t, err, "but the base tensor is")
	}
}
