package vision

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

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/clip"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/safetensors"
)

// This file reads the tower from an mmproj GGUF file, as llama.cpp's
// converter writes it (convert_hf_to_gguf.py --mmproj; the layout is
// package gguf/clip's): the metadata gives the Config, the tensors are
// served to the loader under their Hugging Face names and shapes, so the
// tower built is the one the safetensors checkpoint gives.

// ggufPrefix is the prefix under which a ggufSource names the tower's
// tensors (one of towerPrefixes).
const ggufPrefix = "visual."

// ErrNotMMProj is wrapped by the errors about a file that is not an mmproj
// GGUF file of a Qwen3.5 (qwen3vl_merger) vision tower.
var ErrNotMMProj = errors.New("not a Qwen3.5 mmproj file")

// MMProjInfo describes the vision tower of an mmproj GGUF file.
type MMProjInfo struct {
	// Config is the tower's hyperparameters, those config.json's
	// vision_config gives for the same tower.
	Config *Config
	// Processor is the image preprocessing the tower takes: patch and
	// merge sizes, mean and std from the file, temporal patch size 2, and
	// the pixel bounds of clip.vision.image_min_pixels and
	// image_max_pixels, or Qwen3.5's (imageproc.DefaultConfig's) where the
	// file has none, as llama.cpp's converter writes none for this
	// projector.
	Processor imageproc.Config
	// PixelBounds reports whether the file set the pixel bounds.
	PixelBounds bool
	// FileType is general.file_type (0 F32, 1 F16, 32 BF16), or -1.
	FileType int
	// Tensors is the number of tensors of the file.
	Tensors int
}

// ReadMMProj reads and checks the mmproj GGUF file at path: its metadata,
// and every tensor the tower needs (present, of type F32, F16 or BF16, of
// the shape the metadata implies).
func ReadMMProj(path string) (*MMProjInfo, error) {
	f, info, _, err := openMMProj(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	return info, nil
}

// OpenGGUF loads the vision tower of the mmproj GGUF file at path (see
// ReadMMProj). The tower holds the file open until it is closed.
func OpenGGUF(path string, o Options) (*Tower, error) {
	f, info, src, err := openMMProj(path)
	if err != nil {
		return nil, err
	}
	t, err := newTower(info.Config, src, o)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (mmproj %s)", err, path)
	}
	t.file = f
	return t, nil
}

// FindMMProj returns the files named mmproj*.gguf (any case) in the
// directory of the GGUF model at model (a file, or a directory holding
// one), sorted: llama.cpp's repositories ship a model's projector beside
// it under such a name.
func FindMMProj(model string) ([]string, error) {
	dir := model
	if st, err := os.Stat(model); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	} else if !st.IsDir() {
		dir = filepath.Dir(model)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := strings.ToLower(e.Name())
		if !e.IsDir() && strings.HasPrefix(name, "mmproj") && strings.HasSuffix(name, ".gguf") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// openMMProj opens and checks an mmproj file and returns the tensors'
// source.
func openMMProj(path string) (*gguf.File, *MMProjInfo, *ggufSource, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("vision: mmproj: %w", err)
	}
	info, src, err := readMMProj(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("vision: mmproj %s: %w", path, err)
	}
	return f, info, src, nil
}

// mmprojMeta reads the metadata of an mmproj file.
type mmprojMeta struct {
	md  *gguf.Metadata
	err error
}

// int reads a positive integer key; def, when not zero, is its value when
// the key is absent.
func (m *mmprojMeta) int(key string, def int) int {
	if m.err != nil {
		return 0
	}
	if !m.md.Has(key) && def != 0 {
		return def
	}
	v, err := m.md.Int(key)
	if err != nil {
		m.err = err
		return 0
	}
	if v <= 0 || v > 1<<30 {
		m.err = fmt.Errorf("%s = %d, want a positive size", key, v)
		return 0
	}
	return int(v)
}

