// Package convert writes a Hugging Face Qwen3.5 checkpoint as a GGUF file
// of llama.cpp's qwen35 architecture, as llama.cpp's converter (and
// llama-quantize, for the quantized types) would: its tensor names and
// transforms (gguf/qwen35), its metadata, the tokenizer and chat template,
// norms, other 1-D tensors and conv1d in F32, and general.file_type as
// llama.cpp labels the file. llama.cpp, ollama and govinfer load the
// result.
//
// The checkpoint is streamed: each tensor is read from the memory map a
// block of rows at a time, transformed, encoded or quantized (rows spread
// over the CPUs) and written, and its pages are released, so memory holds
// little more than one block whatever the model's size. Quantized types
// quantize the rows in the file's (tiled) value-head order, after the
// transforms, as llama-quantize does to a converted file.
package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
	"github.com/govinfer/govinfer/tokenizer"
)

// The file types Write makes.
const (
	TypeBF16  = "bf16"   // every matrix in BF16
	TypeQ8_0  = "q8_0"   // quant.MixQ8_0: llama.cpp's Q8_0
	TypeQ4_KM = "q4_k_m" // quant.MixQ4KM: govinfer's 4-bit mix
	TypeQ5_KM = "q5_k_m" // quant.MixQ5KM: govinfer's 5-bit mix
)

// fileTypes gives general.file_type (llama.cpp's llama_ftype) of each type.
var fileTypes = map[string]uint32{TypeBF16: gguf.FileTypeBF16, TypeQ8_0: gguf.FileTypeQ8_0, TypeQ4_KM: gguf.FileTypeQ4_K_M, TypeQ5_KM: gguf.FileTypeQ5_K_M}

// Types returns the file types Write makes.
func Types() []string { return []string{TypeBF16, TypeQ8_0, TypeQ4_KM, TypeQ5_KM} }

// Options configure Write.
type Options struct {
	// Type is the file type: TypeBF16, TypeQ8_0, TypeQ4_KM or TypeQ5_KM.
	Type string
	// Name is general.name; empty means the checkpoint directory's name.
	Name string
	// Progress, when set, is called after each tensor is written.
	Progress func(Progress)
	// Threads bounds the goroutines that encode rows; 0 means one per CPU.
	Threads int
}

// Progress reports a conversion, after each tensor and each block of rows
// of a large one.
type Progress struct {
	// Tensors counts the tensors written in full.
	Tensors, TotalTensors int
	// Bytes and TotalBytes count the checkpoint's bytes read.
	Bytes, TotalBytes int64
	// Name is the GGUF name of the tensor just written, Type its type.
	Name, Type string
}

// Result describes a written file.
type Result struct {
	Path     string
	FileType uint32 // general.file_type
	Tensors  int
	Bytes    int64 // the file's size
	// Skipped lists the checkpoint's tensors that are not part of the text
	// model or its MTP head (the vision tower), left out as llama.cpp's
	// converter leaves them out of the text model's file.
	Skipped []string
	// NoTokenizer is set when the checkpoint has no tokenizer.json: the
	// file then has no vocabulary, and llama.cpp will not load it.
	NoTokenizer bool
	// TypeCounts counts the tensors of each ggml type.
	TypeCounts map[string]int
}

// plan is one tensor to write.
type plan struct {
	hf     model.TensorSpec
	m      qwen35.Tensor
	typ    gguf.GGMLType
	qt     quant.Type // the block format, or quant.Keep for a float type
	src    safetensors.DType
	rows   int
	cols   int
	srcLen int64
}

