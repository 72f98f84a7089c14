// Package convert writes a Hugging Face Qwen3.5 checkpoint as a GGUF file
// of llama.cpp's qwen35 architecture (qwen35moe for a mixture of experts,
// qwen3_5_moe), as llama.cpp's converter (and llama-quantize, for the
// quantized types) would: its tensor names and transforms (gguf/qwen35),
// its metadata, the tokenizer and chat template, norms, other 1-D tensors,
// conv1d and a MoE's router and shared expert gate in F32, and
// general.file_type as llama.cpp labels the file. llama.cpp, ollama and
// govinfer load the result.
//
// A MoE layer's experts are written as llama.cpp's stacked 3-D tensors
// ffn_gate_exps, ffn_up_exps [E, F, H] and ffn_down_exps [E, H, F],
// whichever way the checkpoint stores them: fused (experts.gate_up_proj
// [E, 2F, H], split into its gate rows 0..F-1 and up rows F..2F-1 of each
// expert; experts.down_proj as it is) or one module per expert
// (experts.{e}.*_proj.weight, stacked).
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
	// hf is the tensor under the name qwen35.Lookup and quant.Plan know
	// (a MoE's experts as stacked: experts.gate_proj [E, F, H], ...), with
	// the shape the config implies.
	hf     model.TensorSpec
	m      qwen35.Tensor
	typ    gguf.GGMLType
	qt     quant.Type // the block format, or quant.Keep for a float type
	src    safetensors.DType
	rows   int
	cols   int
	srcLen int64
	// parts are where the rows come from, in order: the checkpoint's
	// tensor of the same name, or a MoE's experts gathered from its fused
	// or per-expert tensors.
	parts []part
}