// bool reads a bool key, def when absent.
func (m *mmprojMeta) bool(key string, def bool) bool {
	if m.err != nil || !m.md.Has(key) {
		return def
	}
	v, err := m.md.Bool(key)
	if err != nil {
		m.err = err
	}
	return v
}

// floats3 reads an array of three numbers; float32 values come back as
// the shortest decimal that rounds to them (0.5, 0.48145466).
func (m *mmprojMeta) floats3(key string) [3]float64 {
	var out [3]float64
	if m.err != nil {
		return out
	}
	v, ok := m.md.Get(key)
	if !ok {
		m.err = fmt.Errorf("%s: %w", key, gguf.ErrNoKey)
		return out
	}
	var vals []float64
	switch x := v.(type) {
	case []float32:
		for _, f := range x {
			d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
			vals = append(vals, d)
		}
	case []float64:
		vals = x
	default:
		m.err = fmt.Errorf("%s is a %T, want an array of 3 numbers", key, v)
		return out
	}
	if len(vals) != 3 {
		m.err = fmt.Errorf("%s has %d values, want 3 (one per channel)", key, len(vals))
		return out
	}
	copy(out[:], vals)
	return out
}

// readMMProj checks an open mmproj file and builds its config and tensor
// source.
func readMMProj(f *gguf.File) (*MMProjInfo, *ggufSource, error) {
	md := f.Metadata()
	arch, _ := md.String(clip.KeyArchitecture)
	if arch != clip.Arch {
		return nil, nil, fmt.Errorf("%w: general.architecture is %q, want %q (a projector file, mmproj*.gguf, not a model)", ErrNotMMProj, arch, clip.Arch)
	}
	proj, _ := md.String(clip.KeyProjectorType)
	if md.Has(clip.KeyVisionProjectorType) {
		proj, _ = md.String(clip.KeyVisionProjectorType)
	}
	if proj != clip.ProjectorQwen3VL {
		return nil, nil, fmt.Errorf("%w: projector type %q is not supported (want %q, the tower of Qwen3.5 and Qwen3-VL)", ErrNotMMProj, proj, clip.ProjectorQwen3VL)
	}
	m := &mmprojMeta{md: md}
	if !m.bool(clip.KeyHasVisionEncoder, true) {
		return nil, nil, fmt.Errorf("%w: %s is false", ErrNotMMProj, clip.KeyHasVisionEncoder)
	}
	if m.bool(clip.KeyUseSILU, false) || !m.bool(clip.KeyUseGELU, false) {
		return nil, nil, fmt.Errorf("%w: the blocks' activation must be GELU (%s true), as Qwen3.5's", ErrNotMMProj, clip.KeyUseGELU)
	}
	if v, ok := md.Get(clip.KeyIsDeepstackLayers); ok {
		bs, _ := v.([]bool)
		if slices.Contains(bs, true) {
			return nil, nil, fmt.Errorf("%w: the tower has deepstack layers (Qwen3-VL's), which Qwen3.5's has not and govinfer does not run", ErrNotMMProj)
		}
	}
	cfg := &Config{
		Depth:             m.int(clip.KeyBlockCount, 0),
		HiddenSize:        m.int(clip.KeyEmbeddingLength, 0),
		NumHeads:          m.int(clip.KeyHeadCount, 0),
		IntermediateSize:  m.int(clip.KeyFeedForwardLength, 0),
		PatchSize:         m.int(clip.KeyPatchSize, 0),
		TemporalPatchSize: 2,
		SpatialMergeSize:  m.int(clip.KeySpatialMergeSize, 2),
		OutHiddenSize:     m.int(clip.KeyProjectionDim, 0),
		HiddenAct:         GELUTanh, // llama.cpp's use_gelu: ggml_gelu, the tanh form
		LayerNormEps:      DefaultLayerNormEps,
		RopeTheta:         DefaultRopeTheta, // clip.cpp's, fixed
	}
	proc := imageproc.DefaultConfig()
	proc.Mean = m.floats3(clip.KeyImageMean)
	proc.Std = m.floats3(clip.KeyImageStd)
	if m.err != nil {
		return nil, nil, m.err
	}
	if md.Has(clip.KeyLayerNormEps) {
		eps, err := md.Float(clip.KeyLayerNormEps)
		if err != nil {
			return nil, nil, err
		}
		cfg.LayerNormEps = eps
	}
	// The patch kernel gives the channels, the position table its size.
	pw, err := f.Info(clip.PatchWeight)
	if err != nil {
		return nil, nil, fmt.Errorf("missing tensor %s: %w", clip.PatchWeight, err)
	}
	if len(pw.Dims) != 4 {
		return nil, nil, fmt.Errorf("tensor %s has dims %v, want [patch, patch, channels, width]", clip.PatchWeight, pw.Dims)
	}
	cfg.InChannels = pw.Dims[2]
	pe, err := f.Info(clip.PositionEmbd)
	if err != nil {
		return nil, nil, fmt.Errorf("missing tensor %s: %w", clip.PositionEmbd, err)
	}
	if len(pe.Dims) < 2 {
		return nil, nil, fmt.Errorf("tensor %s has dims %v, want [width, positions]", clip.PositionEmbd, pe.Dims)
	}
	cfg.NumPositionEmbeddings = pe.Dims[1]
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if md.Has(clip.KeyImageSize) {
		if size := m.int(clip.KeyImageSize, 0); m.err != nil {
			return nil, nil, m.err
		} else if want := cfg.PositionSide() * cfg.PatchSize; size != want {
			return nil, nil, fmt.Errorf("%s %d does not match the position table of %d rows (side %d x patch %d = %d)",
				clip.KeyImageSize, size, cfg.NumPositionEmbeddings, cfg.PositionSide(), cfg.PatchSize, want)
		}
	}
	info := &MMProjInfo{Config: cfg, FileType: -1, Tensors: len(f.Tensors())}
	if md.Has(clip.KeyFileType) {
		if ft, err := md.Int(clip.KeyFileType); err == nil {
			info.FileType = int(ft)
		}
	}
	proc.PatchSize, proc.MergeSize, proc.TemporalPatchSize = cfg.PatchSize, cfg.SpatialMergeSize, cfg.TemporalPatchSize
	if md.Has(clip.KeyImageMinPixels) || md.Has(clip.KeyImageMaxPixels) {
		proc.MinPixels = m.int(clip.KeyImageMinPixels, proc.MinPixels)
		proc.MaxPixels = m.int(clip.KeyImageMaxPixels, proc.MaxPixels)
		if m.err != nil {
			return nil, nil, m.err
		}
		info.PixelBounds = true
	}
	if err := proc.Validate(); err != nil {
		return nil, nil, err
	}
	info.Processor = proc
	src, err := newGGUFSource(f, cfg)
	if err != nil {
		return nil, nil, err
	}
	return info, src, nil
}