// Write converts the safetensors checkpoint in dir into the GGUF file out
// of the type o.Type. The file appears atomically when complete; on error or
// cancellation nothing is left behind.
func Write(ctx context.Context, dir, out string, o Options) (*Result, error) {
	ft, ok := fileTypes[o.Type]
	if !ok {
		return nil, fmt.Errorf("convert: unknown type %q (want one of %s)", o.Type, strings.Join(Types(), ", "))
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return nil, fmt.Errorf("convert: %s is not a Hugging Face checkpoint directory: %w", dir, err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer ck.Close()
	prefix, err := model.TextPrefix(ck)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	res := &Result{Path: out, FileType: ft, TypeCounts: map[string]int{}}
	plans, err := planTensors(ck, cfg, prefix, o.Type)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	used := map[string]bool{}
	for _, p := range plans {
		used[p.hf.Name] = true
	}
	for _, name := range ck.Names() {
		if !used[name] {
			res.Skipped = append(res.Skipped, name)
		}
	}
	md, err := metadata(dir, cfg, o, ft)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	if used[qwen35.MTPPrefix+"fc.weight"] {
		// The MTP head is one block after the layers, as llama.cpp's
		// converter appends it (qwen35.LookupMTP).
		md.Set(qwen35.KeyBlockCount, uint32(cfg.NumLayers+1))
		md.Set(qwen35.KeyNextNLayers, uint32(1))
	}
	tok, err := tokenizer.Load(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		res.NoTokenizer = true
	case err != nil:
		return nil, fmt.Errorf("convert: %w", err)
	default:
		kvs, err := tok.GGUFMetadata(cfg.VocabSize)
		if err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
		for _, kv := range kvs {
			if err := md.Set(kv.Key, kv.Value); err != nil {
				return nil, fmt.Errorf("convert: %w", err)
			}
		}
	}
	// As llama.cpp's converter, quantized or not.
	md.Set("general.quantization_version", uint32(2))
	md.Set("general.file_type", ft)

	infos := make([]gguf.TensorInfo, len(plans))
	var total int64
	for i, p := range plans {
		dims := []int{p.cols, p.rows}
		if len(p.hf.Shape) == 1 {
			dims = []int{p.cols}
		}
		infos[i] = gguf.TensorInfo{Name: p.m.Name, Type: p.typ, Dims: dims}
		total += p.srcLen
		res.TypeCounts[p.typ.String()]++
	}
	w, err := gguf.NewWriter(out, md, infos)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer w.Abort()
	heads := qwen35.Heads{Nk: cfg.LinearNumKeyHeads, Nv: cfg.LinearNumValueHeads, Dk: cfg.LinearKeyHeadDim, Dv: cfg.LinearValueHeadDim}
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	var done int64
	for i, p := range plans {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t, err := ck.Tensor(p.hf.Name)
		if err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
		tw, err := w.TensorWriter(p.m.Name)
		if err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
		report := func(tensors int, bytes int64) {
			if o.Progress != nil {
				o.Progress(Progress{Tensors: tensors, TotalTensors: len(plans), Bytes: bytes, TotalBytes: total, Name: p.m.Name, Type: p.typ.String()})
			}
		}
		// Large tensors report each block of rows as it is written.
		err = writeTensor(ctx, tw, p, t.Data, heads, threads, func(rowsDone int) {
			report(i, done+p.srcLen*int64(rowsDone)/int64(p.rows))
		})
		if err != nil {
			return nil, fmt.Errorf("convert: %s -> %s: %w", p.hf.Name, p.m.Name, err)
		}
		ck.Evict(p.hf.Name)
		done += p.srcLen
		report(i+1, done)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	res.Tensors, res.Bytes = len(plans), st.Size()
	return res, nil
}

// planTensors lists the text model's tensors, and the MTP head's where the
// checkpoint has one, with their GGUF names and types.
func planTensors(ck *safetensors.Checkpoint, cfg *model.Config, prefix, typ string) ([]plan, error) {
	var plans []plan
	var errs []error
	add := func(spec model.TensorSpec, m qwen35.Tensor, planName string) {
		info, err := ck.Info(spec.Name)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if !slices.Equal(info.Shape, spec.Shape) {
			errs = append(errs, fmt.Errorf("tensor %s has shape %v, config.json implies %v", spec.Name, info.Shape, spec.Shape))
			return
		}
		if widen(info.DType) == nil {
			errs = append(errs, fmt.Errorf("tensor %s has dtype %s; want F32, F16 or BF16", spec.Name, info.DType))
			return
		}
		p := plan{hf: spec, m: m, src: info.DType, cols: spec.Shape[len(spec.Shape)-1], rows: 1}
		for _, d := range spec.Shape[:len(spec.Shape)-1] {
			p.rows *= d
		}
		p.srcLen = int64(p.rows) * int64(p.cols) * int64(info.DType.Size())
		p.typ, p.qt, err = tensorType(p, planName, typ, cfg.NumLayers)
		if err != nil {
			errs = append(errs, err)
			return
		}
		plans = append(plans, p)
	}
	for _, spec := range model.TextTensors(cfg, prefix) {
		m, ok := qwen35.Lookup(spec.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("tensor %s has no qwen35 GGUF name", spec.Name))
			continue
		}
		add(spec, m, spec.Name)
	}
	// The MTP head, where the checkpoint has one: its block follows the
	// layers; its matrices quantize as the last layer's (model.MTPPlanName).
	if _, err := ck.Info(qwen35.MTPPrefix + "fc.weight"); err == nil {
		for _, spec := range model.MTPTensors(cfg) {
			m, ok := qwen35.LookupMTP(spec.Name, cfg.NumLayers)
			if !ok {
				errs = append(errs, fmt.Errorf("tensor %s has no qwen35 GGUF name", spec.Name))
				continue
			}
			add(spec, m, model.MTPPlanName(cfg, spec.Name))
		}
	}
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("... and %d more", len(errs)-8))
	}
	return plans, errors.Join(errs...)
}

