package vision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Activation names of config.json's hidden_act that the blocks' MLP
// supports.
const (
	// GELUTanh is PyTorch's tanh approximation of GELU
	// ("gelu_pytorch_tanh", also "gelu_new"): Qwen3.5's choice.
	GELUTanh = "gelu_pytorch_tanh"
	// GELU is the exact (erf) GELU.
	GELU = "gelu"
)

// DefaultLayerNormEps is the epsilon of the tower's LayerNorms when
// config.json names none (Hugging Face hard-codes 1e-6).
const DefaultLayerNormEps = 1e-6

// DefaultRopeTheta is the base of the tower's 2-D rotary embedding when
// config.json names none.
const DefaultRopeTheta = 10000.0

// maxPatches bounds the patches of one Encode call, so that sizes computed
// from a grid cannot overflow and a corrupt grid cannot ask for unbounded
// memory: four times the 65536 patches (16384 merged tokens) of the real
// preprocessor's largest image.
const maxPatches = 1 << 18

// Config holds the hyperparameters of a Qwen3.5 vision tower: config.json's
// vision_config. Fields config.json leaves out take Hugging Face's
// Qwen3_5VisionConfig defaults (those of the 9B), except OutHiddenSize,
// which defaults to the text model's hidden size.
type Config struct {
	// Depth is the number of transformer blocks.
	Depth int `json:"depth"`
	// HiddenSize is the width D of the blocks.
	HiddenSize int `json:"hidden_size"`
	// NumHeads is the number of attention heads (head_dim = D/NumHeads).
	NumHeads int `json:"num_heads"`
	// IntermediateSize is the width of the blocks' MLP.
	IntermediateSize int `json:"intermediate_size"`
	// PatchSize is the side of a square patch in pixels.
	PatchSize int `json:"patch_size"`
	// TemporalPatchSize is the number of frames in one patch.
	TemporalPatchSize int `json:"temporal_patch_size"`
	// SpatialMergeSize is the side of the block of patches the merger
	// turns into one token.
	SpatialMergeSize int `json:"spatial_merge_size"`
	// NumPositionEmbeddings is the number of rows of the learned position
	// table, a square side*side.
	NumPositionEmbeddings int `json:"num_position_embeddings"`
	// OutHiddenSize is the width of the merger's output, the text model's
	// hidden size.
	OutHiddenSize int `json:"out_hidden_size"`
	// InChannels is the number of colour channels (3).
	InChannels int `json:"in_channels"`
	// HiddenAct is the blocks' MLP activation: GELUTanh (or its alias
	// "gelu_new") or GELU. The merger always uses the exact GELU.
	HiddenAct string `json:"hidden_act"`
	// LayerNormEps is the epsilon of every LayerNorm.
	LayerNormEps float64 `json:"layer_norm_eps"`
	// RopeTheta is the base of the 2-D rotary embedding.
	RopeTheta float64 `json:"-"`
}

// DefaultConfig returns Hugging Face's Qwen3_5VisionConfig defaults with
// the 9B's output width (4096).
func DefaultConfig() *Config {
	return &Config{
		Depth:                 27,
		HiddenSize:            1152,
		NumHeads:              16,
		IntermediateSize:      4304,
		PatchSize:             16,
		TemporalPatchSize:     2,
		SpatialMergeSize:      2,
		NumPositionEmbeddings: 2304,
		OutHiddenSize:         4096,
		InChannels:            3,
		HiddenAct:             GELUTanh,
		LayerNormEps:          DefaultLayerNormEps,
		RopeTheta:             DefaultRopeTheta,
	}
}

// LoadConfig reads the vision_config of the checkpoint directory
// modelDir's config.json. ok is false, with a nil error, when config.json
// has no vision_config (a text-only checkpoint).
func LoadConfig(modelDir string) (cfg *Config, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	if err != nil {
		return nil, false, fmt.Errorf("vision: %w", err)
	}
	cfg, ok, err = ParseConfig(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%w (in %s)", err, filepath.Join(modelDir, "config.json"))
	}
	return cfg, ok, nil
}

// ParseConfig decodes the vision_config of a config.json's bytes; ok is
// false, with a nil error, when there is none.
func ParseConfig(configJSON []byte) (cfg *Config, ok bool, err error) {
	var top struct {
		VisionConfig json.RawMessage `json:"vision_config"`
		TextConfig   *struct {
			HiddenSize int `json:"hidden_size"`
		} `json:"text_config"`
		HiddenSize int `json:"hidden_size"`
	}
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return nil, false, fmt.Errorf("vision: config.json: %w", err)
	}
	if len(top.VisionConfig) == 0 || string(top.VisionConfig) == "null" {
		return nil, false, nil
	}
	c := DefaultConfig()
	c.OutHiddenSize = 0
	c.LayerNormEps = 0
	var extra struct {
		RopeTheta      *float64 `json:"rope_theta"`
		RopeParameters *struct {
			RopeTheta *float64 `json:"rope_theta"`
		} `json:"rope_parameters"`
	}
	if err := json.Unmarshal(top.VisionConfig, c); err != nil {
		return nil, false, fmt.Errorf("vision: config.json vision_config: %w", err)
	}
	if err := json.Unmarshal(top.VisionConfig, &extra); err != nil {
		return nil, false, fmt.Errorf("vision: config.json vision_config: %w", err)
	}
	switch {
	case extra.RopeParameters != nil && extra.RopeParameters.RopeTheta != nil:
		c.RopeTheta = *extra.RopeParameters.RopeTheta
	case extra.RopeTheta != nil:
		c.RopeTheta = *extra.RopeTheta
	}
	if c.LayerNormEps == 0 {
		c.LayerNormEps = DefaultLayerNormEps
	}
	if c.OutHiddenSize == 0 {
		// Hugging Face's default (3584) is not Qwen3.5's: the merger
		// must produce the text model's width.
		if top.TextConfig != nil {
			c.OutHiddenSize = top.TextConfig.HiddenSize
		} else {
			c.OutHiddenSize = top.HiddenSize
		}
	}
	if err := c.Validate(); err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// Validate reports the first inconsistency of the hyperparameters.
