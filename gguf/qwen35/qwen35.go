// Package qwen35 is the layout of llama.cpp's qwen35 architecture in GGUF
// files (tag b10547), and of its mixture-of-experts sibling qwen35moe: their
// metadata keys, their tensor names, and the transforms the converter
// applies to a Hugging Face Qwen3.5 checkpoint. One table serves reading
// (package model) and writing (package convert).
//
// A qwen35moe file has the qwen35 keys under its own prefix (ArchKey), the
// expert keys, and MoE tensors in place of the dense MLP's: the router
// ffn_gate_inp, the experts stacked into 3-D tensors ffn_{gate,up,down}_exps
// (HF's fused gate_up_proj split in two), the shared expert
// ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp. The router and
// the shared expert's gate are F32 whatever the file's type.
//
// The converter changes some tensors on the way (../shared/spec's
// gguf-qwen35.md):
//
//   - RMSNorm weights are stored as 1 + w (HF keeps the zero-centred w), in
//     float32; the gated norm of the linear-attention layers is not.
//   - A_log is stored as ssm_a = -exp(A_log), in float32.
//   - conv1d [C, 1, K] is squeezed to [C, K], in float32.
//   - The value heads of the linear-attention layers are reordered from
//     grouped by key head (HF: value head h reads key head h / (Nv/Nk)) to
//     tiled (value head h reads key head h mod Nk): the V rows of
//     in_proj_qkv and the V channels of conv1d, the rows of in_proj_z,
//     in_proj_a and in_proj_b, the entries of A_log and dt_bias, and the
//     input columns of out_proj.
package qwen35

import (
	"math"
	"strconv"
	"strings"
)

// Arch is the value of general.architecture of a dense model, ArchMoE of a
// mixture of experts (qwen3_5_moe checkpoints).
const (
	Arch    = "qwen35"
	ArchMoE = "qwen35moe"
)

// ArchKey returns the key of architecture arch for a qwen35 key: the
// qwen35moe files have every qwen35 key under their own prefix.
func ArchKey(arch, key string) string {
	if rest, ok := strings.CutPrefix(key, Arch+"."); ok {
		return arch + "." + rest
	}
	return key
}

// Metadata keys of the architecture.
const (
	KeyBlockCount            = Arch + ".block_count"
	KeyNextNLayers           = Arch + ".nextn_predict_layers" // MTP blocks appended to the layers
	KeyContextLength         = Arch + ".context_length"
	KeyEmbeddingLength       = Arch + ".embedding_length"
	KeyFeedForwardLength     = Arch + ".feed_forward_length"
	KeyHeadCount             = Arch + ".attention.head_count"
	KeyHeadCountKV           = Arch + ".attention.head_count_kv"
	KeyKeyLength             = Arch + ".attention.key_length"
	KeyValueLength           = Arch + ".attention.value_length"
	KeyRMSEpsilon            = Arch + ".attention.layer_norm_rms_epsilon"
	KeyRopeFreqBase          = Arch + ".rope.freq_base"
	KeyRopeDimensionCount    = Arch + ".rope.dimension_count"
	KeyRopeSections          = Arch + ".rope.dimension_sections"
	KeyConvKernel            = Arch + ".ssm.conv_kernel"
	KeyStateSize             = Arch + ".ssm.state_size"     // linear key head dim
	KeyGroupCount            = Arch + ".ssm.group_count"    // linear key heads
	KeyTimeStepRank          = Arch + ".ssm.time_step_rank" // linear value heads
	KeyInnerSize             = Arch + ".ssm.inner_size"     // value heads × value head dim
	KeyFullAttentionInterval = Arch + ".full_attention_interval"

	// The mixture of experts (qwen35moe files; ArchKey gives their names
	// there): expert_count experts of width expert_feed_forward_length,
	// expert_used_count per token, a shared expert of width
	// expert_shared_feed_forward_length. Such files have no
	// feed_forward_length.
	KeyExpertCount                   = Arch + ".expert_count"
	KeyExpertUsedCount               = Arch + ".expert_used_count"
	KeyExpertFeedForwardLength       = Arch + ".expert_feed_forward_length"
	KeyExpertSharedFeedForwardLength = Arch + ".expert_shared_feed_forward_length"
)

