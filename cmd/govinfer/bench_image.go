package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goio "io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	// The prompt is <|vision_start|>, the image's tokens, <|vision_end|>.
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

// benchImage runs the --image-tokens benchmark on the checkpoint dir,
// whose text model m is open on be.
func benchImage(ctx context.Context, m *model.Model, be compute.Backend, dir string, tokens, repeat, threads int) (*imageBenchResult, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, errors.New("needs a checkpoint directory with a vision tower (a GGUF file has none here)")
	}
	tower, err := vision.Open(dir, vision.Options{Backend: be})
	if err != nil {
		return nil, err
	}
	defer tower.Close()
	ids, err := readVisionIDs(dir)
	if err != nil {
		return nil, err
	}
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
	prompt := make([]int, 0, tokens+2)
	prompt = append(prompt, ids.start)
	for range tokens {
		prompt = append(prompt, ids.pad)
	}
	prompt = append(prompt, ids.end)
	pos, delta, err := vision.RopeIndex(prompt, ids.pad, ids.start, [][3]int{grid}, c.SpatialMergeSize)
	if err != nil {
		return nil, err
	}
	positions := make([][3]int, len(prompt))
	for i := range positions {
		positions[i] = [3]int{pos[0][i], pos[1][i], pos[2][i]}
	}
	text := benchPrompt(m.Config(), len(prompt), 3)

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
		span := []model.EmbedSpan{{Index: 1, Rows: embeds}}
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

// visionIDs are the special ids of a checkpoint with a vision tower.
type visionIDs struct{ pad, start, end int }

// readVisionIDs reads image_token_id, vision_start_token_id and
// vision_end_token_id from the checkpoint's config.json.
func readVisionIDs(dir string) (visionIDs, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return visionIDs{}, err
	}
	var c struct {
		Pad   *int `json:"image_token_id"`
		Start *int `json:"vision_start_token_id"`
		End   *int `json:"vision_end_token_id"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return visionIDs{}, fmt.Errorf("config.json: %w", err)
	}
	if c.Pad == nil || c.Start == nil || c.End == nil {
		return visionIDs{}, errors.New("config.json lacks image_token_id, vision_start_token_id or vision_end_token_id")
	}
	return visionIDs{*c.Pad, *c.Start, *c.End}, nil
}

// print writes the --image-tokens result as text.
func (r *imageBenchResult) print(w goio.Writer) {
	fmt.Fprintf(w, "image of %d tokens (%dx%d pixels, grid %v): encoded in %.2f s (%.1f tokens/s), encoder only\n",
		r.ImageTokens, r.ImagePixels[0], r.ImagePixels[1], r.ImageGrid, r.VisionEncodeSeconds, r.VisionEncodeTokensPerSecond)
	fmt.Fprintf(w, "prefill of %d tokens: with the image %.2f tokens/s, text %.2f tokens/s, ratio %.3f\n",
		r.PromptTokens, r.ImagePrefillTokensPerSecond, r.TextPrefillTokensPerSecond, r.ImagePrefillRatio)
}
