package model

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/modelpath"
)

// Layer kinds of the Qwen3.5 schedule, as written in config.json's layer_types.
const (
	LinearAttention = "linear_attention" // Gated DeltaNet mixer
	FullAttention   = "full_attention"   // gated softmax attention mixer
)

// Config holds the text-model hyperparameters of a Qwen3.5 checkpoint.
type Config struct {
	HiddenSize       int `json:"hidden_size"`
	IntermediateSize int `json:"intermediate_size"`
	NumLayers        int `json:"num_hidden_layers"`
	VocabSize        int `json:"vocab_size"`

	NumHeads   int `json:"num_attention_heads"`
	NumKVHeads int `json:"num_key_value_heads"`
	HeadDim    int `json:"head_dim"`

	LinearNumKeyHeads   int `json:"linear_num_key_heads"`
	LinearNumValueHeads int `json:"linear_num_value_heads"`
	LinearKeyHeadDim    int `json:"linear_key_head_dim"`
	LinearValueHeadDim  int `json:"linear_value_head_dim"`
	LinearConvKernel    int `json:"linear_conv_kernel_dim"`

	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"-"`
	PartialRotaryFactor   float64 `json:"-"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	FullAttentionInterval int     `json:"full_attention_interval"`

	// LayerTypes gives each layer's mixer: LinearAttention or FullAttention.
	LayerTypes []string `json:"layer_types"`
	// TieWordEmbeddings makes the embedding matrix the output matrix.
	TieWordEmbeddings bool `json:"tie_word_embeddings"`
	// EOSTokenIDs are the end-of-sequence ids of the config (may be empty).
	EOSTokenIDs []int `json:"-"`
	// The mixture-of-experts MLP of qwen3_5_moe checkpoints: NumExperts
	// experts (none: a dense MLP of IntermediateSize) of width
	// MoEIntermediateSize, of which each token uses NumExpertsPerTok, and a
	// shared expert of width SharedExpertIntermediateSize. A MoE model does
	// not use IntermediateSize.
	NumExperts                   int `json:"num_experts"`
	NumExpertsPerTok             int `json:"num_experts_per_tok"`
	MoEIntermediateSize          int `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize int `json:"shared_expert_intermediate_size"`

	// FP8Block is the [rows, columns] block of an FP8 checkpoint's weight
	// scales (quantization_config.weight_block_size of quant_method
	// "fp8"); nil for other checkpoints.
	FP8Block []int `json:"-"`

	// MRopeSection is rope_parameters.mrope_section: how the rotary pairs
	// split between the temporal, height and width positions of
	// multimodal inputs (text positions are the same in all three, so the
	// text model does not need it; GGUF files record it).
	MRopeSection []int `json:"-"`
}

// rawConfig mirrors the parts of config.json that need custom decoding.
type rawConfig struct {
	Config
	RopeParameters *struct {
		RopeTheta           *float64 `json:"rope_theta"`
		PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
		MRopeSection        []int    `json:"mrope_section"`
	} `json:"rope_parameters"`
	RopeTheta           *float64        `json:"rope_theta"`
	PartialRotaryFactor *float64        `json:"partial_rotary_factor"`
	EOSTokenID          json.RawMessage `json:"eos_token_id"`
	TieWordEmbeddings   *bool           `json:"tie_word_embeddings"`
	ModelType           string          `json:"model_type"`
}

// ModelTypes are the config.json model_type values of Qwen3.5 checkpoints:
// the multimodal classes' (top level) and their text models' (text_config,
// or the top level of a text-only export), dense and mixture of experts.
var ModelTypes = []string{"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}

// ErrArchitecture is wrapped by the errors of configs and GGUF files of
// models other than Qwen3.5's.
var ErrArchitecture = errors.New("not a Qwen3.5 model")

// checkModelType refuses a config whose model_type (top, else text's: the
// text_config's) is not Qwen3.5's, naming it. A config without one passes
// only when it is flat and has Qwen3.5's linear_num_key_heads.
func checkModelType(top, text string, archs []string, nested, qwen35Keys bool) error {
	mt := cmp.Or(top, text)
	if mt == "" {
		if !nested && qwen35Keys {
			return nil
		}
		return fmt.Errorf("%w: no model_type, and not a flat text config with Qwen3.5's keys (linear_num_key_heads, ...); govinfer runs Qwen3.5 checkpoints (%s)",
			ErrArchitecture, modelTypeList())
	}
	for _, t := range []string{top, text} {
		if t == "" || slices.Contains(ModelTypes, t) {
			continue
		}
		class := ""
		if len(archs) > 0 {
			class = " (" + strings.Join(archs, ", ") + ")"
		}
		return fmt.Errorf("%w: model_type is %q%s; govinfer runs Qwen3.5 checkpoints (%s)", ErrArchitecture, t, class, modelTypeList())
	}
	return nil
}

// modelTypeList lists ModelTypes for the errors.
func modelTypeList() string {
	n := len(ModelTypes)
	return "model_type " + strings.Join(ModelTypes[:n-1], ", ") + " or " + ModelTypes[n-1]
}

// LoadConfig reads the configuration of the checkpoint at path: its
// config.json, or the metadata of a GGUF file (path a .gguf file or a
// directory holding one; see ConfigFromGGUF).
func LoadConfig(path string) (*Config, error) {
	ck, err := modelpath.Resolve(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	path = ck.Path
	if file, ok, err := locateGGUF(path); err != nil {
		return nil, err
	} else if ok {
		f, err := gguf.Open(file)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		defer f.Close()
		return ConfigFromGGUF(f)
	}
	dir := path
	path = filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: reading config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a config.json, nested (text settings under
// text_config, as the multimodal Qwen3.5 checkpoints) or flat (a text-only
// export), fills HF's defaults and validates the result. A config of
// another architecture is refused (ErrArchitecture): its model_type must
// be one of ModelTypes, and only a flat config with Qwen3.5's keys may go
// without one.
func ParseConfig(data []byte) (*Config, error) {
	var top struct {
		ModelType          string          `json:"model_type"`
		Architectures      []string        `json:"architectures"`
		LinearKeyHeads     json.RawMessage `json:"linear_num_key_heads"`
		TextConfig         json.RawMessage `json:"text_config"`
		TieWordEmbeddings  *bool           `json:"tie_word_embeddings"`
		QuantizationConfig *struct {
			QuantMethod     string `json:"quant_method"`
			Fmt             string `json:"fmt"`
			WeightBlockSize []int  `json:"weight_block_size"`
		} `json:"quantization_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config is not valid JSON: %w", err)
	}
	text := data
	nested := len(top.TextConfig) > 0 && string(top.TextConfig) != "null"
	if nested {
		text = top.TextConfig
	}
	var r rawConfig
	if err := json.Unmarshal(text, &r); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkModelType(top.ModelType, r.ModelType, top.Architectures, nested, len(top.LinearKeyHeads) > 0); err != nil {
		return nil, err
	}
	c := r.Config
	// The multimodal class is configured by the top-level flag when present.
	switch {
	case top.TieWordEmbeddings != nil:
		c.TieWordEmbeddings = *top.TieWordEmbeddings
	case r.TieWordEmbeddings != nil:
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
	c.RopeTheta = 10000
	c.PartialRotaryFactor = 0.25 // HF's default for Qwen3.5 when absent
	if p := r.PartialRotaryFactor; p != nil {
		c.PartialRotaryFactor = *p
	}
	if t := r.RopeTheta; t != nil {
		c.RopeTheta = *t
	}
	if rp := r.RopeParameters; rp != nil {
		if rp.RopeTheta != nil {
			c.RopeTheta = *rp.RopeTheta
		}
		if rp.PartialRotaryFactor != nil {
			c.PartialRotaryFactor = *rp.PartialRotaryFactor
		}
		c.MRopeSection = rp.MRopeSection
	}
	if len(r.EOSTokenID) > 0 {
		ids, err := parseIDs(r.EOSTokenID)
		if err != nil {
			return nil, fmt.Errorf("eos_token_id: %w", err)
		}
		c.EOSTokenIDs = ids
	}
	if q := top.QuantizationConfig; q != nil {
		switch {
		case q.QuantMethod != "fp8":
			return nil, fmt.Errorf("quantization_config: quant_method %q is not supported (govinfer reads BF16, F16, F32 and block-scaled FP8 checkpoints, and GGUF files)", q.QuantMethod)
		case q.Fmt != "" && q.Fmt != "e4m3":
			return nil, fmt.Errorf("quantization_config: FP8 format %q is not supported (want e4m3)", q.Fmt)
		case q.WeightBlockSize == nil:
			c.FP8Block = []int{128, 128}
		case len(q.WeightBlockSize) != 2 || q.WeightBlockSize[0] <= 0 || q.WeightBlockSize[1] <= 0 || q.WeightBlockSize[0] > MaxWidth || q.WeightBlockSize[1] > MaxWidth:
			return nil, fmt.Errorf("quantization_config: weight_block_size %v is not two positive sizes", q.WeightBlockSize)
		default:
			c.FP8Block = q.WeightBlockSize
		}
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.LinearConvKernel == 0 {
		c.LinearConvKernel = 4
	}
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if err := c.checkSizes(); err != nil {
		return nil, err
	}
	if len(c.LayerTypes) == 0 {
		interval := c.FullAttentionInterval
		if interval == 0 {
			interval = 4
		}
		c.LayerTypes = defaultLayerTypes(c.NumLayers, interval)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// defaultLayerTypes is the schedule of n layers where every interval-th
// layer is full attention and the others linear attention.
func defaultLayerTypes(n, interval int) []string {
	types := make([]string, max(n, 0))
	for i := range types {
		types[i] = LinearAttention
		if (i+1)%interval == 0 {
			types[i] = FullAttention
		}
	}
	return types
}

// parseIDs decodes a token id given as a number, a list of numbers or null.
func parseIDs(raw json.RawMessage) ([]int, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", raw)
	}
	return many, nil
}

// Limits on config.json's sizes, far above any real Qwen3.5 and low enough
// that no size, product of two sizes or per-layer list overflows or
// allocates before the weights are compared with them (see New).
const (
	MaxLayers = 1 << 12
	MaxWidth  = 1 << 20
	MaxVocab  = 1 << 24
	// MaxExperts bounds num_experts (the largest release has 512).
	MaxExperts = 1 << 14
)

// checkSizes refuses absurd sizes before anything is allocated for them.
func (c *Config) checkSizes() error {
	var errs []error
	bound := func(name string, v, limit int) {
		if v > limit {
			errs = append(errs, fmt.Errorf("%s is %d; at most %d is supported", name, v, limit))
		}
	}
	bound("num_hidden_layers", c.NumLayers, MaxLayers)
	bound("layer_types", len(c.LayerTypes), MaxLayers)
	bound("vocab_size", c.VocabSize, MaxVocab)
	bound("num_experts", c.NumExperts, MaxExperts)
	for _, w := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize}, {"num_attention_heads", c.NumHeads},
		{"num_key_value_heads", c.NumKVHeads}, {"head_dim", c.HeadDim}, {"linear_num_key_heads", c.LinearNumKeyHeads},
		{"linear_num_value_heads", c.LinearNumValueHeads}, {"linear_key_head_dim", c.LinearKeyHeadDim},
		{"linear_value_head_dim", c.LinearValueHeadDim}, {"linear_conv_kernel_dim", c.LinearConvKernel},
		{"moe_intermediate_size", c.MoEIntermediateSize}, {"shared_expert_intermediate_size", c.SharedExpertIntermediateSize},
	} {
		bound(w.name, w.v, MaxWidth)
	}
	return errors.Join(errs...)
}

