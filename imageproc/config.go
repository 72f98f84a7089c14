package imageproc

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// MaxAspectRatio is smart_resize's limit on max(h, w) / min(h, w).
const MaxAspectRatio = 200

// Config holds the image processor's parameters (preprocessor_config.json).
type Config struct {
	// PatchSize is the side of a patch in pixels (patch_size).
	PatchSize int
	// MergeSize is the side of a block of patches merged into one token
	// (merge_size).
	MergeSize int
	// TemporalPatchSize is the number of frames per patch
	// (temporal_patch_size); an image is repeated that many times.
	TemporalPatchSize int
	// MinPixels and MaxPixels bound the resized image's pixel count
	// (size.shortest_edge / size.longest_edge, or min_pixels / max_pixels).
	MinPixels, MaxPixels int
	// Mean and Std normalize each channel after rescaling to [0, 1]
	// (image_mean, image_std).
	Mean, Std [3]float64
}

// DefaultConfig returns Qwen3.5's processor parameters: patch 16, merge 2,
// temporal patch 2, pixels in [65536, 16777216], mean and std 0.5. These are
// also the defaults for keys missing from a preprocessor_config.json.
func DefaultConfig() Config {
	return Config{
		PatchSize:         16,
		MergeSize:         2,
		TemporalPatchSize: 2,
		MinPixels:         65536,
		MaxPixels:         16777216,
		Mean:              [3]float64{0.5, 0.5, 0.5},
		Std:               [3]float64{0.5, 0.5, 0.5},
	}
}

// Factor returns PatchSize*MergeSize, the multiple both resized sides have.
func (c Config) Factor() int { return c.PatchSize * c.MergeSize }

// WithMaxPixels returns c with MaxPixels lowered to n when n is positive and
// smaller (a server's bound on the tokens per image); MinPixels is lowered
// too if it would exceed the new bound.
func (c Config) WithMaxPixels(n int) Config {
	if n > 0 && n < c.MaxPixels {
		c.MaxPixels = n
		c.MinPixels = min(c.MinPixels, n)
	}
	return c
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	switch {
	case c.PatchSize <= 0 || c.MergeSize <= 0 || c.TemporalPatchSize <= 0:
		return fmt.Errorf("%w: patch %d, merge %d, temporal patch %d must be positive",
			ErrConfig, c.PatchSize, c.MergeSize, c.TemporalPatchSize)
	case c.MinPixels < 0 || c.MaxPixels <= 0 || c.MinPixels > c.MaxPixels:
		return fmt.Errorf("%w: pixel bounds [%d, %d]", ErrConfig, c.MinPixels, c.MaxPixels)
	case c.MaxPixels < c.Factor()*c.Factor():
		return fmt.Errorf("%w: max pixels %d below one merged block (%d)",
			ErrConfig, c.MaxPixels, c.Factor()*c.Factor())
	}
	for i, s := range c.Std {
		if !(s > 0) || math.IsInf(s, 0) || math.IsNaN(c.Mean[i]) || math.IsInf(c.Mean[i], 0) {
			return fmt.Errorf("%w: channel %d mean %v std %v", ErrConfig, i, c.Mean[i], s)
		}
	}
	return nil
}

// rawConfig is the subset of preprocessor_config.json read here.
type rawConfig struct {
	Size *struct {
		ShortestEdge *int `json:"shortest_edge"`
		LongestEdge  *int `json:"longest_edge"`
	} `json:"size"`
	MinPixels         *int      `json:"min_pixels"`
	MaxPixels         *int      `json:"max_pixels"`
	PatchSize         *int      `json:"patch_size"`
	MergeSize         *int      `json:"merge_size"`
	TemporalPatchSize *int      `json:"temporal_patch_size"`
	ImageMean         []float64 `json:"image_mean"`
	ImageStd          []float64 `json:"image_std"`
	RescaleFactor     *float64  `json:"rescale_factor"`
	Resample          *int      `json:"resample"`
	DoResize          *bool     `json:"do_resize"`
	DoRescale         *bool     `json:"do_rescale"`
	DoNormalize       *bool     `json:"do_normalize"`
	DoConvertRGB      *bool     `json:"do_convert_rgb"`
}