// part is rows [lo, lo+n) of the checkpoint's tensor name, seen as a
// matrix of rows of its last dimension.
type part struct {
	name  string
	lo, n int
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
	uses := map[string]int{} // plans left that read each tensor
	for _, p := range plans {
		for _, name := range p.sourceNames() {
			used[name] = true
			uses[name]++
		}
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
	arch := archOf(cfg)
	if used[qwen35.MTPPrefix+"fc.weight"] {
		// The MTP head is one block after the layers, as llama.cpp's
		// converter appends it (qwen35.LookupMTP).
		md.Set(qwen35.ArchKey(arch, qwen35.KeyBlockCount), uint32(cfg.NumLayers+1))
		md.Set(qwen35.ArchKey(arch, qwen35.KeyNextNLayers), uint32(1))
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
		// ggml's dimensions, innermost first; conv1d's [C, 1, K] squeezed.
		dims := slices.Clone(p.hf.Shape)
		if p.m.Squeeze {
			dims = slices.DeleteFunc(dims, func(d int) bool { return d == 1 })
		}
		slices.Reverse(dims)
		for o.Type != TypeBF16 && len(dims) > 1 && dims[len(dims)-1] == 1 {
			// llama-quantize writes ggml_n_dims dimensions: the shared
			// expert gate [1, H] is {H, 1} from the converter, {H} after.
			dims = dims[:len(dims)-1]
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
		src, err := p.rowSource(ck)
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
		err = writeTensor(ctx, tw, p, src, heads, threads, func(rowsDone int) {
			report(i, done+p.srcLen*int64(rowsDone)/int64(p.rows))
		})
		if err != nil {
			return nil, fmt.Errorf("convert: %s -> %s: %w", p.hf.Name, p.m.Name, err)
		}
		for _, name := range p.sourceNames() {
			if uses[name]--; uses[name] == 0 {
				ck.Evict(name) // the last plan that reads it
			}
		}
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
	// add plans the tensor spec, whose rows come from parts, each part a
	// tensor the config says has shape want.
	add := func(spec model.TensorSpec, m qwen35.Tensor, planName string, parts []part, want [][]int) {
		p := plan{hf: spec, m: m, cols: spec.Shape[len(spec.Shape)-1], rows: 1, parts: parts}
		for _, d := range spec.Shape[:len(spec.Shape)-1] {
			p.rows *= d
		}
		for i, pt := range parts {
			info, err := ck.Info(pt.name)
			if err != nil {
				errs = append(errs, err)
				return
			}
			if !slices.Equal(info.Shape, want[i]) {
				errs = append(errs, fmt.Errorf("tensor %s has shape %v, config.json implies %v", pt.name, info.Shape, want[i]))
				return
			}
			if widen(info.DType) == nil {
				errs = append(errs, fmt.Errorf("tensor %s has dtype %s; want F32, F16 or BF16", pt.name, info.DType))
				return
			}
			if i > 0 && info.DType != p.src {
				errs = append(errs, fmt.Errorf("tensor %s is %s, %s is %s: the experts of one layer differ", pt.name, info.DType, parts[0].name, p.src))
				return
			}
			p.src = info.DType
		}
		p.srcLen = int64(p.rows) * int64(p.cols) * int64(p.src.Size())
		var err error
		p.typ, p.qt, err = tensorType(p, planName, typ, cfg.NumLayers)
		if err != nil {
			errs = append(errs, err)
			return
		}
		plans = append(plans, p)
	}
	// plan plans one tensor of the model's list: a tensor of the
	// checkpoint, or a MoE layer's experts in the stacked layout.
	plan := func(spec model.TensorSpec, lookup func(string) (qwen35.Tensor, bool), planName func(string) string) {
		if p, kind, ok := cutExperts(spec.Name); ok {
			for _, st := range stackExperts(ck, spec, p, kind) {
				m, ok := lookup(st.spec.Name)
				if !ok {
					errs = append(errs, fmt.Errorf("tensor %s has no qwen35 GGUF name", st.spec.Name))
					continue
				}
				add(st.spec, m, planName(st.spec.Name), st.parts, st.shapes)
			}
			return
		}
		m, ok := lookup(spec.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("tensor %s has no qwen35 GGUF name", spec.Name))
			return
		}
		add(spec, m, planName(spec.Name), []part{{spec.Name, 0, 0}}, [][]int{spec.Shape})
	}
	same := func(name string) string { return name }
	for _, spec := range model.TextTensors(cfg, prefix) {
		plan(spec, qwen35.Lookup, same)
	}
	// The MTP head, where the checkpoint has one: its block follows the
	// layers; its matrices quantize as the last layer's (model.MTPPlanName).
	if _, err := ck.Info(qwen35.MTPPrefix + "fc.weight"); err == nil {
		lookup := func(name string) (qwen35.Tensor, bool) { return qwen35.LookupMTP(name, cfg.NumLayers) }
		for _, spec := range model.MTPTensors(cfg) {
			plan(spec, lookup, func(name string) string { return model.MTPPlanName(cfg, name) })
		}
	}
	for i := range plans {
		if ps := plans[i].parts; len(ps) == 1 && ps[0].n == 0 {
			ps[0].n = plans[i].rows // a whole tensor
		}
	}
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("... and %d more", len(errs)-8))
	}
	return plans, errors.Join(errs...)
}

// cutExperts splits the name of a MoE layer's experts as model.TextTensors
// lists them (fused: PREFIX.mlp.experts.gate_up_proj or
// PREFIX.mlp.experts.down_proj) into the layer's prefix, ending in ".",
// and the kind.
func cutExperts(name string) (prefix, kind string, ok bool) {
	for _, kind := range []string{"gate_up_proj", "down_proj"} {
		if p, ok := strings.CutSuffix(name, "mlp.experts."+kind); ok {
			return p, kind, true
		}
	}
	return "", "", false
}

// stacked is one stacked expert tensor to write: its spec under the
// stacked name, and the checkpoint's parts it gathers with their shapes.
type stacked struct {
	spec   model.TensorSpec
	parts  []part
	shapes [][]int
}

