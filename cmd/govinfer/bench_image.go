package main

import (
	"context"
	"errors"
	"fmt"
	goio "io"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/model/vision"
)

// imageBenchResult is what "govinfer bench --image-tokens N --json" prints:
// the vision tower's encoding of one image of N merged tokens (encoder
// only: no decoding or resizing), and the text model's prefill of a prompt
// holding that image against a text prompt of the same length, in the
// same run.
type imageBenchResult struct {
	Model   string `json:"model"`
	Backend string `json:"backend"`
	Threads int    `json:"threads"`
	Repeat  int    `json:"repeat"`
	// ImageTokens is the image's merged tokens, ImageGrid its (t, h, w)
	// patches and ImagePixels its side lengths (height, width).
	ImageTokens int    `json:"image_tokens"`
	ImageGrid   [3]int `json:"image_grid_thw"`
	ImagePixels [2]int `json:"image_pixels"`
	// Medians over the repeats.
	VisionEncodeSeconds         float64 `json:"vision_encode_seconds"`
	VisionEncodeTokensPerSecond float64 `json:"vision_encode_tokens_per_second"`
	// The prompt is <|vision_start|>, the image's tokens and one text token.
	PromptTokens                int     `json:"prompt_tokens"`
	ImagePrefillTokensPerSecond float64 `json:"image_prefill_tokens_per_second"`
	TextPrefillTokensPerSecond  float64 `json:"text_prefill_tokens_per_second"`
	ImagePrefillRatio           float64 `json:"image_prefill_ratio"`
}

// imageBenchKeys is the --image-tokens part of bench's --json help.
const imageBenchKeys = "with --image-tokens: model, backend, threads, repeat, image_tokens, image_grid_thw, image_pixels, " +
	"vision_encode_seconds, vision_encode_tokens_per_second, prompt_tokens, image_prefill_tokens_per_second, " +
	"text_prefill_tokens_per_second, image_prefill_ratio"

// imageGrid returns the grid of an image of n merged tokens: a merged
// rows x cols with rows*cols = n, as square as n allows.
func imageGrid(n, merge int) [3]int {
	rows := int(math.Sqrt(float64(n)))
	for n%rows != 0 {
		rows--
	}
	return [3]int{1, rows * merge, n / rows * merge}
}