// Validate checks that the hyperparameters describe a model this engine can
// run.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	if err := c.checkSizes(); err != nil {
		return err
	}
	positive("hidden_size", c.HiddenSize)
	if c.MoE() {
		positive("num_experts_per_tok", c.NumExpertsPerTok)
		positive("moe_intermediate_size", c.MoEIntermediateSize)
		positive("shared_expert_intermediate_size", c.SharedExpertIntermediateSize)
		if c.NumExpertsPerTok > c.NumExperts {
			errs = append(errs, fmt.Errorf("num_experts_per_tok %d is more than num_experts %d", c.NumExpertsPerTok, c.NumExperts))
		}
	} else {
		if c.NumExperts < 0 {
			errs = append(errs, fmt.Errorf("num_experts must not be negative, got %d", c.NumExperts))
		}
		positive("intermediate_size", c.IntermediateSize)
	}
	positive("num_hidden_layers", c.NumLayers)
	positive("vocab_size", c.VocabSize)
	if len(c.LayerTypes) != c.NumLayers {
		errs = append(errs, fmt.Errorf("layer_types has %d entries for %d layers", len(c.LayerTypes), c.NumLayers))
	}
	var linear, full bool
	for i, t := range c.LayerTypes {
		switch t {
		case LinearAttention:
			linear = true
		case FullAttention:
			full = true
		default:
			errs = append(errs, fmt.Errorf("layer_types[%d] = %q: want %q or %q", i, t, LinearAttention, FullAttention))
		}
	}
	if full {
		positive("num_attention_heads", c.NumHeads)
		positive("num_key_value_heads", c.NumKVHeads)
		positive("head_dim", c.HeadDim)
		if c.NumKVHeads > 0 && c.NumHeads%c.NumKVHeads != 0 {
			errs = append(errs, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads))
		}
		if rd := c.RotaryDim(); rd <= 0 || rd%2 != 0 || rd > c.HeadDim {
			errs = append(errs, fmt.Errorf("rotary dim %d (head_dim %d x partial_rotary_factor %g) must be even and in (0, head_dim]", rd, c.HeadDim, c.PartialRotaryFactor))
		}
		if c.RopeTheta <= 0 || math.IsInf(c.RopeTheta, 0) {
			errs = append(errs, fmt.Errorf("rope_theta must be positive, got %g", c.RopeTheta))
		}
	}
	if linear {
		positive("linear_num_key_heads", c.LinearNumKeyHeads)
		positive("linear_num_value_heads", c.LinearNumValueHeads)
		positive("linear_key_head_dim", c.LinearKeyHeadDim)
		positive("linear_value_head_dim", c.LinearValueHeadDim)
		positive("linear_conv_kernel_dim", c.LinearConvKernel)
		if c.LinearNumKeyHeads > 0 && c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			errs = append(errs, fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearNumValueHeads, c.LinearNumKeyHeads))
		}
	}
	if c.RMSNormEps <= 0 {
		errs = append(errs, fmt.Errorf("rms_norm_eps must be positive, got %g", c.RMSNormEps))
	}
	return errors.Join(errs...)
}

