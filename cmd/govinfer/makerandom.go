package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/govinfer/govinfer/randmodel"
)

// runMakeRandom implements "govinfer make-random": write a random checkpoint.
func runMakeRandom(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "make-random", "make-random --out DIR [--shape tiny|small|qwen3.5-9b] [--layers N] [--vocab N] [--seed N] [--tokenizer DIR [--chat-template FILE]] [--mtp] [--vision]")
	out := fs.String("out", "", "`DIR` to write the checkpoint to (created if needed)")
	shapeName := fs.String("shape", "small", "model widths: tiny, small or qwen3.5-9b")
	layers := fs.Int("layers", 0, "number of layers (0: the shape's own)")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the shape's own)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed gives the same bytes")
	tied := fs.String("tied", "", "tie the output matrix to the embeddings: true or false (default: the shape's own)")
	tokDir := fs.String("tokenizer", "", "copy tokenizer.json (+ tokenizer_config.json, chat_template.jinja) from `DIR`; the vocabulary and eos ids follow it")
	mtp := fs.Bool("mtp", false, "also write a multi-token-prediction head (mtp.*) for speculative decoding")
	vision := fs.Bool("vision", false, "also write a vision tower (model.visual.*, vision_config, preprocessor_config.json): Qwen3.5-9B's for --shape qwen3.5-9b, a small one otherwise")
	chatTemplate := fs.String("chat-template", "", "copy this chat_template.jinja `FILE` into the checkpoint")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer make-random: "+format+"\n", a...)
		return code
	}
	if *out == "" {
		return fail(exitUsage, "--out is required")
	}
	shape, err := randmodel.LookupShape(*shapeName)
	if err != nil {
		return fail(exitUsage, "--shape: %v", err)
	}
	if *layers < 0 || *vocab < 0 {
		return fail(exitUsage, "--layers and --vocab must not be negative")
	}
	if *layers > 0 {
		shape.Layers = *layers
	}
	if *vocab > 0 {
		if *vocab < 4 {
			return fail(exitUsage, "--vocab must be at least 4")
		}
		shape.Vocab = *vocab
	}
	switch *tied {
	case "":
	case "true":
		shape.Tied = true
	case "false":
		shape.Tied = false
	default:
		return fail(exitUsage, "--tied must be true or false, got %q", *tied)
	}
	var eos []int
	var visionIDs randmodel.VisionIDs
	if *tokDir != "" {
		info, err := randmodel.ReadTokenizer(filepath.Join(*tokDir, "tokenizer.json"))
		if err != nil {
			return fail(exitUsage, "--tokenizer: %v", err)
		}
		if *vocab > 0 && *vocab < info.Vocab {
			return fail(exitUsage, "--vocab %d is smaller than the tokenizer's %d ids", *vocab, info.Vocab)
		}
		if *vocab == 0 {
			shape.Vocab = info.Vocab
		}
		eos = info.EOS
		visionIDs = info.Vision
	}
	if *chatTemplate != "" && *tokDir == "" {
		return fail(exitUsage, "--chat-template needs --tokenizer")
	}
	start := time.Now()
	last := time.Time{}
	err = randmodel.Write(*out, shape, randmodel.Options{
		Seed:   *seed,
		EOS:    eos,
		MTP:    *mtp,
		Vision: *vision, ImageTokens: visionIDs,
		Progress: func(done, total int64) {
			if time.Since(last) > time.Second || done == total {
				last = time.Now()
				fmt.Fprintf(io.err, "\rwriting %s: %.2f / %.2f GB", *out, float64(done)/1e9, float64(total)/1e9)
			}
		},
	})
	fmt.Fprintln(io.err)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	if *tokDir != "" {
		if err := randmodel.CopyTokenizer(*out, *tokDir, *chatTemplate); err != nil {
			return fail(exitError, "%v", err)
		}
	}
	fmt.Fprintf(io.err, "wrote %s (%s, %d layers, vocab %d) in %.1fs\n", *out, shape.Name, shape.Layers, shape.Vocab, time.Since(start).Seconds())
	return exitOK
}
