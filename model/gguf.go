package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/quant"
)

// A GGUF file of llama.cpp's qwen35 architecture, or of its mixture of
// experts qwen35moe, loads into the same graph as a checkpoint directory. Its tensors are used where the file has them,
// in their stored type (quantized ones through the quantized kernels),
// except those the converter transformed (gguf/qwen35), which are converted
// back into private copies: the norms' 1 + w, ssm_a = -exp(A_log), and the
// tiled value-head order of the linear-attention layers, which moves back
// to the grouped order the delta rule reads. Moving heads moves whole rows
// or whole blocks, never changing a stored value, so a BF16 or Q8_0 file
// computes exactly what its safetensors twin does.
//
// One tensor cannot always move: ssm_out's value heads are columns, and a
// K-quant block of 256 columns straddles heads narrower than that (the 9B's
// are 128). A layer whose ssm_out is such keeps ssm_out and attn_gate in the
// file's order, and its mixer moves the core output into that order instead
// (gatedDeltaNet.tiled), a few copies per token; ssm_out's products then sum
// in the file's order.

// ggufSource reads a qwen35 or qwen35moe GGUF file.
type ggufSource struct {
	f     *gguf.File
	arch  string // general.architecture: qwen35.Arch or qwen35.ArchMoE
	heads qwen35.Heads
	// tiled holds the Hugging Face names of the tensors that keep the
	// file's value-head order: attn_gate and ssm_out of the layers whose
	// ssm_out blocks straddle value heads.
	tiled map[string]bool
	// layers is the text model's layer count: the MTP head's block
	// (qwen35.LookupMTP) follows them.
	layers int
}

// name returns the file's name of a binding: the text model's
// (qwen35.Lookup) or the MTP head's (qwen35.LookupMTP).
func (s *ggufSource) name(b binding) (qwen35.Tensor, bool) {
	if strings.HasPrefix(b.name, qwen35.MTPPrefix) {
		return qwen35.LookupMTP(b.name, s.layers)
	}
	return qwen35.Lookup(b.name)
}

// tiledLayers returns the linear-attention layers whose ssm_out cannot move
// its value heads back (blocks wider than a head), with the names of the
// tensors that then keep the file's order.
func tiledLayers(f *gguf.File, c *Config, heads qwen35.Heads) ([]int, map[string]bool) {
	var layers []int
	names := map[string]bool{}
	if heads.Nv == heads.Nk {
		return nil, names
	}
	for l, typ := range c.LayerTypes {
		info, err := f.Info(fmt.Sprintf("blk.%d.ssm_out.weight", l))
		if typ != LinearAttention || err != nil || info.Type.RowBytes(heads.Dv) != 0 {
			continue // a missing tensor is the loader's error to report
		}
		layers = append(layers, l)
		p := fmt.Sprintf("%slayers.%d.linear_attn.", ggufPrefix, l)
		names[p+"in_proj_z.weight"] = true
		names[p+"out_proj.weight"] = true
	}
	return layers, names
}

// ggufPrefix is the name prefix the bindings use for a GGUF file: the
// text-only export's, which qwen35.Lookup and quant.Plan both know.
const ggufPrefix = "model."

func (s *ggufSource) prefix() (string, error) { return ggufPrefix, nil }

// tiledHeads returns the value heads of a tensor that keeps the file's
// tiled head order (tiled), nil for the others: what a merged LoRA
// update of it must follow.
func (s *ggufSource) tiledHeads(name string) *qwen35.Heads {
	if !s.tiled[name] {
		return nil
	}
	h := s.heads
	return &h
}

// expertLayout implements source: a GGUF file stacks each projection's
// experts in one tensor (ffn_gate_exps, ffn_up_exps, ffn_down_exps).
func (s *ggufSource) expertLayout(string) expertLayout { return expertsStacked }

// nextNLayers returns the file's count of MTP blocks appended to the
// layers (qwen35.KeyNextNLayers under the file's architecture), 0 when
// the key is absent.
func (s *ggufSource) nextNLayers() (int64, error) {
	key := qwen35.ArchKey(s.arch, qwen35.KeyNextNLayers)
	if !s.f.Metadata().Has(key) {
		return 0, nil
	}
	return s.f.Metadata().Int(key)
}

