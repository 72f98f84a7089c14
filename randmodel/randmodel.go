// Package randmodel writes random Qwen3.5 checkpoints in the real Hugging
// Face layout (config.json, generation_config.json, model.safetensors with
// BF16 weights and the F32 tensors Qwen3.5 stores as F32), dense
// (qwen3_5) or mixture-of-experts (qwen3_5_moe, experts fused as in the BF16
// releases). Weights are scaled so that activations stay healthy through
// every layer, so tests, benchmarks and demos can run the full model without
// downloading one. Tensors are generated and written a chunk at a time, so
// memory use does not grow with the model.
package randmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// Shape is a named set of model widths.
type Shape struct {
	Name                                 string
	Hidden, Intermediate, Layers, Vocab  int
	Heads, KVHeads, HeadDim              int
	LinearKeyHeads, LinearValueHeads     int
	LinearKeyHeadDim, LinearValueHeadDim int
	Tied                                 bool
	MaxPositionEmbeddings                int
	// Schedule gives each layer's mixer ("linear_attention" or
	// "full_attention"); nil means the real model's 3:1 pattern.
	Schedule []string
	// Experts > 0 makes every layer's MLP (and the MTP head's) a mixture
	// of Experts experts of width ExpertWidth, ExpertsPerTok of them per
	// token, plus a shared expert of width SharedExpertWidth: a
	// qwen3_5_moe checkpoint, which has no intermediate_size (Intermediate
	// is not used).
	Experts, ExpertsPerTok, ExpertWidth, SharedExpertWidth int
}

// MoE reports whether the shape's MLPs are mixtures of experts.
func (s Shape) MoE() bool { return s.Experts > 0 }

// layerTypes returns the shape's schedule.
func (s Shape) layerTypes() []string {
	if s.Schedule != nil {
		return s.Schedule
	}
	return LayerTypes(s.Layers)
}

// Shapes are the shapes make-random knows: the test checkpoints' (tiny,
// small) and the Qwen3.5 family's text models at their real widths (the
// qwen35-moe spec's "Sizes" table): dense 0.8B, 2B, 4B (tied embeddings),
// 9B and 27B; mixture-of-experts 35B-A3B, 122B-A10B and 397B-A17B. All of
// the family has a 248,320-entry vocabulary, head_dim 256, Gated DeltaNet
// key and value heads of 128 and 262,144 positions.
func Shapes() []Shape {
	return []Shape{
		{Name: "tiny", Hidden: 64, Intermediate: 160, Layers: 4, Vocab: 1024, Heads: 4, KVHeads: 2, HeadDim: 32,
			LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyHeadDim: 16, LinearValueHeadDim: 16, Tied: true, MaxPositionEmbeddings: 262144},
		{Name: "small", Hidden: 256, Intermediate: 704, Layers: 8, Vocab: 4096, Heads: 8, KVHeads: 2, HeadDim: 64,
			LinearKeyHeads: 4, LinearValueHeads: 8, LinearKeyHeadDim: 32, LinearValueHeadDim: 32, MaxPositionEmbeddings: 262144},
		family("qwen3.5-0.8b", 1024, 24, 8, 2, 16, 16, true).dense(3584),
		family("qwen3.5-2b", 2048, 24, 8, 2, 16, 16, true).dense(6144),
		family("qwen3.5-4b", 2560, 32, 16, 4, 32, 16, true).dense(9216),
		family("qwen3.5-9b", 4096, 32, 16, 4, 32, 16, false).dense(12288),
		family("qwen3.5-27b", 5120, 64, 24, 4, 48, 16, false).dense(17408),
		family("qwen3.5-35b-a3b", 2048, 40, 16, 2, 32, 16, false).moe(256, 8, 512, 512),
		family("qwen3.5-122b-a10b", 3072, 48, 32, 2, 64, 16, false).moe(256, 8, 1024, 1024),
		family("qwen3.5-397b-a17b", 4096, 60, 32, 2, 64, 16, false).moe(512, 10, 1024, 1024),
	}
}

