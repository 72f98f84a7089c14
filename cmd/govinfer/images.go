package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/safetensors"
)

// fileList is a repeatable flag of file names.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }

func (l *fileList) Set(v string) error {
	if v == "" {
		return errors.New("empty file name")
	}
	*l = append(*l, v)
	return nil
}

// visionTokens are the special ids of a multimodal checkpoint's
// config.json.
type visionTokens struct {
	ImageTokenID       *int `json:"image_token_id"`
	VisionStartTokenID *int `json:"vision_start_token_id"`
}

// checkImagePrompt reads the vision settings of the checkpoint directory
// dir and checks that ids hold one image pad per image file: it returns
// the vision tower's config and the special ids, or an error that names
// what is missing.
func checkImagePrompt(dir string, ids []int, files []string) (*vision.Config, visionTokens, error) {
	var tokens visionTokens
	vcfg, ok, err := vision.LoadConfig(dir)
	if err != nil {
		return nil, tokens, err
	}
	if !ok {
		return nil, tokens, fmt.Errorf("--image: the model at %s has no vision tower (no vision_config in its config.json)", dir)
	}
	// Text-only exports of a multimodal checkpoint keep its vision_config
	// but not the tower's weights.
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, tokens, fmt.Errorf("--image: %w", err)
	}
	hasTower := ck.Has("model.visual.patch_embed.proj.weight") || ck.Has("visual.patch_embed.proj.weight")
	ck.Close()
	if !hasTower {
		return nil, tokens, fmt.Errorf("--image: the model at %s has no vision tower (no visual.* tensors)", dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, tokens, fmt.Errorf("--image: %w", err)
	}
	if err := json.Unmarshal(data, &tokens); err != nil {
		return nil, tokens, fmt.Errorf("--image: config.json: %w", err)
	}
	if tokens.ImageTokenID == nil {
		return nil, tokens, errors.New("--image: config.json has no image_token_id")
	}
	pads := 0
	for _, id := range ids {
		if id == *tokens.ImageTokenID {
			pads++
		}
	}
	if pads != len(files) {
		return nil, tokens, fmt.Errorf("the prompt holds %d image pad tokens (id %d) for %d --image files: put one pad per image, in order", pads, *tokens.ImageTokenID, len(files))
	}
	return vcfg, tokens, nil
}

// imagePrompt encodes the image files with the vision tower of the
// checkpoint directory dir on backend be and returns the prompt with each
// image pad of ids expanded to its image's tokens, with the engine request's
// images, 3-D positions and rope delta set in req. checkImagePrompt has
// checked ids, files and the checkpoint.
func imagePrompt(ctx context.Context, dir string, be compute.Backend, ids []int, files []string, tokens visionTokens, vcfg *vision.Config, req *engine.Request) ([]int, error) {
	pcfg, err := imageproc.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	tower, err := vision.Open(dir, vision.Options{Backend: be})
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	defer tower.Close()
	var grids [][3]int
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--image: %w", err)
		}
		rgb, err := imageproc.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", file, err)
		}
		img, err := pcfg.Process(rgb)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", file, err)
		}
		emb, err := tower.Encode(ctx, img.PixelValues, img.Grid)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", file, err)
		}
		req.Images = append(req.Images, engine.Image{Embeds: emb, Hash: img.Hash})
		grids = append(grids, img.Grid)
	}
	start := -1
	if tokens.VisionStartTokenID != nil {
		start = *tokens.VisionStartTokenID
	}
	out, starts, positions, delta, err := vision.ExpandPads(ids, *tokens.ImageTokenID, start, grids, vcfg.SpatialMergeSize)
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	for i, at := range starts {
		req.Images[i].Index = at
	}
	req.Positions, req.RopeDelta = positions, delta
	return out, nil
}