func (c *Config) Validate() error {
	pos := map[string]int{
		"depth":                   c.Depth,
		"hidden_size":             c.HiddenSize,
		"num_heads":               c.NumHeads,
		"intermediate_size":       c.IntermediateSize,
		"patch_size":              c.PatchSize,
		"temporal_patch_size":     c.TemporalPatchSize,
		"spatial_merge_size":      c.SpatialMergeSize,
		"num_position_embeddings": c.NumPositionEmbeddings,
		"out_hidden_size":         c.OutHiddenSize,
		"in_channels":             c.InChannels,
	}
	for _, k := range []string{"depth", "hidden_size", "num_heads", "intermediate_size", "patch_size",
		"temporal_patch_size", "spatial_merge_size", "num_position_embeddings", "out_hidden_size", "in_channels"} {
		if v := pos[k]; v <= 0 || v > 1<<20 {
			return fmt.Errorf("vision: config %s = %d, want a positive size", k, v)
		}
	}
	if c.HiddenSize%c.NumHeads != 0 {
		return fmt.Errorf("vision: config hidden_size %d is not a multiple of num_heads %d", c.HiddenSize, c.NumHeads)
	}
	if c.HeadDim()%4 != 0 {
		return fmt.Errorf("vision: head_dim %d is not a multiple of 4 (the 2-D rotary splits it in quarters)", c.HeadDim())
	}
	if s := c.PositionSide(); s*s != c.NumPositionEmbeddings {
		return fmt.Errorf("vision: config num_position_embeddings %d is not a square", c.NumPositionEmbeddings)
	}
	if c.PatchDim() > 1<<24 {
		return fmt.Errorf("vision: patch of %d values is too large", c.PatchDim())
	}
	switch c.HiddenAct {
	case GELUTanh, "gelu_new", GELU:
	default:
		return fmt.Errorf("vision: config hidden_act %q is not supported (want %q or %q)", c.HiddenAct, GELUTanh, GELU)
	}
	if !(c.LayerNormEps > 0) || math.IsInf(c.LayerNormEps, 0) {
		return fmt.Errorf("vision: config layer_norm_eps %v, want a positive number", c.LayerNormEps)
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("vision: config rope_theta %v, want a number above 1", c.RopeTheta)
	}
	return nil
}

// HeadDim returns the width of one attention head.
func (c *Config) HeadDim() int { return c.HiddenSize / c.NumHeads }

// PatchDim returns the number of values of one flattened patch,
// InChannels*TemporalPatchSize*PatchSize*PatchSize (a row of pixel_values).
func (c *Config) PatchDim() int {
	return c.InChannels * c.TemporalPatchSize * c.PatchSize * c.PatchSize
}

// PositionSide returns the side of the learned position table
// (sqrt(NumPositionEmbeddings), rounded down).
func (c *Config) PositionSide() int {
	s := int(math.Sqrt(float64(c.NumPositionEmbeddings)))
	for s*s > c.NumPositionEmbeddings {
		s--
	}
	for (s+1)*(s+1) <= c.NumPositionEmbeddings {
		s++
	}
	return s
}

// ErrBadGrid is wrapped by the errors about a grid that the tower cannot
// encode.
var ErrBadGrid = errors.New("bad image grid")

// CheckGrid validates a grid (t, h, w in patches: positive, h and w
// multiples of SpatialMergeSize, at most 262144 patches) and returns its
// number of patches t*h*w and of output tokens t*h*w/merge². Its errors
// wrap ErrBadGrid.
func (c *Config) CheckGrid(grid [3]int) (patches, tokens int, err error) {
	t, h, w := grid[0], grid[1], grid[2]
	m := c.SpatialMergeSize
	if t <= 0 || h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("vision: grid %v: %w: sizes must be positive", grid, ErrBadGrid)
	}
	if h%m != 0 || w%m != 0 {
		return 0, 0, fmt.Errorf("vision: grid %v: %w: h and w must be multiples of spatial_merge_size %d", grid, ErrBadGrid, m)
	}
	if t > maxPatches || h > maxPatches || w > maxPatches || t*h > maxPatches || t*h*w > maxPatches {
		return 0, 0, fmt.Errorf("vision: grid %v: %w: more than %d patches", grid, ErrBadGrid, maxPatches)
	}
	patches = t * h * w
	return patches, patches / (m * m), nil
}

// Tokens returns the number of output tokens (image pads) of a grid,
// t*h*w/merge², or 0 for a grid CheckGrid rejects.
func (c *Config) Tokens(grid [3]int) int {
	_, n, err := c.CheckGrid(grid)
	if err != nil {
		return 0
	}
	return n
}
