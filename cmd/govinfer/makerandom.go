package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/govinfer/govinfer/internal/diskfree"
	"github.com/govinfer/govinfer/randmodel"
)

// defaultMaxGB is make-random's limit on the bytes it writes unless told
// otherwise: above a full 9B (19 GB) and the MoE bench model (35B-A3B
// widths, 8 layers, 15 GB), below any larger model in full.
const defaultMaxGB = 32

// shapeNames lists the shapes make-random knows, for its help.
func shapeNames() string {
	var names []string
	for _, s := range randmodel.Shapes() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// runMakeRandom implements "govinfer make-random": write a random checkpoint.
func runMakeRandom(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "make-random", "make-random --out DIR [--shape NAME] [--layers N] [--vocab N] [--seed N] [--tokenizer DIR | --no-tokenizer] [--chat-template FILE] [--mtp] [--vision] [--config-only] [--max-gb N]\n       make-random --lora-for MODEL_DIR --out DIR [--rank 16] [--seed N]\n\n"+
		"Writes a random checkpoint that chat, serve and diag open as it is: with "+randmodel.BundledTokenizerName+"\n"+
		"(bundled in the binary; --tokenizer DIR copies another's, --no-tokenizer leaves them out), its vocabulary\n"+
		"grown to cover the tokenizer's ids where the shape's is smaller (tiny and small: 151,669).")
	out := fs.String("out", "", "`DIR` to write the checkpoint to (created if needed)")
	shapeName := fs.String("shape", "small", "model widths `NAME`: "+shapeNames()+
		" (the qwen3.5-* are the family's real widths; the -aNb ones mixtures of experts)")
	layers := fs.Int("layers", 0, "number of layers, every 4th one full attention (0: the shape's own)")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the shape's own, grown to cover the tokenizer's ids); smaller than the tokenizer's needs --no-tokenizer")
	seed := fs.Uint64("seed", 1, "random seed; the same seed gives the same bytes")
	tied := fs.String("tied", "", "tie the output matrix to the embeddings: true or false (default: the shape's own)")
	tokDir := fs.String("tokenizer", "", "copy tokenizer.json (+ tokenizer_config.json, chat_template.jinja) from `DIR` instead of the bundled Qwen3 tokenizer; the vocabulary and eos ids follow it")
	noTok := fs.Bool("no-tokenizer", false, "write no tokenizer or chat template: the checkpoint then runs token ids only (generate --ids, bench), not chat or serve")
	mtp := fs.Bool("mtp", false, "also write a multi-token-prediction head (mtp.*) for speculative decoding")
	vision := fs.Bool("vision", false, "also write a vision tower (model.visual.*, vision_config, preprocessor_config.json): Qwen3.5-9B's for --shape qwen3.5-9b, a small one otherwise")
	chatTemplate := fs.String("chat-template", "", "write this chat_template.jinja `FILE` into the checkpoint, in place of the tokenizer's (the bundled one: Qwen3.5's)")
	configOnly := fs.Bool("config-only", false, "write config.json and generation_config.json (and the tokenizer, preprocessor config) but no weights: enough for shapes too large to write, such as qwen3.5-397b-a17b")
	maxGB := fs.Float64("max-gb", defaultMaxGB, "refuse to write more than `N` GB of weights (0: no limit); the size is printed before writing starts")
	loraFor := fs.String("lora-for", "", "write a random LoRA adapter (PEFT's layout, F32) for the checkpoint in `MODEL_DIR` instead of a checkpoint: one update of --rank on every linear of its text model (attention, Gated DeltaNet, MLP), for bench --lora")
	rank := fs.Int("rank", 16, "the --lora-for adapter's rank")
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
	if *loraFor != "" {
		start := time.Now()
		n, err := randmodel.WriteLoRA(*out, *loraFor, randmodel.LoRAOptions{Rank: *rank, Seed: *seed})
		if err != nil {
			return fail(exitError, "%v", err)
		}
		fmt.Fprintf(io.out, "wrote a rank-%d LoRA adapter of %d modules for %s to %s in %.1fs\n", *rank, n, *loraFor, *out, time.Since(start).Seconds())
		return exitOK
	}
	shape, err := randmodel.LookupShape(*shapeName)
	if err != nil {
		return fail(exitUsage, "--shape: %v", err)
	}
	if *layers < 0 || *vocab < 0 || *maxGB < 0 {
		return fail(exitUsage, "--layers, --vocab and --max-gb must not be negative")
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
	if *noTok && (*tokDir != "" || *chatTemplate != "") {
		return fail(exitUsage, "--no-tokenizer leaves the tokenizer and chat template out: it does not go with --tokenizer or --chat-template")
	}
	var eos []int
	var visionIDs randmodel.VisionIDs
	if !*noTok {
		var info randmodel.TokenizerInfo
		what := "the bundled tokenizer's"
		if *tokDir != "" {
			info, err = randmodel.ReadTokenizer(filepath.Join(*tokDir, "tokenizer.json"))
			what = "the tokenizer's"
		} else {
			info, err = randmodel.BundledTokenizer()
		}
		if err != nil {
			return fail(exitUsage, "--tokenizer: %v", err)
		}
		if *vocab > 0 && *vocab < info.Vocab {
			return fail(exitUsage, "--vocab %d is smaller than %s %d ids: add --no-tokenizer for a checkpoint without one (token ids only)", *vocab, what, info.Vocab)
		}
		shape.Vocab = max(shape.Vocab, info.Vocab)
		eos = info.EOS
		visionIDs = info.Vision
	}
	opts := randmodel.Options{
		Seed:   *seed,
		EOS:    eos,
		MTP:    *mtp,
		Vision: *vision, ImageTokens: visionIDs,
	}
	sizes := randmodel.Size(shape, opts)
	what := fmt.Sprintf("%s, %d layers, vocab %d", shape.Name, shape.Layers, shape.Vocab)
	start := time.Now()
	if *configOnly {
		err = randmodel.WriteConfig(*out, shape, opts)
	} else {
		if limit := *maxGB * 1e9; limit > 0 && float64(sizes.Total) > limit {
			return fail(exitUsage, "%s would be %s (%s), more than --max-gb %g: use --layers N for fewer layers, --config-only for the config alone, or a larger --max-gb (0: no limit)",
				what, gb(sizes.Total), describeSizes(sizes), *maxGB)
		}
		if free, ok := diskfree.Bytes(*out); ok && free < sizes.Total {
			return fail(exitError, "%s needs %s but its file system has %s free", *out, gb(sizes.Total), gb(free))
		}
		fmt.Fprintf(io.err, "make-random: %s: %s to write (%s)\n", what, gb(sizes.Total), describeSizes(sizes))
		opts.Progress = progressPrinter(io, *out, start)
		err = randmodel.Write(*out, shape, opts)
		fmt.Fprintln(io.err)
	}
	if err != nil {
		return fail(exitError, "%v", err)
	}
	tokNote := "with " + randmodel.BundledTokenizerName + " (bundled; --no-tokenizer leaves them out)"
	switch {
	case *noTok:
		tokNote = "without a tokenizer (--no-tokenizer)"
	case *tokDir != "":
		err = randmodel.CopyTokenizer(*out, *tokDir, *chatTemplate)
		tokNote = "with the tokenizer of " + *tokDir
	default:
		err = randmodel.WriteBundledTokenizer(*out, *chatTemplate)
	}
	if err != nil {
		return fail(exitError, "%v", err)
	}
	if *configOnly {
		fmt.Fprintf(io.err, "wrote the config of %s (%s; the weights would be %s) without weights, %s\n", *out, what, gb(sizes.Total), tokNote)
		return exitOK
	}
	fmt.Fprintf(io.err, "wrote %s (%s) in %.1fs, %s\n", *out, what, time.Since(start).Seconds(), tokNote)
	if *noTok {
		fmt.Fprintf(io.err, "next: govinfer generate --model %s --ids 1,2,3 -n 8 (it has no tokenizer: chat and serve need one)\n", shellQuote(*out))
	} else {
		fmt.Fprintf(io.err, "next: govinfer chat --model %s (or serve --model %[1]s); the weights are random, so the answers are noise\n", shellQuote(*out))
	}
	return exitOK
}

