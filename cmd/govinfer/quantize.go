package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/convert"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/modelpath"
)

// runQuantize implements "govinfer quantize": write a checkpoint as a GGUF
// file.
func runQuantize(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "quantize", "quantize --model DIR --out FILE.gguf --type "+strings.Join(convert.Types(), "|")+" [--mmproj MMPROJ.gguf [--mmproj-type f16|bf16|f32]] [--name NAME] [--threads N]\n"+
		"       govinfer quantize --model DIR --mmproj MMPROJ.gguf [--mmproj-type f16|bf16|f32]\n\n"+
		"Writes a Hugging Face Qwen3.5 checkpoint as a GGUF file of llama.cpp's qwen35\n"+
		"architecture (qwen35moe for a mixture of experts, qwen3_5_moe), which llama.cpp,\n"+
		"ollama and govinfer load: its tensor names and transforms, metadata, tokenizer\n"+
		"and chat template. A mixture of experts' experts, fused (gate_up_proj) or one\n"+
		"module per expert, are written as llama.cpp's stacked ffn_{gate,up,down}_exps,\n"+
		"its router and shared expert gate in F32. bf16 keeps every matrix in BF16;\n"+
		"q8_0 is llama.cpp's Q8_0; q4_k_m and q5_k_m are govinfer's mixes (see\n"+
		"docs/quantization-gguf.md; the experts as llama.cpp's Q4_K_M and Q5_K_M have\n"+
		"them), labelled as llama.cpp labels Q4_K_M and Q5_K_M.\n"+
		"A multi-token-prediction head (mtp.*) is written as llama.cpp's nextn block, one\n"+
		"block after the layers (qwen35.nextn_predict_layers = 1), for --speculative-config.\n"+
		"The checkpoint is streamed tensor by tensor; the file appears when complete.\n\n"+
		"The vision tower (model.visual.*) is not part of that file: --mmproj writes it\n"+
		"as a separate mmproj file in llama.cpp's layout (projector qwen3vl_merger), which\n"+
		"llama.cpp's mtmd tools (--mmproj) and govinfer (--mmproj, or found beside the\n"+
		"model as mmproj*.gguf) load. --type does not apply to the tower: it stays in\n"+
		"--mmproj-type, f16 by default as llama.cpp's converter writes it, bf16 (a BF16\n"+
		"checkpoint's exact values) or f32; norms, biases and the position table are F32.")
	dir := fs.String("model", "", "checkpoint `DIR` (config.json + safetensors, with tokenizer.json and chat template)")
	out := fs.String("out", "", "GGUF `FILE` to write")
	typ := fs.String("type", "", "file type of the text model: "+strings.Join(convert.Types(), ", "))
	mmproj := fs.String("mmproj", "", "also write the vision tower as an mmproj GGUF `FILE` (llama.cpp's layout)")
	mmType := fs.String("mmproj-type", vision.GGUFTypeF16, "tensor type of the mmproj file's matrices: "+strings.Join(vision.GGUFTypes(), ", ")+" (never quantized)")
	name := fs.String("name", "", "general.name of the file (default: the checkpoint directory's name)")
	threads := fs.Int("threads", 0, "goroutines quantizing rows (0: one per CPU)")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer quantize: "+format+"\n", a...)
		return code
	}
	switch {
	case *dir == "" || (*out == "" || *typ == "") && (*mmproj == "" || *out != "" || *typ != ""):
		return fail(exitUsage, "--model, --out and --type are required, or --model and --mmproj alone (see govinfer quantize --help)")
	case *typ != "" && !slices.Contains(convert.Types(), *typ):
		return fail(exitUsage, "--type %q: want one of %s", *typ, strings.Join(convert.Types(), ", "))
	case *threads < 0:
		return fail(exitUsage, "--threads must not be negative")
	case !slices.Contains(vision.GGUFTypes(), *mmType):
		return fail(exitUsage, "--mmproj-type %q: want one of %s", *mmType, strings.Join(vision.GGUFTypes(), ", "))
	case *mmproj != "" && *mmproj == *out:
		return fail(exitUsage, "--mmproj and --out name the same file")
	}
	// The path only: convert reads the config, and refuses a GGUF file.
	ck, err := modelpath.Resolve(*dir)
	if err != nil {
		return fail(exitUsage, "--model %v", err)
	}
	if ck.Note != "" {
		fmt.Fprintln(io.err, ck.Note)
	}
	*dir = ck.Path
	if *out == "" {
		return writeMMProj(ctx, io, *dir, *mmproj, *mmType, *name)
	}
	start := time.Now()
	var mu sync.Mutex
	var last time.Time
	res, err := convert.Write(ctx, *dir, *out, convert.Options{Type: *typ, Name: *name, Threads: *threads,
		Progress: func(p convert.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Tensors < p.TotalTensors && time.Since(last) < time.Second {
				return
			}
			last = time.Now()
			fmt.Fprintf(io.err, "writing %s (%s): %d/%d tensors, %.2f/%.2f GB read, %.1fs\n", *out, *typ, p.Tensors, p.TotalTensors,
				float64(p.Bytes)/1e9, float64(p.TotalBytes)/1e9, time.Since(start).Seconds())
		}})
	if err != nil {
		code := exitError
		if errors.Is(err, context.Canceled) {
			err = errors.New("interrupted; nothing written")
		}
		return fail(code, "%v", err)
	}
	counts := make([]string, 0, len(res.TypeCounts))
	for t, n := range res.TypeCounts {
		counts = append(counts, fmt.Sprintf("%s %d", t, n))
	}
	sort.Strings(counts)
	fmt.Fprintf(io.out, "wrote %s: %s (general.file_type %d), %d tensors (%s), %.2f GB in %.1fs\n", res.Path, *typ, res.FileType,
		res.Tensors, strings.Join(counts, ", "), float64(res.Bytes)/1e9, time.Since(start).Seconds())
	if len(res.Skipped) > 0 {
		fmt.Fprintf(io.out, "left out %d tensors that are not the text model's (%s, ...)\n", len(res.Skipped), res.Skipped[0])
	}
	if res.NoTokenizer {
		fmt.Fprintln(io.err, "note: the checkpoint has no tokenizer.json, so the file has no vocabulary; llama.cpp will not load it")
	}
	// Read the file back as a model would.
	f, err := gguf.Open(res.Path)
	if err != nil {
		return fail(exitError, "reading back: %v", err)
	}
	defer f.Close()
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		return fail(exitError, "reading back: %v", err)
	}
	experts := ""
	if cfg.MoE() {
		experts = fmt.Sprintf(", %d experts (%d a token) of width %d, shared expert %d", cfg.NumExperts, cfg.NumExpertsPerTok,
			cfg.MoEIntermediateSize, cfg.SharedExpertIntermediateSize)
	}
	fmt.Fprintf(io.out, "read back: %d layers, hidden %d, vocabulary %d%s, %d tensors\n", cfg.NumLayers, cfg.HiddenSize, cfg.VocabSize, experts, len(f.Tensors()))
	if *mmproj != "" {
		return writeMMProj(ctx, io, *dir, *mmproj, *mmType, *name)
	}
	return exitOK
}