// tensorType picks a tensor's ggml type: F32 where the format keeps it
// (1-D tensors, conv1d), else BF16 for TypeBF16, else the mix's format
// (quant.Plan of planName, the text tensor whose plan it follows), a
// matrix the mix keeps staying in its stored float type.
func tensorType(p plan, planName, typ string, layers int) (gguf.GGMLType, quant.Type, error) {
	if p.m.F32 {
		return gguf.F32, quant.Keep, nil
	}
	if typ == TypeBF16 {
		return gguf.BF16, quant.Keep, nil
	}
	qt, _, err := quant.Plan(typ, planName, p.rows, p.cols, layers)
	if err != nil {
		return 0, 0, err
	}
	if qt == quant.Keep {
		switch p.src {
		case safetensors.F32:
			return gguf.F32, quant.Keep, nil
		case safetensors.F16:
			return gguf.F16, quant.Keep, nil
		}
		return gguf.BF16, quant.Keep, nil
	}
	id, ok := qt.GGMLType()
	if !ok {
		return 0, 0, fmt.Errorf("tensor %s: no ggml type for %v", p.hf.Name, qt)
	}
	return gguf.GGMLType(id), qt, nil
}

// widen returns the decoder of a float dtype's little-endian values.
func widen(d safetensors.DType) func(dst []float32, src []byte) error {
	switch d {
	case safetensors.BF16:
		return half.DecodeBF16
	case safetensors.F16:
		return half.DecodeF16
	case safetensors.F32:
		return func(dst []float32, src []byte) error {
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			}
			return nil
		}
	}
	return nil
}

// blockBytes is about how much output one block of rows holds.
const blockBytes = 4 << 20