// shellQuote quotes a path for a command line to copy when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=:,@%~") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// progressPrinter returns a randmodel.Options.Progress that rewrites one
// line of standard error at most once a second, and at the end, with the
// bytes written, the rate and the time left.
func progressPrinter(io stdio, out string, start time.Time) func(done, total int64) {
	var last time.Time
	return func(done, total int64) {
		if time.Since(last) < time.Second && done != total {
			return
		}
		last = time.Now()
		elapsed := time.Since(start).Seconds()
		line := fmt.Sprintf("\rwriting %s: %.2f / %.2f GB (%d%%)", out, float64(done)/1e9, float64(total)/1e9, 100*done/max(total, 1))
		if rate := float64(done) / elapsed; done < total && done > 0 && elapsed > 0 {
			left := time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
			line += fmt.Sprintf(", %.0f MB/s, %v left ", rate/1e6, left)
		} else {
			line += "                        "
		}
		fmt.Fprint(io.err, line)
	}
}

// describeSizes says what a checkpoint's bytes are made of: its layers
// (their range where linear- and full-attention layers differ) and its
// embeddings.
func describeSizes(s randmodel.Sizes) string {
	var parts []string
	if len(s.Layers) > 0 {
		lo, hi := slices.Min(s.Layers), slices.Max(s.Layers)
		if lo == hi {
			parts = append(parts, gb(lo)+" a layer")
		} else {
			parts = append(parts, gb(lo)+" to "+gb(hi)+" a layer")
		}
	}
	parts = append(parts, gb(s.Embeddings)+" of embeddings")
	return strings.Join(parts, ", ")
}

// gb formats a byte count in gigabytes (megabytes below one).
func gb(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f GB", float64(n)/1e9)
}
