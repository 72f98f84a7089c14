// Package randmodel writes random Qwen3.5 checkpoints in the real Hugging
// Face layout (config.json, generation_config.json, model.safetensors with
// BF16 weights and the F32 tensors Qwen3.5 stores as F32). Weights are scaled
// so that activations stay healthy through every layer, so tests, benchmarks
// and demos can run the full model without downloading one.
package randmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
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
}

// layerTypes returns the shape's schedule.
func (s Shape) layerTypes() []string {
	if s.Schedule != nil {
		return s.Schedule
	}
	return LayerTypes(s.Layers)
}

// Shapes are the shapes make-random knows: the two test checkpoints' and the
// real Qwen3.5-9B's.
func Shapes() []Shape {
	return []Shape{
		{Name: "tiny", Hidden: 64, Intermediate: 160, Layers: 4, Vocab: 1024, Heads: 4, KVHeads: 2, HeadDim: 32,
			LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyHeadDim: 16, LinearValueHeadDim: 16, Tied: true, MaxPositionEmbeddings: 262144},
		{Name: "small", Hidden: 256, Intermediate: 704, Layers: 8, Vocab: 4096, Heads: 8, KVHeads: 2, HeadDim: 64,
			LinearKeyHeads: 4, LinearValueHeads: 8, LinearKeyHeadDim: 32, LinearValueHeadDim: 32, MaxPositionEmbeddings: 262144},
		{Name: "qwen3.5-9b", Hidden: 4096, Intermediate: 12288, Layers: 32, Vocab: 248320, Heads: 16, KVHeads: 4, HeadDim: 256,
			LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, MaxPositionEmbeddings: 262144},
	}
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
	return map[string]any{
		"architectures":         []string{"Qwen3_5ForConditionalGeneration"},
		"model_type":            "qwen3_5",
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
		embedStd = 0.4
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
			tensorSpec{name: l + "mlp.gate_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
			tensorSpec{name: l + "mlp.up_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
			tensorSpec{name: l + "mlp.down_proj.weight", shape: []int{h, s.Intermediate}, fill: fanIn(s.Intermediate, 0.8)},
		)
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
	// Progress, when set, is called after each tensor with the bytes
	// written so far and in all.
	Progress func(done, total int64)
	// MTP adds a multi-token-prediction head (mtp.*, 15 tensors: fc,
	// three norms and one full-attention layer). Its fc gets 1.6 x identity
	// added to the embedding half, a copy bias that makes drafts repeat
	// the token fed, so that speculative decoding accepts some drafts
	// (a purely random head's drafts are essentially never accepted).
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
	return []tensorSpec{
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
		{name: l + "mlp.gate_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.up_proj.weight", shape: []int{s.Intermediate, h}, fill: fanIn(h, 1)},
		{name: l + "mlp.down_proj.weight", shape: []int{h, s.Intermediate}, fill: fanIn(s.Intermediate, 0.8)},
		{name: l + "self_attn.q_proj.weight", shape: []int{2 * s.Heads * hd, h}, fill: fanIn(h, 1)},
		{name: l + "self_attn.k_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
		{name: l + "self_attn.v_proj.weight", shape: []int{s.KVHeads * hd, h}, fill: fanIn(h, 1)},
		{name: l + "self_attn.o_proj.weight", shape: []int{h, s.Heads * hd}, fill: fanIn(s.Heads*hd, 1.2)},
		{name: l + "self_attn.q_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
		{name: l + "self_attn.k_norm.weight", shape: []int{hd}, fill: normal(0.2, 0.15)},
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

// Write creates dir (if needed) and writes a random checkpoint of shape s.
// The same shape and seed always give the same bytes.
func Write(dir string, s Shape, o Options) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	cfg := s.Config()
	if o.Vision {
		ids := s.VisionTokens().or(o.ImageTokens)
		cfg["image_token_id"], cfg["video_token_id"] = ids.ImagePad, ids.VideoPad
		cfg["vision_start_token_id"], cfg["vision_end_token_id"] = ids.VisionStart, ids.VisionEnd
		tw := s.Tower()
		cfg["vision_config"] = tw.config(s.Hidden)
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
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), s.GenerationConfig(o.EOS)); err != nil {
		return err
	}
	specs := s.tensors()
	if o.MTP {
		specs = append(specs, s.mtpTensors()...)
	}
	if o.Vision {
		specs = append(specs, s.Tower().tensors(s.Hidden)...)
	}
	infos := make([]safetensors.TensorInfo, len(specs))
	var total int64
	for i, t := range specs {
		dt := safetensors.BF16
		if t.f32 {
			dt = safetensors.F32
		}
		infos[i] = safetensors.TensorInfo{Name: t.name, DType: dt, Shape: t.shape}
		total += int64(elements(t.shape) * dt.Size())
	}
	w, err := safetensors.NewWriter(filepath.Join(dir, "model.safetensors"), infos, map[string]string{"format": "pt"})
	if err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	defer w.Abort()
	var done int64
	for _, t := range specs {
		data := generate(t, o.Seed)
		if err := w.WriteTensor(t.name, data); err != nil {
			return fmt.Errorf("randmodel: %w", err)
		}
		done += int64(len(data))
		if o.Progress != nil {
			o.Progress(done, total)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("randmodel: %w", err)
	}
	return nil
}

// generate fills one tensor. Each block of rows has its own random stream
// derived from the seed and the tensor name, so blocks fill in parallel and
// the result does not depend on the number of cores.
func generate(t tensorSpec, seed uint64) []byte {
	n := elements(t.shape)
	size := 2
	if t.f32 {
		size = 4
	}
	out := make([]byte, n*size)
	const block = 1 << 16
	nameHash := fnv64(t.name)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for lo := 0; lo < n; lo += block {
		hi := min(lo+block, n)
		wg.Add(1)
		sem <- struct{}{}
		go func(lo, hi int) {
			defer func() { <-sem; wg.Done() }()
			r := rand.New(rand.NewPCG(seed^nameHash, uint64(lo)))
			for i := lo; i < hi; i++ {
				v := t.fill(r, i)
				if t.f32 {
					putU32(out[4*i:], math.Float32bits(v))
				} else {
					b := half.F32ToBF16(v)
					out[2*i], out[2*i+1] = byte(b), byte(b>>8)
				}
			}
		}(lo, hi)
	}
	wg.Wait()
	return out
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