// stackExperts returns the stacked tensors that the experts fused spec
// (kind gate_up_proj [E, 2F, H] or down_proj [E, H, F]) of the layer named
// under p become, gathered from the checkpoint's layout: gate_up_proj's
// gate and up rows of each expert, experts.{e}.*_proj.weight one module
// per expert, or experts.gate_proj and experts.up_proj already stacked.
func stackExperts(ck *safetensors.Checkpoint, spec model.TensorSpec, p, kind string) []stacked {
	e, rows, cols := spec.Shape[0], spec.Shape[1], spec.Shape[2]
	projs := []string{"down_proj"}
	if kind == "gate_up_proj" {
		projs, rows = []string{"gate_proj", "up_proj"}, rows/2
	}
	modules := ck.Has(p+"mlp.experts.0."+projs[0]+".weight") && !ck.Has(p+"mlp.experts."+kind)
	var out []stacked
	for j, proj := range projs {
		st := stacked{spec: model.TensorSpec{Name: p + "mlp.experts." + proj, Shape: []int{e, rows, cols}}}
		switch {
		case modules:
			for x := range e {
				st.parts = append(st.parts, part{fmt.Sprintf("%smlp.experts.%d.%s.weight", p, x, proj), 0, rows})
				st.shapes = append(st.shapes, []int{rows, cols})
			}
		case kind == "gate_up_proj" && !ck.Has(spec.Name) && ck.Has(st.spec.Name):
			st.parts, st.shapes = []part{{st.spec.Name, 0, e * rows}}, [][]int{st.spec.Shape} // stacked already
		case kind == "gate_up_proj":
			for x := range e {
				st.parts = append(st.parts, part{spec.Name, (2*x + j) * rows, rows})
				st.shapes = append(st.shapes, spec.Shape)
			}
		default:
			st.parts, st.shapes = []part{{spec.Name, 0, e * rows}}, [][]int{spec.Shape}
		}
		out = append(out, st)
	}
	return out
}

// sourceNames returns the checkpoint's tensors the plan reads, each once.
func (p *plan) sourceNames() []string {
	var names []string
	for _, pt := range p.parts {
		if len(names) == 0 || names[len(names)-1] != pt.name {
			names = append(names, pt.name)
		}
	}
	return names
}

