package main

import (
	"errors"
	"flag"
	"fmt"
	goio "io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/modelpath"
	"github.com/govinfer/govinfer/quant"
)

// resolveModel resolves the checkpoint a --model value names, for a
// command that loads it (flag is the flag's name, for the errors): what
// modelpath.Resolve finds wrong with the path, a checkpoint folder without
// tokenizer.json (when tok) and a config of another architecture than
// Qwen3.5 are errors before anything loads. How the path was found, when
// it is not the one given (a Hugging Face cache's snapshot), is noted on
// io.err. The checkpoint's Path is what to open.
func resolveModel(io stdio, flag, path string, tok bool) (modelpath.Checkpoint, error) {
	ck, err := modelpath.Resolve(path)
	if err == nil && tok {
		err = ck.CheckTokenizer()
	}
	if err != nil {
		return ck, fmt.Errorf("%s %w", flag, err)
	}
	if _, err := model.LoadConfig(ck.Path); err != nil {
		return ck, err
	}
	if ck.Note != "" {
		fmt.Fprintln(io.err, ck.Note)
	}
	return ck, nil
}

// mmprojFlag adds --mmproj to fs.
func mmprojFlag(fs *flag.FlagSet) *string {
	return fs.String("mmproj", "", "vision tower `FILE`: an mmproj GGUF file (llama.cpp's layout, projector qwen3vl_merger) "+
		"for a GGUF model, or in place of a checkpoint directory's own tower (default: with a GGUF model, "+
		"the one mmproj*.gguf file beside it, if there is one)")
}

// findMMProj returns the mmproj file for the model at path: mmproj when
// given (it must be a file), else, for a GGUF model, the one mmproj*.gguf
// file beside it, which it names on note (when not nil); "" when there is
// none. Several such files are an error asking for --mmproj.
func findMMProj(note goio.Writer, path, mmproj string) (string, error) {
	if mmproj != "" {
		st, err := os.Stat(mmproj)
		if err != nil {
			return "", fmt.Errorf("--mmproj %s: %w", mmproj, errors.Unwrap(err))
		}
		if st.IsDir() {
			return "", fmt.Errorf("--mmproj %s: a directory, not an mmproj GGUF file", mmproj)
		}
		return mmproj, nil
	}
	if _, isGGUF, err := gguf.Locate(path); err != nil || !isGGUF {
		return "", nil
	}
	files, err := vision.FindMMProj(path)
	if err != nil {
		return "", err
	}
	switch len(files) {
	case 0:
		return "", nil
	case 1:
		if note != nil {
			fmt.Fprintf(note, "vision tower: %s (found beside the model; --mmproj FILE names another)\n", files[0])
		}
		return files[0], nil
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
	}
	return "", fmt.Errorf("%d mmproj files beside the model (%s): choose the vision tower with --mmproj FILE", len(files), strings.Join(names, ", "))
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

// loadProgress returns a model.Progress callback that prints a line to
// io.err at most once a second and at the end, and every note (a tensor
// kept in a wider format than asked for, where packed weights are kept) as
// it comes.
func loadProgress(io stdio, dir, mix string) func(model.Progress) {
	return loadPrinter(io, dir, mix, 0)
}

// quietProgress is loadProgress for loads that may take a while or not:
// its lines start two seconds into the load (at once when quantizing), so
// that a start from memory maps prints only its notes.
func quietProgress(io stdio, dir, mix string) func(model.Progress) {
	after := progressAfter
	if mix != "" {
		after = 0
	}
	return loadPrinter(io, dir, mix, after)
}

// progressAfter is how long a load that does not quantize runs before
// quietProgress prints a line.
var progressAfter = 2 * time.Second

// loadPrinter is loadProgress, printing no line until after has
// passed since it was made.
func loadPrinter(io stdio, dir, mix string, after time.Duration) func(model.Progress) {
	start := time.Now()
	var mu sync.Mutex
	var lastPrint time.Time
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
		now := time.Now()
		if now.Sub(start) < after || p.Tensors < p.TotalTensors && now.Sub(lastPrint) < time.Second {
			return
		}
		lastPrint = now
		fmt.Fprintf(io.err, "%s %s: %d/%d tensors, %.2f/%.2f GB, %.1fs\n", verb, dir, p.Tensors, p.TotalTensors,
			float64(p.Bytes)/1e9, float64(p.TotalBytes)/1e9, now.Sub(start).Seconds())
	}
}