// ggufSource serves an mmproj file's tensors under the Hugging Face names
// (with ggufPrefix) and shapes: the loader reads it as it reads a
// checkpoint.
type ggufSource struct {
	f      *gguf.File
	tensor map[string]ggufTensor // by Hugging Face name
	patch  safetensors.Tensor    // the Conv3d kernel, rebuilt from its two frames
}

// ggufTensor is one checked tensor of the file.
type ggufTensor struct {
	name  string // GGUF name
	dtype safetensors.DType
	shape []int // Hugging Face shape
}

// ggufDTypes are the tensor types the reader takes.
var ggufDTypes = map[gguf.GGMLType]safetensors.DType{gguf.F32: safetensors.F32, gguf.F16: safetensors.F16, gguf.BF16: safetensors.BF16}

// towerShapes returns the Hugging Face names (relative to the tower) and
// shapes of every tensor of a tower with config c.
func towerShapes(c *Config) map[string][]int {
	d, m2 := c.HiddenSize, c.SpatialMergeSize*c.SpatialMergeSize
	out := map[string][]int{
		clip.PatchKernel:           {d, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize},
		"patch_embed.proj.bias":    {d},
		"pos_embed.weight":         {c.NumPositionEmbeddings, d},
		"merger.norm.weight":       {d},
		"merger.norm.bias":         {d},
		"merger.linear_fc1.weight": {m2 * d, m2 * d},
		"merger.linear_fc1.bias":   {m2 * d},
		"merger.linear_fc2.weight": {c.OutHiddenSize, m2 * d},
		"merger.linear_fc2.bias":   {c.OutHiddenSize},
	}
	for i := range c.Depth {
		p := fmt.Sprintf("blocks.%d.", i)
		for name, shape := range map[string][]int{
			"norm1.weight": {d}, "norm1.bias": {d}, "norm2.weight": {d}, "norm2.bias": {d},
			"attn.qkv.weight": {3 * d, d}, "attn.qkv.bias": {3 * d},
			"attn.proj.weight": {d, d}, "attn.proj.bias": {d},
			"mlp.linear_fc1.weight": {c.IntermediateSize, d}, "mlp.linear_fc1.bias": {c.IntermediateSize},
			"mlp.linear_fc2.weight": {d, c.IntermediateSize}, "mlp.linear_fc2.bias": {d},
		} {
			out[p+name] = shape
		}
	}
	return out
}