// MoE reports whether every layer's MLP is a mixture of experts
// (qwen3_5_moe checkpoints).
func (c *Config) MoE() bool { return c.NumExperts > 0 }

// MLPWidth returns the widest hidden layer of a layer's MLP: the dense
// MLP's, or the larger of an expert's and the shared expert's.
func (c *Config) MLPWidth() int {
	if c.MoE() {
		return max(c.MoEIntermediateSize, c.SharedExpertIntermediateSize)
	}
	return c.IntermediateSize
}

// RotaryDim returns the number of leading head dimensions that rope rotates.
func (c *Config) RotaryDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// KeyDim returns the width of all Gated DeltaNet key heads together.
func (c *Config) KeyDim() int { return c.LinearNumKeyHeads * c.LinearKeyHeadDim }

// ValueDim returns the width of all Gated DeltaNet value heads together.
func (c *Config) ValueDim() int { return c.LinearNumValueHeads * c.LinearValueHeadDim }

// ConvDim returns the number of channels of the Gated DeltaNet convolution
// (q, k and v together).
func (c *Config) ConvDim() int { return 2*c.KeyDim() + c.ValueDim() }

// MaxContext returns the longest sequence the model supports.
func (c *Config) MaxContext() int {
	if c.MaxPositionEmbeddings > 0 {
		return c.MaxPositionEmbeddings
	}
	return 262144
}