// DefaultRopeSections is the converter's rope.dimension_sections when the
// checkpoint gives no mrope_section.
var DefaultRopeSections = []int32{11, 11, 10, 0}

// Transform says how the converter changes a tensor.
type Transform uint8

// The transforms.
const (
	Copy        Transform = iota // stored as it is
	NormPlusOne                  // RMSNorm weight: stored as 1 + w, float32
	NegExp                       // A_log: stored as -exp(A_log), float32, value heads reordered
	HeadRows                     // rows in blocks of one value head reordered (in_proj_z, in_proj_a/b, dt_bias)
	QKVRows                      // the V rows after the q and k ones reordered (in_proj_qkv; conv1d's channels)
	HeadCols                     // columns in blocks of one value head reordered (out_proj)
)

// Tensor says where a Hugging Face tensor goes in a GGUF file.
type Tensor struct {
	Name      string // the GGUF name
	Transform Transform
	// F32 is set for the tensors the format keeps in float32 whatever the
	// file's type: 1-D tensors, conv1d, and a MoE layer's router and shared
	// expert gate.
	F32 bool
	// Squeeze is set for conv1d, whose [C, 1, K] is stored as [C, K].
	Squeeze bool
}

// Reorders reports whether the transform moves value heads.
func (t Transform) Reorders() bool { return t >= NegExp }

// globalTensors and layerTensors map HF names (within the text model, and
// within a layer) to GGUF ones.
var globalTensors = map[string]Tensor{
	"embed_tokens.weight": {Name: "token_embd.weight"},
	"norm.weight":         {Name: "output_norm.weight", Transform: NormPlusOne, F32: true},
}

var layerTensors = map[string]Tensor{
	"input_layernorm.weight":          {Name: "attn_norm.weight", Transform: NormPlusOne, F32: true},
	"post_attention_layernorm.weight": {Name: "post_attention_norm.weight", Transform: NormPlusOne, F32: true},
	"mlp.gate_proj.weight":            {Name: "ffn_gate.weight"},
	"mlp.up_proj.weight":              {Name: "ffn_up.weight"},
	"mlp.down_proj.weight":            {Name: "ffn_down.weight"},
	"linear_attn.in_proj_qkv.weight":  {Name: "attn_qkv.weight", Transform: QKVRows},
	"linear_attn.in_proj_z.weight":    {Name: "attn_gate.weight", Transform: HeadRows},
	"linear_attn.in_proj_a.weight":    {Name: "ssm_alpha.weight", Transform: HeadRows},
	"linear_attn.in_proj_b.weight":    {Name: "ssm_beta.weight", Transform: HeadRows},
	"linear_attn.conv1d.weight":       {Name: "ssm_conv1d.weight", Transform: QKVRows, F32: true, Squeeze: true},
	"linear_attn.A_log":               {Name: "ssm_a", Transform: NegExp, F32: true},
	"linear_attn.dt_bias":             {Name: "ssm_dt.bias", Transform: HeadRows, F32: true},
	"linear_attn.norm.weight":         {Name: "ssm_norm.weight", F32: true},
	"linear_attn.out_proj.weight":     {Name: "ssm_out.weight", Transform: HeadCols},
	"self_attn.q_proj.weight":         {Name: "attn_q.weight"},
	"self_attn.k_proj.weight":         {Name: "attn_k.weight"},
	"self_attn.v_proj.weight":         {Name: "attn_v.weight"},
	"self_attn.o_proj.weight":         {Name: "attn_output.weight"},
	"self_attn.q_norm.weight":         {Name: "attn_q_norm.weight", Transform: NormPlusOne, F32: true},
	"self_attn.k_norm.weight":         {Name: "attn_k_norm.weight", Transform: NormPlusOne, F32: true},
	// The mixture of experts. The router and the shared expert's gate
	// ([1, H], stored {H, 1} by the converter and {H} by llama-quantize)
	// are F32. The experts are named as stacked, gate and up apart
	// ([E, F, H]; down [E, H, F]): HF's fused experts.gate_up_proj is split
	// in two by the writer, and one module per expert is stacked.
	"mlp.gate.weight":                    {Name: "ffn_gate_inp.weight", F32: true},
	"mlp.shared_expert_gate.weight":      {Name: "ffn_gate_inp_shexp.weight", F32: true},
	"mlp.shared_expert.gate_proj.weight": {Name: "ffn_gate_shexp.weight"},
	"mlp.shared_expert.up_proj.weight":   {Name: "ffn_up_shexp.weight"},
	"mlp.shared_expert.down_proj.weight": {Name: "ffn_down_shexp.weight"},
	"mlp.experts.gate_proj":              {Name: "ffn_gate_exps.weight"},
	"mlp.experts.up_proj":                {Name: "ffn_up_exps.weight"},
	"mlp.experts.down_proj":              {Name: "ffn_down_exps.weight"},
}

