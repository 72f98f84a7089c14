package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/quant"
)

// checkModelPath checks a --model value: a checkpoint directory, or a GGUF
// file (a .gguf file or any part of a split one).
func checkModelPath(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--model %s: %w", path, err)
	}
	if st.IsDir() {
		return nil
	}
	if _, ok, err := gguf.Locate(path); err != nil || !ok {
		return fmt.Errorf("--model %s: not a checkpoint directory or a GGUF file", path)
	}
	return nil
}

// quantizeFlag adds --quantize to fs.
func quantizeFlag(fs *flag.FlagSet) *string {
	return fs.String("quantize", "", "quantize a BF16/F16/F32 checkpoint while loading, tensor by tensor: "+
		strings.Join(quant.Mixes(), ", ")+" (q8_0: every weight matrix but conv1d in Q8_0, as llama.cpp's Q8_0 files; "+
		"q4_k_m: govinfer's Qwen3.5 mix of Q4_K, Q6_K and Q8_0; q5_k_m: the same with Q5_K for Q4_K; "+
		"default: weights as stored)")
}

// checkQuantize validates a --quantize value.
func checkQuantize(mix string) error {
	if mix != "" && !slices.Contains(quant.Mixes(), mix) {
		return fmt.Errorf("--quantize %q: want one of %s", mix, strings.Join(quant.Mixes(), ", "))
	}
	return nil
}

// loadProgress returns a model.Progress callback that prints a line to w
// at most once a second and at the end, and every note (a tensor kept in a
// wider format than asked for) as it comes.
func loadProgress(io stdio, dir, mix string) func(model.Progress) {
	start := time.Now()
	var mu sync.Mutex
	lastPrint := time.Time{}
	verb := "loading"
	if mix != "" {
		verb = "loading and quantizing (" + mix + ")"
	}
	return func(p model.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Note != "" {
			fmt.Fprintf(io.err, "note: %s\n", p.Note)
		}
		if p.Tensors < p.TotalTensors && time.Since(lastPrint) < time.Second {
			return
		}
		lastPrint = time.Now()
		fmt.Fprintf(io.err, "%s %s: %d/%d tensors, %.2f/%.2f GB, %.1fs\n", verb, dir, p.Tensors, p.TotalTensors,
			float64(p.Bytes)/1e9, float64(p.TotalBytes)/1e9, time.Since(start).Seconds())
	}
}

// quietProgress is loadProgress when quantizing or reading a GGUF file
// (loads that convert tensors and take time) and nil otherwise (a memory
// map opens at once).
func quietProgress(io stdio, dir, mix string) func(model.Progress) {
	if _, isGGUF, _ := gguf.Locate(dir); mix == "" && !isGGUF {
		return nil
	}
	return loadProgress(io, dir, mix)
}