// dimsMatch reports whether ggml dims (innermost first, trailing 1s
// allowed) are the Hugging Face shape.
func dimsMatch(dims, shape []int) bool {
	if len(dims) < len(shape) {
		return false
	}
	for i, s := range shape {
		if dims[len(shape)-1-i] != s {
			return false
		}
	}
	for _, d := range dims[len(shape):] {
		if d != 1 {
			return false
		}
	}
	return true
}

// ggmlDims returns the ggml dims of a Hugging Face shape.
func ggmlDims(shape []int) []int {
	d := slices.Clone(shape)
	slices.Reverse(d)
	return d
}

// newGGUFSource checks every tensor of the tower with config c in f and
// rebuilds the patch kernel.
func newGGUFSource(f *gguf.File, c *Config) (*ggufSource, error) {
	s := &ggufSource{f: f, tensor: map[string]ggufTensor{}}
	check := func(name string, shape []int) (safetensors.DType, error) {
		info, err := f.Info(name)
		if err != nil {
			return "", fmt.Errorf("missing tensor %s (%w)", name, gguf.ErrNotFound)
		}
		dt, ok := ggufDTypes[info.Type]
		if !ok {
			return "", fmt.Errorf("tensor %s has type %s; the tower reads F32, F16 and BF16", name, info.Type)
		}
		if !dimsMatch(info.Dims, shape) {
			return "", fmt.Errorf("tensor %s has dims %v; the file's metadata implies %v", name, info.Dims, ggmlDims(shape))
		}
		return dt, nil
	}
	names := towerShapes(c)
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, hf := range keys {
		shape := names[hf]
		if hf == clip.PatchKernel {
			continue
		}
		t, ok := clip.Lookup(hf)
		if !ok {
			return nil, fmt.Errorf("no GGUF name for tensor %s", hf) // the table and towerShapes disagree
		}
		dt, err := check(t.Name, shape)
		if err != nil {
			return nil, err
		}
		s.tensor[hf] = ggufTensor{name: t.Name, dtype: dt, shape: shape}
	}
	// The Conv3d kernel [D, C, 2, P, P] is stored as its two frames.
	shape := names[clip.PatchKernel]
	frame := []int{shape[0], shape[1], shape[3], shape[4]}
	var frames [2]gguf.Tensor
	var dts [2]safetensors.DType
	for k, name := range []string{clip.PatchWeight, clip.PatchWeight1} {
		dt, err := check(name, frame)
		if err != nil {
			return nil, err
		}
		if frames[k], err = f.Tensor(name); err != nil {
			return nil, err
		}
		dts[k] = dt
	}
	patch, err := joinFrames(frames, dts, shape)
	if err != nil {
		return nil, err
	}
	s.patch = patch
	return s, nil
}