// family returns a Qwen3.5 text model's shape from what varies across the
// family: hidden width, layers, attention heads (query, key-value), Gated
// DeltaNet heads (value, key) and whether the embeddings are tied.
func family(name string, hidden, layers, heads, kvHeads, linearValueHeads, linearKeyHeads int, tied bool) Shape {
	return Shape{Name: name, Hidden: hidden, Layers: layers, Vocab: 248320, Heads: heads, KVHeads: kvHeads, HeadDim: 256,
		LinearKeyHeads: linearKeyHeads, LinearValueHeads: linearValueHeads, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		Tied: tied, MaxPositionEmbeddings: 262144}
}

// dense returns s with a dense MLP of the given width.
func (s Shape) dense(intermediate int) Shape {
	s.Intermediate = intermediate
	return s
}

// moe returns s with a mixture of experts in every layer.
func (s Shape) moe(experts, perTok, width, shared int) Shape {
	s.Experts, s.ExpertsPerTok, s.ExpertWidth, s.SharedExpertWidth = experts, perTok, width, shared
	return s
}

// LookupShape returns the shape with the given name.
func LookupShape(name string) (Shape, error) {
	var names []string
	for _, s := range Shapes() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("unknown shape %q (known: %v)", name, names)
}

// convKernel is Qwen3.5's Gated DeltaNet convolution width.
const convKernel = 4

// LayerTypes returns the schedule of the real model for n layers: three
// Gated DeltaNet layers, then one attention layer, repeated.
func LayerTypes(n int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = "linear_attention"
		if i%4 == 3 {
			t[i] = "full_attention"
		}
	}
	return t
}

// Config returns the config.json object for the shape, nested like the real
// checkpoint's.
func (s Shape) Config() map[string]any {
	// mrope_section splits rotaryDim/2 into three near-equal parts, larger
	// ones first: [11, 11, 10] for the 9B's 64 rotary dims.
	half := s.HeadDim / 4 / 2
	section := make([]int, 3)
	for i := range section {
		section[i] = half / 3
		if i < half%3 {
			section[i]++
		}
	}
	eos := s.Vocab - 3
	text := map[string]any{
		"attention_bias": false, "attention_dropout": 0.0, "attn_output_gate": true,
		"bos_token_id": nil, "dtype": "bfloat16", "eos_token_id": eos,
		"full_attention_interval": 4, "head_dim": s.HeadDim, "hidden_act": "silu",
		"hidden_size": s.Hidden, "initializer_range": 0.02, "intermediate_size": s.Intermediate,
		"layer_types": s.layerTypes(), "linear_conv_kernel_dim": convKernel,
		"linear_key_head_dim": s.LinearKeyHeadDim, "linear_num_key_heads": s.LinearKeyHeads,
		"linear_num_value_heads": s.LinearValueHeads, "linear_value_head_dim": s.LinearValueHeadDim,
		"mamba_ssm_dtype": "float32", "max_position_embeddings": s.MaxPositionEmbeddings,
		"mlp_only_layers": []int{}, "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
		"mtp_use_dedicated_embeddings": false, "num_attention_heads": s.Heads,
		"num_hidden_layers": s.Layers, "num_key_value_heads": s.KVHeads, "pad_token_id": nil,
		"partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
		"rope_parameters": map[string]any{
			"mrope_interleaved": true, "mrope_section": section, "rope_type": "default",
			"rope_theta": 10000000, "partial_rotary_factor": 0.25,
		},
		"tie_word_embeddings": s.Tied, "use_cache": true, "vocab_size": s.Vocab,
	}
	arch, modelType := "Qwen3_5ForConditionalGeneration", "qwen3_5"
	if s.MoE() {
		// Qwen3_5MoeTextConfig: the expert keys in place of
		// intermediate_size, and no mlp_only_layers (every layer is MoE).
		arch, modelType = "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"
		delete(text, "intermediate_size")
		delete(text, "mlp_only_layers")
		text["model_type"] = "qwen3_5_moe_text"
		text["num_experts"] = s.Experts
		text["num_experts_per_tok"] = s.ExpertsPerTok
		text["moe_intermediate_size"] = s.ExpertWidth
		text["shared_expert_intermediate_size"] = s.SharedExpertWidth
		text["output_router_logits"] = false
		text["router_aux_loss_coef"] = 0.001
	}
	return map[string]any{
		"architectures":         []string{arch},
		"model_type":            modelType,
		"text_config":           text,
		"tie_word_embeddings":   s.Tied,
		"image_token_id":        realIDs.ImagePad,
		"video_token_id":        realIDs.VideoPad,
		"vision_start_token_id": realIDs.VisionStart,
		"vision_end_token_id":   realIDs.VisionEnd,
	}
}