// writeTensor converts a tensor a block of rows at a time, rows spread over
// threads goroutines, and writes it to w; block is told the rows done after
// each block but the last.
func writeTensor(ctx context.Context, w io.Writer, p plan, data []byte, h qwen35.Heads, threads int, block func(rows int)) error {
	rows, cols := p.rows, p.cols
	if len(p.hf.Shape) == 1 {
		// A vector's entries are its value heads' (A_log, dt_bias): convert
		// it whole as one row, moving entries as rows of one value.
		return writeVector(w, p, data, h)
	}
	rowOut := p.typ.RowBytes(cols)
	if rowOut == 0 {
		return fmt.Errorf("rows of %d values do not fit %v", cols, p.typ)
	}
	size := p.src.Size()
	dec := widen(p.src)
	per := max(1, blockBytes/rowOut)
	buf := make([]byte, min(per, rows)*rowOut)
	for lo := 0; lo < rows; lo += per {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(lo+per, rows)
		n := hi - lo
		workers := min(threads, n)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				src, row := make([]float32, cols), make([]float32, cols)
				for r := lo + wk*n/workers; r < lo+(wk+1)*n/workers && errs[wk] == nil; r++ {
					s := r
					if p.m.Transform != qwen35.HeadCols {
						s = p.m.Transform.Source(h, rows, r, true)
					}
					if err := dec(src, data[s*cols*size:(s+1)*cols*size]); err != nil {
						errs[wk] = err
						return
					}
					if p.m.Transform == qwen35.HeadCols {
						for j := range row {
							row[j] = src[p.m.Transform.Source(h, cols, j, true)]
						}
					} else {
						for j, v := range src {
							row[j] = p.m.Transform.ToGGUF(v)
						}
					}
					errs[wk] = encode(p, buf[(r-lo)*rowOut:(r-lo+1)*rowOut], row)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if _, err := w.Write(buf[:n*rowOut]); err != nil {
			return err
		}
		if hi < rows {
			block(hi)
		}
	}
	return nil
}

// writeVector converts a 1-D tensor.
func writeVector(w io.Writer, p plan, data []byte, h qwen35.Heads) error {
	n := p.cols
	src := make([]float32, n)
	if err := widen(p.src)(src, data); err != nil {
		return err
	}
	row := make([]float32, n)
	for i := range row {
		row[i] = p.m.Transform.ToGGUF(src[p.m.Transform.Source(h, n, i, true)])
	}
	out := make([]byte, p.typ.RowBytes(n))
	if err := encode(p, out, row); err != nil {
		return err
	}
	_, err := w.Write(out)
	return err
}

// encode writes a row of float32 values as the tensor's type.
func encode(p plan, dst []byte, row []float32) error {
	switch p.typ {
	case gguf.F32:
		for i, v := range row {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	case gguf.BF16:
		return half.EncodeBF16(dst, row)
	case gguf.F16:
		return half.EncodeF16(dst, row)
	}
	return quant.QuantizeRow(p.qt, dst, row)
}

// metadata returns the general and qwen35 keys of the file.
func metadata(dir string, c *model.Config, o Options, ft uint32) (*gguf.Metadata, error) {
	interval := c.FullAttentionInterval
	if interval == 0 {
		interval = 4
	}
	for i, t := range c.LayerTypes {
		if full := (i+1)%interval == 0; full != (t == model.FullAttention) {
			return nil, fmt.Errorf("layer %d is %s: a qwen35 GGUF file has a full-attention layer every %d layers and no other schedule", i, t, interval)
		}
	}
	name := o.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	sections := []int32{}
	for _, s := range c.MRopeSection {
		sections = append(sections, int32(s))
	}
	if len(sections) == 0 {
		sections = slices.Clone(qwen35.DefaultRopeSections)
	}
	for len(sections) < 4 {
		sections = append(sections, 0)
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: qwen35.Arch},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: name},
	}
	gen, err := samplingDefaults(dir)
	if err != nil {
		return nil, err
	}
	kvs = append(kvs, gen...)
	kvs = append(kvs,
		gguf.KV{Key: qwen35.KeyBlockCount, Value: uint32(c.NumLayers)},
		gguf.KV{Key: qwen35.KeyContextLength, Value: uint32(c.MaxContext())},
		gguf.KV{Key: qwen35.KeyEmbeddingLength, Value: uint32(c.HiddenSize)},
		gguf.KV{Key: qwen35.KeyFeedForwardLength, Value: uint32(c.IntermediateSize)},
		gguf.KV{Key: qwen35.KeyHeadCount, Value: uint32(c.NumHeads)},
		gguf.KV{Key: qwen35.KeyHeadCountKV, Value: uint32(c.NumKVHeads)},
		gguf.KV{Key: qwen35.KeyRopeSections, Value: sections},
		gguf.KV{Key: qwen35.KeyRopeFreqBase, Value: float32(c.RopeTheta)},
		gguf.KV{Key: qwen35.KeyRMSEpsilon, Value: float32(c.RMSNormEps)},
		gguf.KV{Key: qwen35.KeyKeyLength, Value: uint32(c.HeadDim)},
		gguf.KV{Key: qwen35.KeyValueLength, Value: uint32(c.HeadDim)},
		gguf.KV{Key: qwen35.KeyConvKernel, Value: uint32(c.LinearConvKernel)},
		gguf.KV{Key: qwen35.KeyStateSize, Value: uint32(c.LinearKeyHeadDim)},
		gguf.KV{Key: qwen35.KeyGroupCount, Value: uint32(c.LinearNumKeyHeads)},
		gguf.KV{Key: qwen35.KeyTimeStepRank, Value: uint32(c.LinearNumValueHeads)},
		gguf.KV{Key: qwen35.KeyInnerSize, Value: uint32(c.ValueDim())},
		gguf.KV{Key: qwen35.KeyFullAttentionInterval, Value: uint32(interval)},
		gguf.KV{Key: qwen35.KeyRopeDimensionCount, Value: uint32(c.RotaryDim())},
	)
	return gguf.NewMetadata(kvs...)
}

// samplingDefaults reads generation_config.json's sampling settings as
// llama.cpp's converter writes them (general.sampling.*), repetition_penalty
// included as penalty_repeat.
func samplingDefaults(dir string) ([]gguf.KV, error) {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var g struct {
		TopK              *int32   `json:"top_k"`
		TopP              *float64 `json:"top_p"`
		MinP              *float64 `json:"min_p"`
		Temperature       *float64 `json:"temperature"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	var kvs []gguf.KV
	if g.TopK != nil {
		kvs = append(kvs, gguf.KV{Key: "general.sampling.top_k", Value: *g.TopK})
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{"general.sampling.top_p", g.TopP}, {"general.sampling.min_p", g.MinP}, {"general.sampling.temp", g.Temperature},
		{"general.sampling.penalty_repeat", g.RepetitionPenalty}} {
		if f.v != nil {
			kvs = append(kvs, gguf.KV{Key: f.key, Value: float32(*f.v)})
		}
	}
	return kvs, nil
}