// lookup finds the file's tensor for a binding and checks its shape and
// type.
func (s *ggufSource) lookup(b binding) (qwen35.Tensor, gguf.TensorInfo, compute.DType, error) {
	m, ok := s.name(b)
	if !ok {
		return m, gguf.TensorInfo{}, 0, fmt.Errorf("tensor %s has no qwen35 GGUF name", b.name)
	}
	info, err := s.f.Info(m.Name)
	if err != nil {
		return m, info, 0, fmt.Errorf("tensor %s (for %s): %w", m.Name, b.name, err)
	}
	want := b.shape
	if m.Squeeze {
		want = slices.DeleteFunc(slices.Clone(want), func(d int) bool { return d == 1 })
	}
	for len(want) > 1 && want[0] == 1 {
		want = want[1:] // Shape drops ggml's trailing 1s: the shared expert gate [1, H]
	}
	if got := info.Shape(); !slices.Equal(got, want) {
		return m, info, 0, fmt.Errorf("tensor %s has shape %v (ggml dims %v), the metadata implies %v", m.Name, got, info.Dims, want)
	}
	dt, ok := ggmlDType(info.Type)
	if !ok {
		return m, info, 0, fmt.Errorf("tensor %s is %v, a type govinfer does not compute with (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)", m.Name, info.Type)
	}
	if m.Transform != qwen35.Copy && dt.Size() == 0 {
		if m.Transform == qwen35.NormPlusOne || m.Transform == qwen35.NegExp || len(b.shape) == 1 {
			return m, info, 0, fmt.Errorf("tensor %s is %v; the converter stores it in F32", m.Name, info.Type)
		}
	}
	return m, info, dt, nil
}

// ggmlDType maps a ggml tensor type to a weight dtype.
func ggmlDType(t gguf.GGMLType) (compute.DType, bool) {
	switch t {
	case gguf.F32:
		return compute.F32, true
	case gguf.F16:
		return compute.F16, true
	case gguf.BF16:
		return compute.BF16, true
	}
	if qt, ok := quant.TypeFromGGML(uint32(t)); ok {
		return compute.QuantDType(qt)
	}
	return 0, false
}

func (s *ggufSource) check(b binding) (int64, error) {
	_, info, _, err := s.lookup(b)
	return info.Size, err
}

func (s *ggufSource) load(b binding) (compute.DType, []byte, bool, error) {
	m, info, dt, err := s.lookup(b)
	if err != nil {
		return 0, nil, false, err
	}
	t, err := s.f.Tensor(info.Name)
	if err != nil {
		return 0, nil, false, err
	}
	rows, cols := 1, b.shape[len(b.shape)-1]
	for _, d := range b.shape[:len(b.shape)-1] {
		rows *= d
	}
	reorder := m.Transform.Reorders() && s.heads.Nv != s.heads.Nk && !s.tiled[b.name]
	switch m.Transform {
	case qwen35.NormPlusOne, qwen35.NegExp:
		data, err := s.undoValues(m, t.Data, dt, cols*rows)
		return compute.F32, data, false, err
	}
	if !reorder {
		return dt, t.Data, true, nil
	}
	// Move whole rows, or blocks of columns one value head wide (any
	// dtype: rows never share a block); a vector's entries are rows of one
	// value.
	if len(b.shape) == 1 {
		rows, cols = cols, 1
	}
	rb := dt.RowBytes(cols)
	if rb == 0 || rb*rows != len(t.Data) {
		return 0, nil, false, fmt.Errorf("tensor %s: %d bytes for %d rows of %d %v values", info.Name, len(t.Data), rows, cols, dt)
	}
	out := make([]byte, len(t.Data))
	if m.Transform == qwen35.HeadCols {
		hb := dt.RowBytes(s.heads.Dv)
		if hb == 0 || hb*s.heads.Nv != rb {
			return 0, nil, false, fmt.Errorf("tensor %s: rows of %d %v values are not %d heads of %d", info.Name, cols, dt, s.heads.Nv, s.heads.Dv)
		}
		for r := range rows {
			row, src := out[r*rb:(r+1)*rb], t.Data[r*rb:(r+1)*rb]
			for g := range s.heads.Nv {
				t := s.heads.Tiled(g)
				copy(row[g*hb:(g+1)*hb], src[t*hb:(t+1)*hb])
			}
		}
		return dt, out, false, nil
	}
	for i := range rows {
		src := m.Transform.Source(s.heads, rows, i, false)
		copy(out[i*rb:(i+1)*rb], t.Data[src*rb:(src+1)*rb])
	}
	return dt, out, false, nil
}