// Lookup returns where the Hugging Face text-model tensor name goes: names
// under "model.language_model." (the multimodal checkpoints) or "model." (a
// text-only export), and "lm_head.weight". Names outside the text model
// (the vision tower, the MTP head) and unknown ones give false.
func Lookup(name string) (Tensor, bool) {
	if name == "lm_head.weight" {
		return Tensor{Name: "output.weight"}, true
	}
	rest, ok := strings.CutPrefix(name, "model.language_model.")
	if !ok {
		if rest, ok = strings.CutPrefix(name, "model."); !ok || strings.HasPrefix(rest, "visual.") {
			return Tensor{}, false
		}
	}
	if t, ok := globalTensors[rest]; ok {
		return t, true
	}
	rest, ok = strings.CutPrefix(rest, "layers.")
	if !ok {
		return Tensor{}, false
	}
	num, sub, ok := strings.Cut(rest, ".")
	layer, err := strconv.Atoi(num)
	if !ok || err != nil || layer < 0 || num != strconv.Itoa(layer) {
		return Tensor{}, false
	}
	t, ok := layerTensors[sub]
	if !ok {
		return Tensor{}, false
	}
	t.Name = "blk." + num + "." + t.Name
	return t, true
}

// MTPPrefix is the Hugging Face name prefix of the multi-token-prediction
// head's tensors.
const MTPPrefix = "mtp."

// mtpTensors map the head's own tensors (within mtp.) to their names
// within its block; its layer (mtp.layers.i) is named as a text layer.
var mtpTensors = map[string]Tensor{
	"fc.weight":                    {Name: "nextn.eh_proj.weight"},
	"pre_fc_norm_embedding.weight": {Name: "nextn.enorm.weight", Transform: NormPlusOne, F32: true},
	"pre_fc_norm_hidden.weight":    {Name: "nextn.hnorm.weight", Transform: NormPlusOne, F32: true},
	"norm.weight":                  {Name: "nextn.shared_head_norm.weight", Transform: NormPlusOne, F32: true},
}

