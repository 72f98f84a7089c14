package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/tokenizer"
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

// checkImagePrompt resolves the vision tower of the model at dir (its
// own, or the mmproj file's when mmproj is set; hidden is the text model's
// width) and checks that ids hold one image pad per image file: it returns
// the tower's setup, or an error that names what is missing.
func checkImagePrompt(dir, mmproj string, hidden int, ids []int, files []string) (*vision.Setup, error) {
	var lookup func(string) (int, bool)
	if tok, err := tokenizer.Load(dir); err == nil {
		lookup = tok.TokenID
	}
	s, err := vision.Resolve(dir, vision.ResolveOptions{MMProj: mmproj, TokenID: lookup, TextHidden: hidden})
	if errors.Is(err, vision.ErrNoTower) {
		if _, isGGUF, _ := gguf.Locate(dir); isGGUF {
			return nil, fmt.Errorf("--image: the model %s has no vision tower: a GGUF model's is in a separate mmproj file; give it with --mmproj FILE (or put it beside the model as mmproj*.gguf)", dir)
		}
		return nil, fmt.Errorf("--image: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	pads := 0
	for _, id := range ids {
		if id == s.ImageToken {
			pads++
		}
	}
	if pads != len(files) {
		return nil, fmt.Errorf("the prompt holds %d image pad tokens (id %d) for %d --image files: put one pad per image, in order", pads, s.ImageToken, len(files))
	}
	return s, nil
}

// imagePrompt encodes the image files with the vision tower s names on
// backend be and returns the prompt with each image pad of ids expanded to
// its image's tokens (the tower quantized as vision.QuantFor says for --quantize), with the engine request's images, 3-D positions and
// rope delta set in req. checkImagePrompt has checked ids and files.
func imagePrompt(ctx context.Context, s *vision.Setup, be compute.Backend, quantize string, ids []int, files []string, req *engine.Request) ([]int, error) {
	tower, err := s.Open(vision.Options{Backend: be, Quant: vision.QuantFor(quantize)})
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
		img, err := s.Processor.Process(rgb)
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
	out, starts, positions, delta, err := vision.ExpandPads(ids, s.ImageToken, s.VisionStart, grids, s.Config.SpatialMergeSize)
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	for i, at := range starts {
		req.Images[i].Index = at
	}
	req.Positions, req.RopeDelta = positions, delta
	return out, nil
}