// undoValues converts a norm's 1 + w or ssm_a back, to float32, moving
// ssm_a's entries to the grouped head order.
func (s *ggufSource) undoValues(m qwen35.Tensor, data []byte, dt compute.DType, n int) ([]byte, error) {
	widen, _ := widener(dt)
	v := make([]float32, n)
	if err := widen(v, data); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", m.Name, err)
	}
	out := make([]byte, 4*n)
	for i := range n {
		src := i
		if m.Transform == qwen35.NegExp && s.heads.Nv != s.heads.Nk {
			src = m.Transform.Source(s.heads, n, i, false)
		}
		x := m.Transform.FromGGUF(v[src])
		if m.Transform == qwen35.NegExp && (math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)) {
			return nil, fmt.Errorf("tensor %s: entry %d is %g, which is not -exp of a finite A_log", m.Name, src, v[src])
		}
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out, nil
}

func (s *ggufSource) evict(b binding) {
	if m, ok := s.name(b); ok {
		s.f.Evict(m.Name)
	}
}

// ErrNoWeights is wrapped by the error of opening a GGUF file that holds no
// model weights (a vocabulary-only file): such a file serves the tokenizer
// and chat template only.
var ErrNoWeights = errors.New("the GGUF file holds no model weights")

// ConfigFromGGUF reads the hyperparameters of a qwen35 or qwen35moe GGUF
// file from its metadata (the qwen35.* keys, or the same under qwen35moe.
// with the expert keys: gguf/qwen35) and tensors: the vocabulary size is
// token_embd's, and a file without output.weight ties the output matrix to
// the embeddings. A qwen35moe file needs no feed_forward_length. Blocks
// appended for multi-token prediction (nextn_predict_layers) are not
// layers of the text model.
func ConfigFromGGUF(f *gguf.File) (*Config, error) {
	md := f.Metadata()
	arch, err := md.String("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if arch != qwen35.Arch && arch != qwen35.ArchMoE {
		hint := ""
		if arch == "clip" {
			hint = " (an mmproj file: a vision tower, given with --mmproj beside the model)"
		}
		return nil, fmt.Errorf("model: %w: the GGUF file's general.architecture is %q%s; govinfer runs %q (Qwen3.5) and %q (Qwen3.5 mixture of experts)",
			ErrArchitecture, arch, hint, qwen35.Arch, qwen35.ArchMoE)
	}
	var errs []error
	geti := func(key string) int {
		key = qwen35.ArchKey(arch, key)
		v, err := md.Int(key)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		if v < 0 || v > math.MaxInt32 {
			errs = append(errs, fmt.Errorf("%s = %d is out of range", key, v))
			return 0
		}
		return int(v)
	}
	getf := func(key string) float64 {
		v, err := md.Float(qwen35.ArchKey(arch, key))
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	has := func(key string) bool { return md.Has(qwen35.ArchKey(arch, key)) }
	c := &Config{
		NumLayers:             geti(qwen35.KeyBlockCount),
		MaxPositionEmbeddings: geti(qwen35.KeyContextLength),
		HiddenSize:            geti(qwen35.KeyEmbeddingLength),
		NumHeads:              geti(qwen35.KeyHeadCount),
		NumKVHeads:            geti(qwen35.KeyHeadCountKV),
		HeadDim:               geti(qwen35.KeyKeyLength),
		RMSNormEps:            getf(qwen35.KeyRMSEpsilon),
		RopeTheta:             getf(qwen35.KeyRopeFreqBase),
		LinearConvKernel:      geti(qwen35.KeyConvKernel),
		LinearKeyHeadDim:      geti(qwen35.KeyStateSize),
		LinearNumKeyHeads:     geti(qwen35.KeyGroupCount),
		LinearNumValueHeads:   geti(qwen35.KeyTimeStepRank),
		FullAttentionInterval: geti(qwen35.KeyFullAttentionInterval),
		TieWordEmbeddings:     !f.Has("output.weight"),
	}
	if arch == qwen35.ArchMoE {
		c.NumExperts = geti(qwen35.KeyExpertCount)
		c.NumExpertsPerTok = geti(qwen35.KeyExpertUsedCount)
		c.MoEIntermediateSize = geti(qwen35.KeyExpertFeedForwardLength)
		c.SharedExpertIntermediateSize = geti(qwen35.KeyExpertSharedFeedForwardLength)
		if c.NumExperts == 0 && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("%s is 0 in a %s file", qwen35.ArchKey(arch, qwen35.KeyExpertCount), arch))
		}
	}
	if arch == qwen35.Arch || has(qwen35.KeyFeedForwardLength) {
		c.IntermediateSize = geti(qwen35.KeyFeedForwardLength)
	}
	inner, rotary, valueLen := geti(qwen35.KeyInnerSize), geti(qwen35.KeyRopeDimensionCount), geti(qwen35.KeyValueLength)
	if has(qwen35.KeyNextNLayers) {
		c.NumLayers -= geti(qwen35.KeyNextNLayers)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("model: GGUF metadata: %w", errors.Join(errs...))
	}
	if valueLen != c.HeadDim {
		return nil, fmt.Errorf("model: GGUF metadata: attention value length %d differs from key length %d", valueLen, c.HeadDim)
	}
	if c.LinearNumValueHeads > 0 {
		if inner%c.LinearNumValueHeads != 0 {
			return nil, fmt.Errorf("model: GGUF metadata: %s %d is not a multiple of %s %d",
				qwen35.ArchKey(arch, qwen35.KeyInnerSize), inner, qwen35.ArchKey(arch, qwen35.KeyTimeStepRank), c.LinearNumValueHeads)
		}
		c.LinearValueHeadDim = inner / c.LinearNumValueHeads
	}
	if c.HeadDim > 0 {
		c.PartialRotaryFactor = float64(rotary) / float64(c.HeadDim)
		for c.RotaryDim() < rotary { // a factor that rounds down
			c.PartialRotaryFactor = math.Nextafter(c.PartialRotaryFactor, 2)
		}
	}
	if c.NumLayers > 0 && c.FullAttentionInterval > 0 {
		c.LayerTypes = defaultLayerTypes(c.NumLayers, c.FullAttentionInterval)
	}
	if has(qwen35.KeyRopeSections) {
		sections, err := md.Ints(qwen35.ArchKey(arch, qwen35.KeyRopeSections))
		if err != nil {
			return nil, fmt.Errorf("model: GGUF metadata: %w", err)
		}
		for len(sections) > 0 && sections[len(sections)-1] == 0 {
			sections = sections[:len(sections)-1] // the converter pads to 4
		}
		for _, s := range sections {
			c.MRopeSection = append(c.MRopeSection, int(s))
		}
	}
	if eos, err := md.Int("tokenizer.ggml.eos_token_id"); err == nil {
		c.EOSTokenIDs = []int{int(eos)}
	}
	emb, err := f.Info("token_embd.weight")
	switch {
	case errors.Is(err, gguf.ErrNotFound) && len(f.Tensors()) == 0:
		return nil, fmt.Errorf("model: %w (a vocabulary-only file?)", ErrNoWeights)
	case err != nil:
		return nil, fmt.Errorf("model: %w", err)
	case len(emb.Shape()) != 2:
		return nil, fmt.Errorf("model: token_embd.weight has shape %v, want [vocab, hidden]", emb.Shape())
	}
	c.VocabSize = emb.Shape()[0]
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("model: GGUF metadata: %w", err)
	}
	return c, nil
}