// LookupMTP returns where a tensor of the MTP head (mtp.*) goes in a file
// whose text model has layers layers: as llama.cpp's converter writes it,
// the head is a block appended to the layers (block_count is layers plus
// nextn_predict_layers), its layer mtp.layers.i being block layers+i under
// the text layers' names, and its own tensors under blk.N.nextn.* of the
// first such block (fc is eh_proj, the two input norms enorm and hnorm,
// the final norm shared_head_norm, each norm stored as 1 + w). Other names
// give false.
func LookupMTP(name string, layers int) (Tensor, bool) {
	rest, ok := strings.CutPrefix(name, MTPPrefix)
	if !ok || layers < 0 {
		return Tensor{}, false
	}
	if t, ok := mtpTensors[rest]; ok {
		t.Name = "blk." + strconv.Itoa(layers) + "." + t.Name
		return t, true
	}
	rest, ok = strings.CutPrefix(rest, "layers.")
	if !ok {
		return Tensor{}, false
	}
	num, sub, ok := strings.Cut(rest, ".")
	i, err := strconv.Atoi(num)
	if !ok || err != nil || i < 0 || num != strconv.Itoa(i) {
		return Tensor{}, false
	}
	t, ok := layerTensors[sub]
	if !ok {
		return Tensor{}, false
	}
	t.Name = "blk." + strconv.Itoa(layers+i) + "." + t.Name
	return t, true
}

// Heads are the head counts and sizes of the linear-attention layers: Nk
// key heads of Dk values, Nv value heads of Dv values, Nv a multiple of Nk.
type Heads struct{ Nk, Nv, Dk, Dv int }

// Tiled returns the GGUF (tiled) position of the value head at Hugging
// Face (grouped) position g: with r = Nv/Nk, g = k·r + s becomes s·Nk + k.
func (h Heads) Tiled(g int) int {
	r := h.Nv / h.Nk
	return (g%r)*h.Nk + g/r
}

// Grouped returns the Hugging Face position of the value head at GGUF
// position t (the inverse of Tiled).
func (h Heads) Grouped(t int) int {
	r := h.Nv / h.Nk
	return (t%h.Nk)*r + t/h.Nk
}

// Source returns, for row i (for HeadCols, column i: its rows stay where
// they are) of a tensor of n rows (columns) converted by the transform, the
// row of the original it comes from: toGGUF converts a Hugging Face tensor
// for a file, !toGGUF the other way. Rows outside the value heads, and
// every row of transforms that move none, come from themselves.
func (t Transform) Source(h Heads, n, i int, toGGUF bool) int {
	start, per := 0, 0
	switch t {
	case NegExp, HeadRows, HeadCols:
		per = n / h.Nv
	case QKVRows:
		start, per = 2*h.Nk*h.Dk, h.Dv
	default:
		return i
	}
	if i < start || per == 0 || h.Nk <= 0 || h.Nv%h.Nk != 0 {
		return i
	}
	head, within := (i-start)/per, (i-start)%per
	if head >= h.Nv {
		return i
	}
	src := h.Tiled(head)
	if toGGUF {
		src = h.Grouped(head)
	}
	return start + src*per + within
}

// ToGGUF applies an elementwise transform (NormPlusOne, NegExp) to one
// value, in float32 as the converter computes it; other transforms leave
// values alone.
func (t Transform) ToGGUF(v float32) float32 {
	switch t {
	case NormPlusOne:
		return v + 1
	case NegExp:
		return -float32(math.Exp(float64(v)))
	}
	return v
}

// FromGGUF undoes ToGGUF on one stored value. For NormPlusOne, stored - 1
// is exact for stored values in [0.5, 2], so a norm computing x·(1 + w)
// in float32 multiplies by exactly the stored value. For NegExp it is the
// float32 x nearest log(-stored) for which ToGGUF(x) gives the stored value
// back where one does, so that a graph computing -exp(A_log) as ToGGUF does
// uses exactly the stored ssm_a; NaN for a stored value that is not
// negative.
func (t Transform) FromGGUF(v float32) float32 {
	switch t {
	case NormPlusOne:
		return v - 1
	case NegExp:
		x := float32(math.Log(-float64(v)))
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || NegExp.ToGGUF(x) == v {
			return x
		}
		for step := 1; step <= 4; step++ {
			for _, dir := range []float32{float32(math.Inf(1)), float32(math.Inf(-1))} {
				y := x
				for range step {
					y = math.Nextafter32(y, dir)
				}
				if NegExp.ToGGUF(y) == v {
					return y
				}
			}
		}
		return x
	}
	return v
}