// writeMMProj writes the vision tower of the checkpoint dir as the mmproj
// file out and reads it back.
func writeMMProj(ctx context.Context, io stdio, dir, out, typ, name string) int {
	start := time.Now()
	res, err := vision.WriteGGUF(ctx, dir, out, vision.WriteGGUFOptions{Type: typ, Name: name})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = errors.New("interrupted; no mmproj written")
		}
		fmt.Fprintf(io.err, "govinfer quantize: --mmproj: %v\n", err)
		return exitError
	}
	fmt.Fprintf(io.out, "wrote %s: mmproj %s (general.file_type %d), %d tensors, %.2f GB in %.1fs\n", res.Path, typ, res.FileType,
		res.Tensors, float64(res.Bytes)/1e9, time.Since(start).Seconds())
	info, err := vision.ReadMMProj(res.Path)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer quantize: reading back %s: %v\n", res.Path, err)
		return exitError
	}
	c := info.Config
	fmt.Fprintf(io.out, "read back: vision tower of %d blocks, width %d, %d heads, patch %d, merge %d, output %d, pixels [%d, %d]\n",
		c.Depth, c.HiddenSize, c.NumHeads, c.PatchSize, c.SpatialMergeSize, c.OutHiddenSize, info.Processor.MinPixels, info.Processor.MaxPixels)
	return exitOK
}
