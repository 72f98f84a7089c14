package quant

import (
	"fmt"
	"strconv"
	"strings"
)

// The tensor mixes: which format each tensor of a Qwen3.5 checkpoint gets.
const (
	// MixQ8_0 is llama.cpp's Q8_0 file: every 2-D weight matrix in Q8_0
	// (embeddings, lm_head and in_proj_a/in_proj_b included) except the
	// linear-attention conv1d; norms, A_log and dt_bias as stored.
	MixQ8_0 = "q8_0"
	// MixQ4KM is govinfer's own 4-bit mix, named after llama.cpp's Q4_K_M
	// but not the same; see Plan.
	MixQ4KM = "q4_k_m"
	// MixQ5KM is MixQ4KM with Q5_K wherever that has Q4_K (as llama.cpp's
	// Q5_K_M is its Q4_K_M with Q5_K for Q4_K).
	MixQ5KM = "q5_k_m"
)

// Mixes returns the mixes Plan knows.
func Mixes() []string { return []string{MixQ8_0, MixQ4KM, MixQ5KM} }

// tensor roles in a Qwen3.5 text model
type role int

const (
	roleUnknown      role = iota
	roleEmbed             // embed_tokens
	roleLMHead            // lm_head
	roleNorm              // every *norm.weight (RMSNorm and the gated norm)
	roleVector            // A_log, dt_bias
	roleConv              // linear_attn.conv1d
	roleGDNInProj         // linear_attn.in_proj_qkv, in_proj_z
	roleGDNGates          // linear_attn.in_proj_a, in_proj_b
	roleGDNOut            // linear_attn.out_proj
	roleAttn              // self_attn.q_proj, k_proj, v_proj, o_proj
	roleGateUp            // mlp.gate_proj, mlp.up_proj; a MoE's shared expert's
	roleDown              // mlp.down_proj; a MoE's shared expert's
	roleRouter            // a MoE's mlp.gate (router) and mlp.shared_expert_gate
	roleExpertGateUp      // a MoE's experts' gate and up projections
	roleExpertDown        // a MoE's experts' down projections
)

var layerRoles = map[string]role{
	"input_layernorm.weight":          roleNorm,
	"post_attention_layernorm.weight": roleNorm,
	"linear_attn.in_proj_qkv.weight":  roleGDNInProj,
	"linear_attn.in_proj_z.weight":    roleGDNInProj,
	"linear_attn.in_proj_a.weight":    roleGDNGates,
	"linear_attn.in_proj_b.weight":    roleGDNGates,
	"linear_attn.conv1d.weight":       roleConv,
	"linear_attn.A_log":               roleVector,
	"linear_attn.dt_bias":             roleVector,
	"linear_attn.norm.weight":         roleNorm,
	"linear_attn.out_proj.weight":     roleGDNOut,
	"self_attn.q_proj.weight":         roleAttn,
	"self_attn.k_proj.weight":         roleAttn,
	"self_attn.v_proj.weight":         roleAttn,
	"self_attn.o_proj.weight":         roleAttn,
	"self_attn.q_norm.weight":         roleNorm,
	"self_attn.k_norm.weight":         roleNorm,
	"mlp.gate_proj.weight":            roleGateUp,
	"mlp.up_proj.weight":              roleGateUp,
	"mlp.down_proj.weight":            roleDown,
	// The mixture of experts (qwen3_5_moe). The experts are named as the
	// model binds them: fused (experts.gate_up_proj [E, 2F, H],
	// experts.down_proj [E, H, F]: the BF16 releases), stacked (GGUF's
	// layout: experts.gate_proj and experts.up_proj [E, F, H]) or one module
	// per expert (experts.{e}.gate_proj.weight: parseName).
	"mlp.gate.weight":                    roleRouter,
	"mlp.shared_expert_gate.weight":      roleRouter,
	"mlp.shared_expert.gate_proj.weight": roleGateUp,
	"mlp.shared_expert.up_proj.weight":   roleGateUp,
	"mlp.shared_expert.down_proj.weight": roleDown,
	"mlp.experts.gate_up_proj":           roleExpertGateUp,
	"mlp.experts.gate_proj":              roleExpertGateUp,
	"mlp.experts.up_proj":                roleExpertGateUp,
	"mlp.experts.down_proj":              roleExpertDown,
}

// expertRoles are the tensors of one expert module (experts.{e}.*).
var expertRoles = map[string]role{
	"gate_proj.weight": roleExpertGateUp,
	"up_proj.weight":   roleExpertGateUp,
	"down_proj.weight": roleExpertDown,
}