// NewGGUF builds a model from an open qwen35 or qwen35moe GGUF file. The file must stay
// open until the model is closed (the CPU backend reads weights from its
// memory map); Close does not close it.
func NewGGUF(f *gguf.File, o Options) (*Model, error) {
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	heads := qwen35.Heads{Nk: cfg.LinearNumKeyHeads, Nv: cfg.LinearNumValueHeads, Dk: cfg.LinearKeyHeadDim, Dv: cfg.LinearValueHeadDim}
	layers, names := tiledLayers(f, cfg, heads)
	arch, _ := f.Metadata().String("general.architecture") // ConfigFromGGUF checked it
	if o.Progress != nil {
		if note := memoryNote(f, cfg, o); note != "" {
			progress := o.Progress
			var once sync.Once
			o.Progress = func(p Progress) {
				once.Do(func() {
					q := p
					q.Note = note
					progress(q)
				})
				progress(p)
			}
		}
	}
	m, err := newModel(cfg, &ggufSource{f: f, arch: arch, heads: heads, tiled: names, layers: cfg.NumLayers}, o)
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		m.w.layers[l].mixer.(*gatedDeltaNet).tiled = &heads
	}
	return m, nil
}

// hostMemAvailable returns the memory available for new pages
// (/proc/meminfo's MemAvailable) in bytes; false where it cannot be read.
// Tests replace it.
var hostMemAvailable = func() (int64, bool) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// memoryNote says, for a load of the file's model with options o, when
// the weights that stay in host memory, read in place from the file's
// memory map, are more than the memory available: the operating system
// then drops pages and reads them from disk again when a step needs them,
// up to the weights one decode step reads (every matrix but the rows of an
// untied embedding table, of a mixture of experts the k experts a token
// chooses out of E) every token. Weights a device holds (a backend with
// its own memory, compute.MemoryReporter) and tensors converted while
// loading (Quantize) are not the file's pages and are not counted. Empty
// when they fit.
func memoryNote(f *gguf.File, c *Config, o Options) string {
	if _, device := o.Backend.(compute.MemoryReporter); device {
		return ""
	}
	var resident, perStep int64
	for _, t := range f.Tensors() {
		layer := -1
		if rest, ok := strings.CutPrefix(t.Name, "blk."); ok {
			num, _, _ := strings.Cut(rest, ".")
			layer, _ = strconv.Atoi(num)
		}
		if layer >= c.NumLayers || o.Quantize != "" && t.Type.BlockSize() == 1 {
			continue // the MTP block (loaded for drafts only), or converted
		}
		resident += t.Size
		switch {
		case t.Name == "token_embd.weight" && !c.TieWordEmbeddings:
		case strings.Contains(t.Name, "_exps.") && c.NumExperts > 0:
			perStep += t.Size / int64(c.NumExperts) * int64(c.NumExpertsPerTok)
		default:
			perStep += t.Size
		}
	}
	avail, ok := hostMemAvailable()
	if !ok || resident <= avail {
		return ""
	}
	return fmt.Sprintf("the weights used in place from %s (%s) are more than the memory available (%s, MemAvailable): "+
		"the pages that do not stay resident are read from disk again as steps need them, up to %s per decoded token "+
		"(the weights one step reads), so decoding runs at the disk's speed",
		filepath.Base(f.Paths()[0]), decimalBytes(resident), decimalBytes(avail), decimalBytes(perStep))
}

// decimalBytes writes n in GB, or MB below 1 GB.
func decimalBytes(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f GB", float64(n)/1e9)
}

// locateGGUF reports whether path names a GGUF model (gguf.Locate). A path
// that does not exist is left to the checkpoint loader's error.
func locateGGUF(path string) (string, bool, error) {
	if _, err := os.Stat(path); err != nil {
		return "", false, nil
	}
	file, ok, err := gguf.Locate(path)
	if err != nil {
		return "", false, fmt.Errorf("model: %w", err)
	}
	return file, ok, nil
}

// openGGUF opens the model of a GGUF file.
func openGGUF(path string, o Options) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := NewGGUF(f, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.file = f
	return m, nil
}
