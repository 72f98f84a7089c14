package quant

import (
	"strconv"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	lm := "model.language_model."
	cases := []struct {
		name       string
		rows, cols int
		q80, q4km  Type
		fallback   bool // the q4_k_m choice is a fallback
	}{
		{lm + "embed_tokens.weight", 248320, 4096, Q8_0, Q6_K, false},
		{"lm_head.weight", 248320, 4096, Q8_0, Q6_K, false},
		{lm + "norm.weight", 1, 4096, Keep, Keep, false},
		{lm + "layers.0.input_layernorm.weight", 1, 4096, Keep, Keep, false},
		{lm + "layers.0.post_attention_layernorm.weight", 1, 4096, Keep, Keep, false},
		{lm + "layers.0.linear_attn.in_proj_qkv.weight", 8192, 4096, Q8_0, Q6_K, false},
		{lm + "layers.0.linear_attn.in_proj_z.weight", 4096, 4096, Q8_0, Q6_K, false},
		{lm + "layers.0.linear_attn.in_proj_a.weight", 32, 4096, Q8_0, Keep, false},
		{lm + "layers.0.linear_attn.in_proj_b.weight", 32, 4096, Q8_0, Keep, false},
		{lm + "layers.0.linear_attn.conv1d.weight", 8192, 4, Keep, Keep, false},
		{lm + "layers.0.linear_attn.A_log", 1, 32, Keep, Keep, false},
		{lm + "layers.0.linear_attn.dt_bias", 1, 32, Keep, Keep, false},
		{lm + "layers.0.linear_attn.norm.weight", 1, 128, Keep, Keep, false},
		{lm + "layers.3.linear_attn.out_proj.weight", 4096, 4096, Q8_0, Q8_0, false},
		{lm + "layers.3.self_attn.q_proj.weight", 8192, 4096, Q8_0, Q6_K, false},
		{lm + "layers.3.self_attn.k_proj.weight", 1024, 4096, Q8_0, Q6_K, false},
		{lm + "layers.3.self_attn.v_proj.weight", 1024, 4096, Q8_0, Q6_K, false},
		{lm + "layers.3.self_attn.o_proj.weight", 4096, 4096, Q8_0, Q6_K, false},
		{lm + "layers.3.self_attn.q_norm.weight", 1, 256, Keep, Keep, false},
		{lm + "layers.3.self_attn.k_norm.weight", 1, 256, Keep, Keep, false},
		{lm + "layers.5.mlp.gate_proj.weight", 12288, 4096, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.up_proj.weight", 12288, 4096, Q8_0, Q4_K, false},
		// down_proj: Q6_K in layers 0-3, 6, 9, ..., 27, 28-31 of 32.
		{lm + "layers.0.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{lm + "layers.3.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{lm + "layers.4.mlp.down_proj.weight", 4096, 12288, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.down_proj.weight", 4096, 12288, Q8_0, Q4_K, false},
		{lm + "layers.6.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{lm + "layers.26.mlp.down_proj.weight", 4096, 12288, Q8_0, Q4_K, false},
		{lm + "layers.27.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{lm + "layers.28.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{lm + "layers.31.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		// The text-only prefix.
		{"model.layers.3.mlp.down_proj.weight", 4096, 12288, Q8_0, Q6_K, false},
		{"model.layers.3.linear_attn.out_proj.weight", 4096, 4096, Q8_0, Q8_0, false},
		{"model.embed_tokens.weight", 248320, 4096, Q8_0, Q6_K, false},
		// Fallbacks: rows of 4096+32 values fit Q8_0 but not the K-quants;
		// rows of 100 values fit nothing.
		{lm + "layers.5.mlp.gate_proj.weight", 12288, 4128, Q8_0, Q8_0, true},
		{lm + "layers.0.mlp.down_proj.weight", 4096, 4128, Q8_0, Q8_0, true},
		{"lm_head.weight", 248320, 4128, Q8_0, Q8_0, true},
		{lm + "layers.5.mlp.up_proj.weight", 12288, 100, Keep, Keep, true},
		{lm + "layers.3.linear_attn.out_proj.weight", 4096, 100, Keep, Keep, true},
		// A mixture of experts (qwen3_5_moe, 40 layers as the 35B-A3B;
		// use_more_bits layers 0-4, 7, 10, ..., 34, 35-39), its
		// experts under each name the model binds them by.
		{lm + "layers.5.mlp.gate.weight", 256, 2048, Keep, Keep, false},
		{lm + "layers.5.mlp.shared_expert_gate.weight", 1, 2048, Keep, Keep, false},
		{lm + "layers.5.mlp.shared_expert.gate_proj.weight", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.shared_expert.up_proj.weight", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.shared_expert.down_proj.weight", 2048, 512, Q8_0, Q4_K, false},
		{lm + "layers.4.mlp.shared_expert.down_proj.weight", 2048, 512, Q8_0, Q6_K, false},
		{lm + "layers.5.mlp.experts.gate_up_proj", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.experts.gate_proj", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.experts.up_proj", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.experts.17.gate_proj.weight", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.experts.255.up_proj.weight", 512, 2048, Q8_0, Q4_K, false},
		{lm + "layers.5.mlp.experts.down_proj", 2048, 512, Q8_0, Q4_K, false},
		{lm + "layers.7.mlp.experts.down_proj", 2048, 512, Q8_0, Q6_K, false},
		{lm + "layers.39.mlp.experts.0.down_proj.weight", 2048, 512, Q8_0, Q6_K, false},
		{lm + "layers.6.mlp.experts.3.down_proj.weight", 2048, 512, Q8_0, Q4_K, false},
		{"model.layers.0.mlp.experts.down_proj", 2048, 512, Q8_0, Q6_K, false},
		{"model.layers.5.mlp.experts.gate_proj", 512, 2048, Q8_0, Q4_K, false},
		// An expert width no K-quant block divides (moe-tiny's 32).
		{lm + "layers.5.mlp.experts.down_proj", 64, 32, Q8_0, Q8_0, true},
		{lm + "layers.5.mlp.experts.1.down_proj.weight", 64, 48, Keep, Keep, true},
		// Not text-model tensors.
		{"model.visual.blocks.0.attn.qkv.weight", 3456, 1152, Keep, Keep, false},
		{"mtp.fc.weight", 4096, 8192, Keep, Keep, false},
		{"mtp.layers.0.self_attn.q_proj.weight", 8192, 4096, Keep, Keep, false},
		{lm + "layers.x.mlp.up_proj.weight", 12288, 4096, Keep, Keep, false},
		{lm + "layers.01.mlp.up_proj.weight", 12288, 4096, Keep, Keep, false},
		{lm + "layers.1.mlp.experts.weight", 12288, 4096, Keep, Keep, false},
		{lm + "layers.1.mlp.experts.01.gate_proj.weight", 512, 2048, Keep, Keep, false},
		{lm + "layers.1.mlp.experts.x.gate_proj.weight", 512, 2048, Keep, Keep, false},
		{lm + "layers.1.mlp.experts.1.gate_up_proj", 512, 2048, Keep, Keep, false},
		{lm + "layers.1.mlp.experts.gate_up_proj.weight", 512, 2048, Keep, Keep, false},
		{lm + "layers.1.mlp.gate_inp.weight", 256, 2048, Keep, Keep, false},
		{"model.language_model.language_model.norm.weight", 1, 4096, Keep, Keep, false},
	}
	for _, c := range cases {
		q5km := c.q4km // q5_k_m is q4_k_m with Q5_K for Q4_K
		if q5km == Q4_K {
			q5km = Q5_K
		}
		for _, m := range []struct {
			mix  string
			want Type
		}{{MixQ8_0, c.q80}, {MixQ4KM, c.q4km}, {MixQ5KM, q5km}} {
			t.Run(m.mix+"/"+c.name, func(t *testing.T) {
				layers := 32 // Qwen3.5-9B's
				if strings.Contains(c.name, "mlp.experts") || strings.Contains(c.name, "mlp.shared_expert") {
					layers = 40 // Qwen3.5-35B-A3B's
				}
				got, why, err := Plan(m.mix, c.name, c.rows, c.cols, layers)
				if err != nil {
					t.Fatal(err)
				}
				if got != m.want {
					t.Errorf("Plan(%q, %q, %d, %d) = %v (%s), want %v", m.mix, c.name, c.rows, c.cols, got, why, m.want)
				}
				if why == "" {
					t.Error("no reason given")
				}
				if fb := strings.Contains(why, "not whole"); m.mix != MixQ8_0 && fb != c.fallback {
					t.Errorf("reason %q: fallback %v, want %v", why, fb, c.fallback)
				}
				if got != Keep && !got.Fits(c.cols) {
					t.Errorf("%v chosen for rows of %d values", got, c.cols)
				}
			})
		}
	}
}

func TestPlanErrors(t *testing.T) {
	if _, _, err := Plan("q4_k_s", "lm_head.weight", 10, 256, 4); err == nil {
		t.Error("unknown mix: no error")
	}
	if _, _, err := Plan(MixQ4KM, "model.layers.4.mlp.down_proj.weight", 256, 768, 4); err == nil {
		t.Error("layer 4 of 4: no error")
	}
	if got, why, err := Plan(MixQ8_0, "lm_head.weight", 0, 256, 4); err != nil || got != Keep || !strings.Contains(why, "empty") {
		t.Errorf("empty lm_head: %v (%s), %v; want kept", got, why, err)
	}
	if got, _, err := Plan(MixQ4KM, "model.layers.3.mlp.down_proj.weight", 256, 768, 4); err != nil || got != Q6_K {
		t.Errorf("layer 3 of 4: %v, %v; want Q6_K", got, err)
	}
}

// TestUseMoreBits pins the down_proj layers for the Qwen3.5 sizes.
func TestUseMoreBits(t *testing.T) {
	for _, c := range []struct {
		layers int
		want   string
	}{
		{32, "0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31"},
		{24, "0 1 2 5 8 11 14 17 20 21 22 23"},
		{4, "2 3"},
	} {
		var got []string
		for i := range c.layers {
			if useMoreBits(i, c.layers) {
				got = append(got, strconv.Itoa(i))
			}
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("%d layers: Q6_K down_proj in %s, want %s", c.layers, s, c.want)
		}
	}
}

// ggufToHF maps the GGUF tensor names of a qwen35 file to Hugging Face names.
func ggufToHF(name string) (string, bool) {
	switch name {
	case "token_embd.weight":
		return "model.language_model.embed_tokens.weight", true
	case "output.weight":
		return "lm_head.weight", true
	case "output_norm.weight":
		return "model.language_model.norm.weight", true
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return "", false
	}
	n, sub, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	hf, ok := map[string]string{
		"attn_norm.weight":           "input_layernorm.weight",
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"ffn_gate.weight":            "mlp.gate_proj.weight",
		"ffn_up.weight":              "mlp.up_proj.weight",
		"ffn_down.weight":            "mlp.down_proj.weight",
		"attn_qkv.weight":            "linear_attn.in_proj_qkv.weight",
		"attn_gate.weight":           "linear_attn.in_proj_z.weight",
		"ssm_alpha.weight":           "linear_attn.in_proj_a.weight",
		"ssm_beta.weight":            "linear_attn.in_proj_b.weight",
		"ssm_conv1d.weight":          "linear_attn.conv1d.weight",
		"ssm_dt.bias":                "linear_attn.dt_bias",
		"ssm_a":                      "linear_attn.A_log",
		"ssm_norm.weight":            "linear_attn.norm.weight",
		"ssm_out.weight":             "linear_attn.out_proj.weight",
		"attn_q.weight":              "self_attn.q_proj.weight",
		"attn_k.weight":              "self_attn.k_proj.weight",
		"attn_v.weight":              "self_attn.v_proj.weight",
		"attn_output.weight":         "self_attn.o_proj.weight",
		"attn_q_norm.weight":         "self_attn.q_norm.weight",
		"attn_k_norm.weight":         "self_attn.k_norm.weight",
		"ffn_gate_inp.weight":        "mlp.gate.weight",
		"ffn_gate_inp_shexp.weight":  "mlp.shared_expert_gate.weight",
		"ffn_gate_shexp.weight":      "mlp.shared_expert.gate_proj.weight",
		"ffn_up_shexp.weight":        "mlp.shared_expert.up_proj.weight",
		"ffn_down_shexp.weight":      "mlp.shared_expert.down_proj.weight",
		"ffn_gate_exps.weight":       "mlp.experts.gate_proj",
		"ffn_up_exps.weight":         "mlp.experts.up_proj",
		"ffn_down_exps.weight":       "mlp.experts.down_proj",
	}[sub]
	return "model.language_model.layers." + n + "." + hf, ok
}

// TestPlanQ8_0MatchesLlamaCpp checks the q8_0 mix against the tensor types
// of llama.cpp's own Q8_0 files, dense and mixture of experts: Q8_0 where
// llama-quantize wrote Q8_0, kept where it kept the converter's type. It
// logs the q4_k_m mix beside llama.cpp's Q4_K_M for comparison (they
// differ by design, but for the MoE tensors: TestPlanMoEMatchesLlamaCpp).
func TestPlanQ8_0MatchesLlamaCpp(t *testing.T) {
	for _, model := range []string{"ksmall", "kmoe"} {
		q8 := openGGUF(t, model+"-q8_0.gguf")
		q4 := openGGUF(t, model+"-q4_k_m.gguf")
		const layers = 4
		for _, ten := range q8.tensors {
			hf, ok := ggufToHF(ten.name)
			if !ok {
				t.Errorf("GGUF tensor %s: no Hugging Face name known", ten.name)
				continue
			}
			want, quantized := TypeFromGGML(ten.typ)
			if !quantized {
				want = Keep
			}
			got, why, err := Plan(MixQ8_0, hf, ten.rows(), ten.cols(), layers)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s %s (%s): Plan q8_0 = %v (%s), llama.cpp wrote %v", model, ten.name, hf, got, why, want)
			}
			ours, _, err := Plan(MixQ4KM, hf, ten.rows(), ten.cols(), layers)
			if err != nil {
				t.Fatal(err)
			}
			theirs, ok := TypeFromGGML(q4.byName[ten.name].typ)
			if !ok {
				theirs = Keep
			}
			t.Logf("%s %-28s q8_0 %-4v | q4_k_m: govinfer %-4v llama.cpp %v", model, ten.name, got, ours, theirs)
		}
	}
}

// TestPlanMoEMatchesLlamaCpp checks the q4_k_m mix of a mixture of
// experts' tensors (router, shared expert gate, experts, shared expert)
// against llama-quantize's Q4_K_M of kmoe: the same type for each (Q6_K
// down projections in the use_more_bits layers 2 and 3 of 4, the router
// and gate kept), and q5_k_m with Q5_K for Q4_K as llama.cpp's Q5_K_M.
func TestPlanMoEMatchesLlamaCpp(t *testing.T) {
	q4 := openGGUF(t, "kmoe-q4_k_m.gguf")
	const layers = 4
	n := 0
	for _, ten := range q4.tensors {
		if !strings.Contains(ten.name, "ffn_") {
			continue
		}
		hf, ok := ggufToHF(ten.name)
		if !ok {
			t.Fatalf("GGUF tensor %s: no Hugging Face name known", ten.name)
		}
		want, quantized := TypeFromGGML(ten.typ)
		if !quantized {
			want = Keep
		}
		n++
		for _, mix := range []string{MixQ4KM, MixQ5KM} {
			if mix == MixQ5KM && want == Q4_K {
				want = Q5_K
			}
			got, why, err := Plan(mix, hf, ten.rows(), ten.cols(), layers)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s (%s): Plan %s = %v (%s), llama.cpp's Q4_K_M %v", ten.name, hf, mix, got, why, want)
			}
		}
	}
	if n != 4*8 {
		t.Errorf("%d MoE tensors, want 32", n)
	}
}