// parseName finds a Hugging Face Qwen3.5 text tensor's role and layer (−1
// outside the layers). It accepts the multimodal checkpoint's
// "model.language_model." prefix and the text-only "model." one; the vision
// tower ("model.visual.") and the MTP head ("mtp.") are unknown.
func parseName(name string) (role, int) {
	if name == "lm_head.weight" {
		return roleLMHead, -1
	}
	rest, ok := strings.CutPrefix(name, "model.language_model.")
	if !ok {
		rest, ok = strings.CutPrefix(name, "model.")
		if !ok || strings.HasPrefix(rest, "visual.") || strings.HasPrefix(rest, "language_model.") {
			return roleUnknown, -1
		}
	}
	switch rest {
	case "embed_tokens.weight":
		return roleEmbed, -1
	case "norm.weight":
		return roleNorm, -1
	}
	rest, ok = strings.CutPrefix(rest, "layers.")
	if !ok {
		return roleUnknown, -1
	}
	num, sub, ok := strings.Cut(rest, ".")
	layer, err := strconv.Atoi(num)
	if !ok || err != nil || layer < 0 || num != strconv.Itoa(layer) {
		return roleUnknown, -1
	}
	if r, ok := layerRoles[sub]; ok {
		return r, layer
	}
	if rest, ok := strings.CutPrefix(sub, "mlp.experts."); ok {
		num, tensor, ok := strings.Cut(rest, ".")
		e, err := strconv.Atoi(num)
		if r, known := expertRoles[tensor]; ok && known && err == nil && e >= 0 && num == strconv.Itoa(e) {
			return r, layer
		}
	}
	return roleUnknown, -1
}

// useMoreBits is llama.cpp's rule for the layers whose down projection its
// Q4_K_M gives Q6_K: the first and last eighth of the layers, and every
// third layer in between.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// FallbackNote starts the part of a Plan reason that says the tensor falls
// back to a wider format than its role asks for; a loader that reports
// each kind of fallback once can key on what follows it.
const FallbackNote = ", but rows of"