// joinFrames interleaves the two frames [D, C, P, P] of the patch kernel
// into the Conv3d kernel [D, C, 2, P, P], in their common type (F32 if they
// differ).
func joinFrames(frames [2]gguf.Tensor, dts [2]safetensors.DType, shape []int) (safetensors.Tensor, error) {
	dt := dts[0]
	var raw [2][]byte
	for k := range frames {
		raw[k] = frames[k].Data
	}
	if dts[0] != dts[1] {
		dt = safetensors.F32
		for k := range frames {
			t := safetensors.Tensor{Name: frames[k].Name, DType: dts[k], Shape: frames[k].Shape(), Data: frames[k].Data}
			v, err := t.ToFloat32()
			if err != nil {
				return safetensors.Tensor{}, fmt.Errorf("tensor %s: %w", frames[k].Name, err)
			}
			raw[k] = f32Bytes(v)
		}
	}
	es := map[safetensors.DType]int{safetensors.F32: 4, safetensors.F16: 2, safetensors.BF16: 2}[dt]
	run := shape[3] * shape[4] * es // one channel's P x P kernel
	rows := shape[0] * shape[1]
	if len(raw[0]) != rows*run || len(raw[1]) != rows*run {
		return safetensors.Tensor{}, fmt.Errorf("tensor %s: %d bytes, want %d", clip.PatchWeight, len(raw[0]), rows*run)
	}
	out := make([]byte, 2*rows*run)
	for r := range rows {
		copy(out[(2*r)*run:], raw[0][r*run:(r+1)*run])
		copy(out[(2*r+1)*run:], raw[1][r*run:(r+1)*run])
	}
	return safetensors.Tensor{Name: ggufPrefix + clip.PatchKernel, DType: dt, Shape: shape, Data: out}, nil
}

// f32Bytes returns float32 values as little-endian bytes.
func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// Has implements tensorSource.
func (s *ggufSource) Has(name string) bool {
	rest, ok := strings.CutPrefix(name, ggufPrefix)
	if !ok {
		return false
	}
	if rest == clip.PatchKernel {
		return true
	}
	_, ok = s.tensor[rest]
	return ok
}

// Info implements tensorSource.
func (s *ggufSource) Info(name string) (safetensors.TensorInfo, error) {
	rest, _ := strings.CutPrefix(name, ggufPrefix)
	if rest == clip.PatchKernel {
		return s.patch.Info(), nil
	}
	t, ok := s.tensor[rest]
	if !ok {
		return safetensors.TensorInfo{}, fmt.Errorf("mmproj has no tensor for %s", name)
	}
	return safetensors.TensorInfo{Name: name, DType: t.dtype, Shape: slices.Clone(t.shape)}, nil
}

// Tensor implements tensorSource: a zero-copy view of the file, or the
// rebuilt patch kernel.
func (s *ggufSource) Tensor(name string) (safetensors.Tensor, error) {
	rest, _ := strings.CutPrefix(name, ggufPrefix)
	if rest == clip.PatchKernel {
		return s.patch, nil
	}
	t, ok := s.tensor[rest]
	if !ok {
		return safetensors.Tensor{}, fmt.Errorf("mmproj has no tensor for %s", name)
	}
	g, err := s.f.Tensor(t.name)
	if err != nil {
		return safetensors.Tensor{}, err
	}
	return safetensors.Tensor{Name: name, DType: t.dtype, Shape: slices.Clone(t.shape), Data: g.Data}, nil
}