// GenerationConfig returns generation_config.json for the shape: the Qwen3.5
// family's sampling defaults, with in-vocabulary stand-ins for the special
// ids (vocab-3 for <|endoftext|>, vocab-1 for <|im_end|>) unless the
// vocabulary is large enough for the real ones.
func (s Shape) GenerationConfig(eos []int) map[string]any {
	if eos == nil {
		eos = []int{s.Vocab - 1, s.Vocab - 3}
	}
	return map[string]any{
		"bos_token_id": eos[len(eos)-1], "do_sample": true, "eos_token_id": eos,
		"pad_token_id": eos[len(eos)-1], "temperature": 0.6, "top_k": 20, "top_p": 0.95,
	}
}

// tensorSpec describes one tensor to generate.
type tensorSpec struct {
	name  string
	shape []int
	f32   bool // stored as F32 (A_log, the gated norm weight)
	fill  func(r *rand.Rand, i int) float32
}

func normal(mean, std float64) func(*rand.Rand, int) float32 {
	return func(r *rand.Rand, _ int) float32 { return float32(mean + std*r.NormFloat64()) }
}

// tensors lists every tensor of the text model with its distribution.
func (s Shape) tensors() []tensorSpec {
	h := s.Hidden
	fanIn := func(n int, gain float64) func(*rand.Rand, int) float32 { return normal(0, gain/math.Sqrt(float64(n))) }
	p := "model.language_model."
	embedStd := 1.0
	if s.Tied {
		// The output matrix too: logits of RMS about 3.2 at any width
		// (0.4 up to the tiny shape's 64).
		embedStd = min(0.4, 3.2/math.Sqrt(float64(h)))
	}
	ts := []tensorSpec{
		{name: p + "embed_tokens.weight", shape: []int{s.Vocab, h}, fill: normal(0, embedStd)},
		{name: p + "norm.weight", shape: []int{h}, fill: normal(0, 0.1)},
	}
	if !s.Tied {
		ts = append(ts, tensorSpec{name: "lm_head.weight", shape: []int{s.Vocab, h}, fill: fanIn(h, 2.5)})
	}
	keyDim, valueDim := s.LinearKeyHeads*s.LinearKeyHeadDim, s.LinearValueHeads*s.LinearValueHeadDim
	convDim := 2*keyDim + valueDim
	for i, kind := range s.layerTypes() {
		l := fmt.Sprintf("%slayers.%d.", p, i)
		ts = append(ts,
			tensorSpec{name: l + "input_layernorm.weight", shape: []int{h}, fill: normal(0, 0.1)},
			tensorSpec{name: l + "post_attention_layernorm.weight", shape: []int{h}, fill: normal(0, 0.1)},
		)
		ts = append(ts, s.mlpTensors(l)...)
		if kind == "linear_attention" {
			nv := s.LinearValueHeads
			ts = append(ts,
				tensorSpec{name: l + "linear_attn.in_proj_qkv.weight", shape: []int{convDim, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "linear_attn.in_proj_z.weight", shape: []int{valueDim, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "linear_attn.in_proj_b.weight", shape: []int{nv, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "linear_attn.in_proj_a.weight", shape: []int{nv, h}, fill: fanIn(h, 0.5)},
				tensorSpec{name: l + "linear_attn.conv1d.weight", shape: []int{convDim, 1, convKernel}, fill: normal(0, 0.5)},
				// A ~ U(1, 16), stored as ln A in F32.
				tensorSpec{name: l + "linear_attn.A_log", shape: []int{nv}, f32: true,
					fill: func(r *rand.Rand, _ int) float32 { return float32(math.Log(1 + 15*r.Float64())) }},
				// dt log-uniform in [1e-3, 1e-1], dt_bias = softplus⁻¹(dt).
				tensorSpec{name: l + "linear_attn.dt_bias", shape: []int{nv},
					fill: func(r *rand.Rand, _ int) float32 {
						dt := math.Exp(math.Log(1e-3) + r.Float64()*(math.Log(1e-1)-math.Log(1e-3)))
						return float32(math.Log(math.Expm1(dt)))
					}},
				tensorSpec{name: l + "linear_attn.norm.weight", shape: []int{s.LinearValueHeadDim}, f32: true, fill: normal(1, 0.1)},
				tensorSpec{name: l + "linear_attn.out_proj.weight", shape: []int{h, valueDim}, fill: fanIn(valueDim, 0.8)},
			)
		} else {
			hd := s.HeadDim
			ts = append(ts,
				tensorSpec{name: l + "self_attn.q_proj.weight", shape: []int{2 * s.Heads * hd, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "self_attn.k_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "self_attn.v_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
				tensorSpec{name: l + "self_attn.o_proj.weight", shape: []int{h, s.Heads * hd}, fill: fanIn(s.Heads*hd, 1.2)},
				tensorSpec{name: l + "self_attn.q_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
				tensorSpec{name: l + "self_attn.k_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
			)
		}
	}
	return ts
}

// Options controls Write.
type Options struct {
	Seed uint64
	// EOS overrides the generation config's eos ids (e.g. a real
	// tokenizer's <|im_end|> and <|endoftext|>).
	EOS []int
	// Progress, when set, is called after each chunk written (a tensor,
	// or 32 MiB of a larger one) with the bytes written so far and in all.
	Progress func(done, total int64)
	// MTP adds a multi-token-prediction head (mtp.*: fc, three norms and
	// one full-attention layer with the shape's kind of MLP). Its fc gets
	// 1.6 x identity added to the embedding half, a copy bias that makes
	// drafts repeat the token fed, so that speculative decoding accepts
	// some drafts (a purely random head's drafts are essentially never
	// accepted).
	MTP bool
	// Vision adds a vision tower (model.visual.*, vision_config in
	// config.json and a preprocessor_config.json): the real 9B tower's
	// widths for the qwen3.5-9b shape, a small one otherwise (Shape.Tower).
	Vision bool
	// ImageTokens overrides, with Vision, the vision ids of config.json (a
	// tokenizer's <|image_pad|> and friends, see ReadTokenizer); zero ones
	// keep the shape's own (Shape.VisionTokens).
	ImageTokens VisionIDs
}

// mtpTensors lists the MTP head's tensors with their distributions.
func (s Shape) mtpTensors() []tensorSpec {
	h, hd := s.Hidden, s.HeadDim
	fanIn := func(n int, gain float64) func(*rand.Rand, int) float32 { return normal(0, gain/math.Sqrt(float64(n))) }
	randFC := fanIn(2*h, 1)
	l := "mtp.layers.0."
	ts := []tensorSpec{
		{name: "mtp.fc.weight", shape: []int{h, 2 * h}, fill: func(r *rand.Rand, i int) float32 {
			v := randFC(r, i)
			if row, col := i/(2*h), i%(2*h); col == row {
				v += 1.6
			}
			return v
		}},
		{name: "mtp.pre_fc_norm_embedding.weight", shape: []int{h}, fill: normal(0, 0.1)},
		{name: "mtp.pre_fc_norm_hidden.weight", shape: []int{h}, fill: normal(0, 0.1)},
		{name: "mtp.norm.weight", shape: []int{h}, fill: normal(0, 0.1)},
		{name: l + "input_layernorm.weight", shape: []int{h}, fill: normal(0, 0.1)},
		{name: l + "post_attention_layernorm.weight", shape: []int{h}, fill: normal(0, 0.1)},
	}
	ts = append(ts, s.mlpTensors(l)...)
	return append(ts,
		tensorSpec{name: l + "self_attn.q_proj.weight", shape: []int{2 * s.Heads * hd, h}, fill: fanIn(h, 1)},
		tensorSpec{name: l + "self_attn.k_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
		tensorSpec{name: l + "self_attn.v_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
		tensorSpec{name: l + "self_attn.o_proj.weight", shape: []int{h, s.Heads * hd}, fill: fanIn(s.Heads*hd, 1.2)},
		tensorSpec{name: l + "self_attn.q_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
		tensorSpec{name: l + "self_attn.k_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
	)
}

// mlpTensors lists the MLP of the layer whose names start with l: a dense
// SwiGLU MLP, or a mixture of experts in the fused layout of the BF16
// releases (experts.gate_up_proj [E, 2F, H] with gate in rows 0..F-1 of
// each expert and up in F..2F-1, experts.down_proj [E, H, F], neither with
// a .weight suffix), with its router and gated shared expert.
func (s Shape) mlpTensors(l string) []tensorSpec {
	h := s.Hidden
	fanIn := func(n int, gain float64) func(*rand.Rand, int) float32 { return normal(0, gain/math.Sqrt(float64(n))) }
	if !s.MoE() {
		return []tensorSpec{
			{name: l + "mlp.gate_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
			{name: l + "mlp.up_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
			{name: l + "mlp.down_proj.weight", shape: []int{h, s.Intermediate}, fill: fanIn(s.Intermediate, 0.8)},
		}
	}
	e, f, sw := s.Experts, s.ExpertWidth, s.SharedExpertWidth
	// The k chosen experts' outputs are averaged (their weights sum to 1),
	// which shrinks a sum of independent random vectors by about sqrt(k):
	// the experts' down projections make that up so the block's output is
	// about as large as a dense MLP's.
	down := 0.8 * math.Sqrt(float64(s.ExpertsPerTok))
	return []tensorSpec{
		{name: l + "mlp.gate.weight", shape: []int{e, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.shared_expert_gate.weight", shape: []int{1, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.shared_expert.gate_proj.weight", shape: []int{sw, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.shared_expert.up_proj.weight", shape: []int{sw, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.shared_expert.down_proj.weight", shape: []int{h, sw}, fill: fanIn(sw, 0.8)},
		{name: l + "mlp.experts.gate_up_proj", shape: []int{e, 2 * f, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.experts.down_proj", shape: []int{e, h, f}, fill: fanIn(f, down)},
	}
}

// elements returns the product of a shape.
func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// WriteConfig creates dir (if needed) and writes the checkpoint's JSON
// files without weights: config.json, generation_config.json and, with
// o.Vision, preprocessor_config.json. That is enough for model.LoadConfig,
// and for shapes too large to write (see Size).
func WriteConfig(dir string, s Shape, o Options) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	cfg := s.Config()
	if o.Vision {
		ids := s.VisionTokens().or(o.ImageTokens)
		cfg["image_token_id"], cfg["video_token_id"] = ids.ImagePad, ids.VideoPad
		cfg["vision_start_token_id"], cfg["vision_end_token_id"] = ids.VisionStart, ids.VisionEnd
		tw := s.Tower()
		vc := tw.config(s.Hidden)
		vc["model_type"] = cfg["model_type"]
		cfg["vision_config"] = vc
		if err := writeJSON(filepath.Join(dir, "preprocessor_config.json"), tw.preprocessor()); err != nil {
			return err
		}
	}
	if len(o.EOS) > 0 {
		// Qwen3.5 names <|endoftext|> in config.json, the last of the pair.
		cfg["text_config"].(map[string]any)["eos_token_id"] = o.EOS[len(o.EOS)-1]
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "generation_config.json"), s.GenerationConfig(o.EOS))
}

// specs lists every tensor Write writes for shape s and options o.
func (s Shape) specs(o Options) []tensorSpec {
	specs := s.tensors()
	if o.MTP {
		specs = append(specs, s.mtpTensors()...)
	}
	if o.Vision {
		specs = append(specs, s.Tower().tensors(s.Hidden)...)
	}
	return specs
}

// bytes returns the size of the tensor's data.
func (t tensorSpec) bytes() int64 { return int64(elements(t.shape)) * int64(t.dtype().Size()) }

func (t tensorSpec) dtype() safetensors.DType {
	if t.f32 {
		return safetensors.F32
	}
	return safetensors.BF16
}

// Sizes are the bytes of a checkpoint's tensor data (model.safetensors less
// its header of a few kilobytes).
type Sizes struct {
	Total int64
	// Layers is the bytes of each text layer, in order (layer_types makes
	// the linear- and full-attention layers differ).
	Layers []int64
	// Embeddings is the bytes of embed_tokens and lm_head (when untied).
	Embeddings int64
}

// Size returns what Write would write for shape s and options o, without
// writing or generating anything.
func Size(s Shape, o Options) Sizes {
	sz := Sizes{Layers: make([]int64, len(s.layerTypes()))}
	const p = "model.language_model."
	for _, t := range s.specs(o) {
		n := t.bytes()
		sz.Total += n
		if t.name == p+"embed_tokens.weight" || t.name == "lm_head.weight" {
			sz.Embeddings += n
		} else if rest, ok := strings.CutPrefix(t.name, p+"layers."); ok {
			num, _, _ := strings.Cut(rest, ".")
			if i, err := strconv.Atoi(num); err == nil && i < len(sz.Layers) {
				sz.Layers[i] += n
			}
		}
	}
	return sz
}

// Write creates dir (if needed) and writes a random checkpoint of shape s:
// the files of WriteConfig and model.safetensors. The same shape and seed
// always give the same bytes. Tensors are generated and written in chunks
// of at most chunkElems elements, so memory use stays small for any size.
func Write(dir string, s Shape, o Options) error {
	if err := WriteConfig(dir, s, o); err != nil {
		return err
	}
	specs := s.specs(o)
	infos := make([]safetensors.TensorInfo, len(specs))
	var total int64
	largest := 0
	for i, t := range specs {
		infos[i] = safetensors.TensorInfo{Name: t.name, DType: t.dtype(), Shape: t.shape}
		total += t.bytes()
		largest = max(largest, int(min(t.bytes(), chunkElems*4)))
	}
	w, err := safetensors.NewWriter(filepath.Join(dir, "model.safetensors"), infos, map[string]string{"format": "pt"})
	if err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	defer w.Abort()
	buf := make([]byte, largest)
	var done int64
	for _, t := range specs {
		tw, err := w.TensorWriter(t.name)
		if err != nil {
			return fmt.Errorf("randmodel: %w", err)
		}
		n, size := elements(t.shape), t.dtype().Size()
		for lo := 0; lo < n; lo += chunkElems {
			hi := min(lo+chunkElems, n)
			chunk := buf[:(hi-lo)*size]
			generate(t, o.Seed, lo, hi, chunk)
			if _, err := tw.Write(chunk); err != nil {
				return fmt.Errorf("randmodel: %w", err)
			}
			done += int64(len(chunk))
			if o.Progress != nil {
				o.Progress(done, total)
			}
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	return nil
}

const (
	// block is the number of elements drawn from one random stream.
	block = 1 << 16
	// chunkElems is the number of elements Write generates and writes at
	// a time (32 MiB of BF16), a multiple of block.
	chunkElems = 256 * block
)

// generate fills out with elements lo..hi-1 of tensor t (lo a multiple of
// block). Each block of elements has its own random stream derived from the
// seed, the tensor name and the block's first index, so blocks fill in
// parallel, and neither the number of cores nor the chunks a tensor is
// written in change the result.
func generate(t tensorSpec, seed uint64, lo, hi int, out []byte) {
	nameHash := fnv64(t.name)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for b := lo; b < hi; b += block {
		end := min(b+block, hi)
		wg.Add(1)
		sem <- struct{}{}
		go func(b, end int) {
			defer func() { <-sem; wg.Done() }()
			r := rand.New(rand.NewPCG(seed^nameHash, uint64(b)))
			for i := b; i < end; i++ {
				v := t.fill(r, i)
				j := i - lo
				if t.f32 {
					putU32(out[4*j:], math.Float32bits(v))
				} else {
					h := half.F32ToBF16(v)
					out[2*j], out[2*j+1] = byte(h), byte(h>>8)
				}
			}
		}(b, end)
	}
	wg.Wait()
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	return nil
}