// ParseConfig parses the contents of a preprocessor_config.json. Keys absent
// from the file take DefaultConfig's values. The pixel bounds are read from
// size.shortest_edge / size.longest_edge (Qwen3.5's file; despite the names
// they are pixel counts) or the top-level min_pixels / max_pixels of older
// files; a top-level key wins, as in HF's processor, where explicit
// min_pixels / max_pixels override size.
// Settings this package does not implement (a resample other than BICUBIC,
// a rescale factor other than 1/255, disabled resize/rescale/normalize/RGB
// conversion) are refused rather than silently ignored.
func ParseConfig(data []byte) (Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c := DefaultConfig()
	setInt := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	if s := raw.Size; s != nil {
		setInt(&c.MinPixels, s.ShortestEdge)
		setInt(&c.MaxPixels, s.LongestEdge)
	}
	setInt(&c.MinPixels, raw.MinPixels)
	setInt(&c.MaxPixels, raw.MaxPixels)
	setInt(&c.PatchSize, raw.PatchSize)
	setInt(&c.MergeSize, raw.MergeSize)
	setInt(&c.TemporalPatchSize, raw.TemporalPatchSize)
	for name, v := range map[string][]float64{"image_mean": raw.ImageMean, "image_std": raw.ImageStd} {
		if v != nil && len(v) != 3 {
			return Config{}, fmt.Errorf("%w: %s has %d values, want 3", ErrConfig, name, len(v))
		}
	}
	if raw.ImageMean != nil {
		copy(c.Mean[:], raw.ImageMean)
	}
	if raw.ImageStd != nil {
		copy(c.Std[:], raw.ImageStd)
	}
	if raw.Resample != nil && *raw.Resample != 3 {
		return Config{}, fmt.Errorf("%w: resample %d (only BICUBIC = 3 is implemented)", ErrConfig, *raw.Resample)
	}
	if raw.RescaleFactor != nil && math.Abs(*raw.RescaleFactor-1.0/255) > 1e-12 {
		return Config{}, fmt.Errorf("%w: rescale_factor %v (only 1/255 is implemented)", ErrConfig, *raw.RescaleFactor)
	}
	for name, b := range map[string]*bool{"do_resize": raw.DoResize, "do_rescale": raw.DoRescale,
		"do_normalize": raw.DoNormalize, "do_convert_rgb": raw.DoConvertRGB} {
		if b != nil && !*b {
			return Config{}, fmt.Errorf("%w: %s false is not implemented", ErrConfig, name)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads dir/preprocessor_config.json (see ParseConfig).
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "preprocessor_config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// SmartResize returns the size (height, width) an h x w image is resized to,
// as HF's smart_resize(h, w, factor, min_pixels, max_pixels) computes it:
// each side rounded to a multiple of factor = PatchSize*MergeSize (Python's
// round: half to even); if the area then exceeds MaxPixels both sides are
// scaled down by sqrt(h*w/MaxPixels) and floored to multiples of factor (at
// least factor); if it is below MinPixels they are scaled up by
// sqrt(MinPixels/(h*w)) and ceiled. An aspect ratio above 200 wraps
// ErrAspectRatio. The float64 operations are those of the Python code, in the
// same order.
func (c Config) SmartResize(h, w int) (int, int, error) {
	if h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("%w: size %dx%d", ErrCorrupt, w, h)
	}
	if err := c.Validate(); err != nil {
		return 0, 0, err
	}
	if float64(max(h, w))/float64(min(h, w)) > MaxAspectRatio {
		return 0, 0, fmt.Errorf("%w: %dx%d (max %d:1)", ErrAspectRatio, w, h, MaxAspectRatio)
	}
	f := c.Factor()
	ff := float64(f)
	fh, fw := float64(h), float64(w)
	hb := int(math.RoundToEven(fh/ff)) * f
	wb := int(math.RoundToEven(fw/ff)) * f
	if hb*wb > c.MaxPixels {
		beta := math.Sqrt(float64(h*w) / float64(c.MaxPixels))
		hb = max(f, int(math.Floor(fh/beta/ff))*f)
		wb = max(f, int(math.Floor(fw/beta/ff))*f)
	} else if hb*wb < c.MinPixels {
		beta := math.Sqrt(float64(c.MinPixels) / float64(h*w))
		hb = int(math.Ceil(fh*beta/ff)) * f
		wb = int(math.Ceil(fw*beta/ff)) * f
	}
	// HF has no clamp here: a side rounding to 0 is only possible with
	// MinPixels == 0 (otherwise the ceil branch applies), where HF would go
	// on to fail; one factor is the smallest usable size.
	return max(hb, f), max(wb, f), nil
}