// benchImage runs the --image-tokens benchmark on the model at dir (its
// tower as vision.Resolve finds it), whose text model m is open on be.
func benchImage(ctx context.Context, m *model.Model, be compute.Backend, dir string, tokens, repeat, threads int) (*imageBenchResult, error) {
	setup, err := vision.Resolve(dir, vision.ResolveOptions{TextHidden: m.Config().HiddenSize})
	if errors.Is(err, vision.ErrNoTower) {
		return nil, fmt.Errorf("%s has no vision tower (no vision_config in config.json, or no model.visual.* tensors)", dir)
	}
	if err != nil {
		return nil, err
	}
	tower, err := setup.Open(vision.Options{Backend: be})
	if err != nil {
		return nil, err
	}
	defer tower.Close()
	c := tower.Config()
	grid := imageGrid(tokens, c.SpatialMergeSize)
	if _, _, err := c.CheckGrid(grid); err != nil {
		return nil, err
	}
	pixels := make([]float32, grid[0]*grid[1]*grid[2]*c.PatchDim())
	r := rand.New(rand.NewPCG(1, 2))
	for i := range pixels {
		pixels[i] = r.Float32()*2 - 1 // normalized values, as the processor gives
	}
	// <|vision_start|>, the image's pads, one text token.
	text := benchPrompt(m.Config(), tokens+2, 3)
	prompt := make([]int, 0, tokens+2)
	if setup.VisionStart >= 0 {
		prompt = append(prompt, setup.VisionStart)
	}
	for range tokens {
		prompt = append(prompt, setup.ImageToken)
	}
	prompt = append(prompt, text[0])
	text = text[:len(prompt)]
	pos, delta, err := vision.RopeIndex(prompt, setup.ImageToken, setup.VisionStart, [][3]int{grid}, c.SpatialMergeSize)
	if err != nil {
		return nil, err
	}
	positions := make([][3]int, len(prompt))
	for i := range positions {
		positions[i] = [3]int{pos[0][i], pos[1][i], pos[2][i]}
	}

	res := &imageBenchResult{Backend: be.Name(), Threads: threads, Repeat: repeat, ImageTokens: tokens, ImageGrid: grid,
		ImagePixels: [2]int{grid[1] * c.PatchSize, grid[2] * c.PatchSize}, PromptTokens: len(prompt)}
	// Warm up: a small image through the tower, and a short prompt.
	if _, err := tower.Encode(ctx, pixels[:c.SpatialMergeSize*c.SpatialMergeSize*c.PatchDim()], [3]int{1, c.SpatialMergeSize, c.SpatialMergeSize}); err != nil {
		return nil, err
	}
	if _, err := prefillOnce(ctx, m, text[:min(32, len(text))], nil, nil, 0); err != nil {
		return nil, err
	}
	var enc, img, txt []float64
	var embeds []float32
	for range repeat {
		start := time.Now()
		if embeds, err = tower.Encode(ctx, pixels, grid); err != nil {
			return nil, err
		}
		enc = append(enc, time.Since(start).Seconds())
		// The encoder's garbage is collected now, not in a timed prefill,
		// and the two prompts take turns going first (img, text, text,
		// img), so that both see the same machine.
		runtime.GC()
		span := []model.EmbedSpan{{Index: len(prompt) - tokens - 1, Rows: embeds}}
		for _, image := range []bool{true, false, false, true} {
			if image {
				rate, err := prefillOnce(ctx, m, prompt, span, positions, delta)
				if err != nil {
					return nil, err
				}
				img = append(img, rate)
			} else {
				rate, err := prefillOnce(ctx, m, text, nil, nil, 0)
				if err != nil {
					return nil, err
				}
				txt = append(txt, rate)
			}
		}
	}
	res.VisionEncodeSeconds = median(enc)
	res.VisionEncodeTokensPerSecond = float64(tokens) / res.VisionEncodeSeconds
	res.ImagePrefillTokensPerSecond, res.TextPrefillTokensPerSecond = median(img), median(txt)
	res.ImagePrefillRatio = res.ImagePrefillTokensPerSecond / res.TextPrefillTokensPerSecond
	return res, nil
}

// prefillOnce prefills ids (with embeds and positions, when given) into a
// new sequence in one step and returns the rate in tokens per second.
func prefillOnce(ctx context.Context, m *model.Model, ids []int, embeds []model.EmbedSpan, positions [][3]int, delta int) (float64, error) {
	seq, err := m.NewSequence()
	if err != nil {
		return 0, err
	}
	defer seq.Close()
	if err := seq.Reserve(len(ids) + 1); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: ids, Embeds: embeds, Positions: positions}}); err != nil {
		return 0, err
	}
	rate := float64(len(ids)) / time.Since(start).Seconds()
	seq.SetRopeDelta(delta)
	return rate, nil
}

// print writes the --image-tokens result as text.
func (r *imageBenchResult) print(w goio.Writer) {
	fmt.Fprintf(w, "image of %d tokens (%dx%d pixels, grid %v): encoded in %.2f s (%.1f tokens/s), encoder only\n",
		r.ImageTokens, r.ImagePixels[0], r.ImagePixels[1], r.ImageGrid, r.VisionEncodeSeconds, r.VisionEncodeTokensPerSecond)
	fmt.Fprintf(w, "prefill of %d tokens: with the image %.2f tokens/s, text %.2f tokens/s, ratio %.3f\n",
		r.PromptTokens, r.ImagePrefillTokensPerSecond, r.TextPrefillTokensPerSecond, r.ImagePrefillRatio)
}