// Plan says which format the tensor named tensorName (a Hugging Face
// Qwen3.5 name such as "model.language_model.layers.3.mlp.down_proj.weight"
// or "model.layers.3.linear_attn.out_proj.weight"), a matrix of rows rows of
// cols values (for 1-D tensors rows 1), gets in mix, with the reason in
// words. layers is the model's number of decoder layers (num_hidden_layers);
// only the q4_k_m down projections use it. Keep means the tensor stays as
// stored. The error is for an unknown mix, or a q4_k_m down projection whose
// layer is not below layers.
//
// Mix "q8_0" (MixQ8_0) is llama.cpp's Q8_0: every weight matrix in Q8_0,
// embed_tokens, lm_head and in_proj_a/in_proj_b included, and a mixture of
// experts' experts and shared expert; conv1d, the norms, A_log, dt_bias,
// and a mixture of experts' router (mlp.gate) and shared expert gate kept.
//
// Mix "q4_k_m" (MixQ4KM) is govinfer's:
//
//   - mlp.gate_proj, mlp.up_proj: Q4_K.
//   - mlp.down_proj: Q6_K in the layers of llama.cpp's use_more_bits rule
//     (layer < L/8, layer ≥ 7L/8, or (layer − L/8) mod 3 = 2: 16 of the 9B's
//     32 layers, 0–3, 6, 9, …, 27, 28–31), else Q4_K.
//   - linear_attn.out_proj: Q8_0, the tensor most sensitive to quantization
//     in this architecture (llama.cpp's Q4_K_M puts it in Q4_K).
//   - linear_attn.in_proj_qkv and in_proj_z, self_attn q/k/v/o_proj: Q6_K
//     (the attention-side projections are the next most sensitive).
//   - linear_attn.in_proj_a/in_proj_b, conv1d, the norms, A_log, dt_bias:
//     kept, as Qwen's own FP8 checkpoints keep them (in_proj_a/b are tiny
//     and feed the decay and beta gates).
//   - lm_head: Q6_K (as llama.cpp's output.weight).
//   - embed_tokens: Q6_K. A decoded token reads one row of it, so the bits
//     cost memory, not bandwidth; and a model with tied embeddings uses this
//     matrix as its output projection, which wants Q6_K.
//
// For Qwen3.5-9B that is a 6.4 GB file reading 5.6 GB of weights per decoded
// token (llama.cpp's Q4_K_M: 5.6 GB and about 5.05 GB; Q8_0: 9.5 and 8.4).
//
// Mix "q5_k_m" (MixQ5KM) is "q4_k_m" with every Q4_K tensor in Q5_K (the
// MLP gate/up projections and the down projections outside the
// use_more_bits layers): 176 bytes per 256 values instead of 144.
//
// A mixture of experts (qwen3_5_moe) gets, in the same mixes (at least as
// careful as llama.cpp's Q4_K_M and Q5_K_M, whose rules for ffn_*_exps and
// ffn_*_shexp are these):
//
//   - mlp.gate (the router) and mlp.shared_expert_gate: kept (llama.cpp's
//     ffn_gate_inp and ffn_gate_inp_shexp stay F32): a small error there
//     picks other experts.
//   - the experts' gate and up projections: Q4_K (Q5_K in q5_k_m), under
//     every name the model binds them by: the fused experts.gate_up_proj,
//     the stacked experts.gate_proj and experts.up_proj of a GGUF file, and
//     experts.{e}.gate_proj.weight, experts.{e}.up_proj.weight of one
//     module per expert.
//   - the experts' down projections (experts.down_proj,
//     experts.{e}.down_proj.weight): as a dense layer's mlp.down_proj, Q6_K
//     in the use_more_bits layers, else Q4_K (Q5_K), as llama.cpp treats
//     ffn_down_exps (the layer read from the name, not a count of tensors).
//   - the shared expert (mlp.shared_expert.*): as the dense MLP.
//
// When a row (cols) is not a whole number of blocks of the chosen format,
// the plan falls back to the next format that fits, a K-quant to Q8_0 to
// kept, and the reason says so. Names Plan does not know (the vision tower,
// the MTP head, anything else) are kept.
func Plan(mix, tensorName string, rows, cols, layers int) (Type, string, error) {
	if mix != MixQ8_0 && mix != MixQ4KM && mix != MixQ5KM {
		return Keep, "", fmt.Errorf("quant: unknown mix %q (known: %s)", mix, strings.Join(Mixes(), ", "))
	}
	r, layer := parseName(tensorName)
	var t Type
	var why string
	switch r {
	case roleUnknown:
		return Keep, "not a Qwen3.5 text-model tensor this mix knows: kept", nil
	case roleNorm:
		return Keep, "norm weight: kept", nil
	case roleVector:
		return Keep, "per-head vector (A_log, dt_bias): kept", nil
	case roleConv:
		return Keep, "linear-attention conv1d: kept", nil
	case roleRouter:
		return Keep, "mixture-of-experts router or shared expert gate: kept, as llama.cpp keeps ffn_gate_inp in F32", nil
	}
	if mix == MixQ8_0 {
		t, why = Q8_0, "weight matrix: Q8_0"
	} else {
		switch r {
		case roleEmbed:
			t, why = Q6_K, "token embeddings: Q6_K (one row read per token; the output projection when tied)"
		case roleLMHead:
			t, why = Q6_K, "lm_head: Q6_K"
		case roleGDNGates:
			return Keep, "linear-attention in_proj_a/in_proj_b: kept, as Qwen's FP8 checkpoints keep them", nil
		case roleGDNOut:
			t, why = Q8_0, "linear-attention out_proj, the most quantization-sensitive matrix: Q8_0"
		case roleGDNInProj:
			t, why = Q6_K, "linear-attention input projection: Q6_K"
		case roleAttn:
			t, why = Q6_K, "attention projection: Q6_K"
		case roleGateUp:
			t, why = Q4_K, "MLP gate/up projection: Q4_K"
		case roleExpertGateUp:
			t, why = Q4_K, "experts' gate/up projections: Q4_K"
		case roleDown, roleExpertDown:
			what := "MLP down projection"
			if r == roleExpertDown {
				what = "experts' down projections"
			}
			if layer >= layers {
				return Keep, "", fmt.Errorf("quant: Plan %s: %s is layer %d of a model of %d layers", mix, tensorName, layer, layers)
			}
			if useMoreBits(layer, layers) {
				t, why = Q6_K, fmt.Sprintf("%s of layer %d of %d, one of llama.cpp's use_more_bits layers: Q6_K", what, layer, layers)
			} else {
				t, why = Q4_K, fmt.Sprintf("%s of layer %d of %d: Q4_K", what, layer, layers)
			}
		}
	}
	if mix == MixQ5KM && t == Q4_K {
		t, why = Q5_K, strings.TrimSuffix(why, "Q4_K")+"Q5_K"
	}
	if rows <= 0 || cols <= 0 {
		return Keep, fmt.Sprintf("%s, but the tensor is empty (%d×%d): kept", why, rows, cols), nil
	}
	for !t.Fits(cols) {
		next := Keep
		if t != Q8_0 {
			next = Q8_0
		}
		why = fmt.Sprintf("%s%s %d values are not whole %v blocks of %d: %v", why, FallbackNote, cols, t, t.BlockSize(), next)
		if t = next; t == Keep {
			why += " (kept as stored)"
			break
		}
	}
	return t, why, nil
}