// rowSource returns the plan's source rows: row(r) is the bytes of row r
// of the tensor it writes (before any head reordering), a view of the
// checkpoint's memory map.
func (p *plan) rowSource(ck *safetensors.Checkpoint) (func(r int) []byte, error) {
	rb := p.cols * p.src.Size()
	data := make([][]byte, len(p.parts))
	start := make([]int, len(p.parts)) // the first row of each part
	at := 0
	for i, pt := range p.parts {
		t, err := ck.Tensor(pt.name)
		if err != nil {
			return nil, err
		}
		if (pt.lo+pt.n)*rb > len(t.Data) {
			return nil, fmt.Errorf("tensor %s: rows %d..%d of %d bytes each are past its %d bytes", pt.name, pt.lo, pt.lo+pt.n, rb, len(t.Data))
		}
		data[i], start[i] = t.Data[pt.lo*rb:(pt.lo+pt.n)*rb], at
		at += pt.n
	}
	if at != p.rows {
		return nil, fmt.Errorf("tensor %s: its parts hold %d rows, want %d", p.hf.Name, at, p.rows)
	}
	return func(r int) []byte {
		i, found := slices.BinarySearch(start, r)
		if !found {
			i--
		}
		r -= start[i]
		return data[i][r*rb : (r+1)*rb]
	}, nil
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
func writeTensor(ctx context.Context, w io.Writer, p plan, src func(r int) []byte, h qwen35.Heads, threads int, block func(rows int)) error {
	rows, cols := p.rows, p.cols
	if len(p.hf.Shape) == 1 {
		// A vector's entries are its value heads' (A_log, dt_bias): convert
		// it whole as one row, moving entries as rows of one value.
		return writeVector(w, p, src(0), h)
	}
	rowOut := p.typ.RowBytes(cols)
	if rowOut == 0 {
		return fmt.Errorf("rows of %d values do not fit %v", cols, p.typ)
	}
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
				in, row := make([]float32, cols), make([]float32, cols)
				for r := lo + wk*n/workers; r < lo+(wk+1)*n/workers && errs[wk] == nil; r++ {
					s := r
					if p.m.Transform != qwen35.HeadCols {
						s = p.m.Transform.Source(h, rows, r, true)
					}
					if err := dec(in, src(s)); err != nil {
						errs[wk] = err
						return
					}
					if p.m.Transform == qwen35.HeadCols {
						for j := range row {
							row[j] = in[p.m.Transform.Source(h, cols, j, true)]
						}
					} else {
						for j, v := range in {
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

// archOf returns the file's general.architecture: qwen35moe for a mixture
// of experts, else qwen35.
func archOf(c *model.Config) string {
	if c.MoE() {
		return qwen35.ArchMoE
	}
	return qwen35.Arch
}

// metadata returns the general and architecture keys of the file: a
// qwen35moe file has the expert keys in place of feed_forward_length.
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
	arch := archOf(c)
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: arch},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: name},
	}
	gen, err := samplingDefaults(dir)
	if err != nil {
		return nil, err
	}
	kvs = append(kvs, gen...)
	key := func(k string, v any) gguf.KV { return gguf.KV{Key: qwen35.ArchKey(arch, k), Value: v} }
	kvs = append(kvs,
		key(qwen35.KeyBlockCount, uint32(c.NumLayers)),
		key(qwen35.KeyContextLength, uint32(c.MaxContext())),
		key(qwen35.KeyEmbeddingLength, uint32(c.HiddenSize)),
	)
	if !c.MoE() {
		kvs = append(kvs, key(qwen35.KeyFeedForwardLength, uint32(c.IntermediateSize)))
	}
	kvs = append(kvs,
		key(qwen35.KeyHeadCount, uint32(c.NumHeads)),
		key(qwen35.KeyHeadCountKV, uint32(c.NumKVHeads)),
		key(qwen35.KeyRopeSections, sections),
		key(qwen35.KeyRopeFreqBase, float32(c.RopeTheta)),
		key(qwen35.KeyRMSEpsilon, float32(c.RMSNormEps)),
	)
	if c.MoE() {
		kvs = append(kvs,
			key(qwen35.KeyExpertCount, uint32(c.NumExperts)),
			key(qwen35.KeyExpertUsedCount, uint32(c.NumExpertsPerTok)),
		)
	}
	kvs = append(kvs,
		key(qwen35.KeyKeyLength, uint32(c.HeadDim)),
		key(qwen35.KeyValueLength, uint32(c.HeadDim)),
	)
	if c.MoE() {
		kvs = append(kvs,
			key(qwen35.KeyExpertFeedForwardLength, uint32(c.MoEIntermediateSize)),
			key(qwen35.KeyExpertSharedFeedForwardLength, uint32(c.SharedExpertIntermediateSize)),
		)
	}
	kvs = append(kvs,
		key(qwen35.KeyConvKernel, uint32(c.LinearConvKernel)),
		key(qwen35.KeyStateSize, uint32(c.LinearKeyHeadDim)),
		key(qwen35.KeyGroupCount, uint32(c.LinearNumKeyHeads)),
		key(qwen35.KeyTimeStepRank, uint32(c.LinearNumValueHeads)),
		key(qwen35.KeyInnerSize, uint32(c.ValueDim())),
		key(qwen35.KeyFullAttentionInterval, uint32(interval)),
		key(qwen35.KeyRopeDimensionCount, uint32(c.RotaryDim())),
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
