package vision

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/clip"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// The tensor types of WriteGGUF's files (WriteGGUFOptions.Type).
const (
	// GGUFTypeF16 is llama.cpp's converter's default: matrices and patch
	// kernels in F16.
	GGUFTypeF16 = "f16"
	// GGUFTypeBF16 keeps the matrices in BF16 (a BF16 checkpoint's exact
	// values), the patch kernels in F32.
	GGUFTypeBF16 = "bf16"
	// GGUFTypeF32 writes every tensor in F32.
	GGUFTypeF32 = "f32"
)

// GGUFTypes returns the types WriteGGUF writes, the default first.
func GGUFTypes() []string { return []string{GGUFTypeF16, GGUFTypeBF16, GGUFTypeF32} }

// WriteGGUFOptions configures WriteGGUF.
type WriteGGUFOptions struct {
	// Type is the file's type: GGUFTypeF16 (the default when empty),
	// GGUFTypeBF16 or GGUFTypeF32. 1-D tensors and the position table are
	// F32 whatever it says, as llama.cpp's converter writes them.
	Type string
	// Name is general.name; empty means the checkpoint directory's name.
	Name string
}

// WriteGGUFResult describes a written mmproj file.
type WriteGGUFResult struct {
	Path     string
	FileType int // general.file_type
	Tensors  int
	Bytes    int64 // of tensor data
}

// mmprojTensor is one tensor of the file being written.
type mmprojTensor struct {
	name  string // GGUF
	hf    string // within the tower
	frame int    // the patch kernel's frame, or -1
	typ   gguf.GGMLType
	shape []int // Hugging Face shape of the data written
}

// WriteGGUF writes the vision tower of the checkpoint directory dir as an
// mmproj GGUF file at out in llama.cpp's layout (projector
// qwen3vl_merger; package gguf/clip), which llama.cpp's mtmd tools and
// ReadMMProj load: the converter's tensor names, types and metadata, and
// the preprocessor's pixel bounds (clip.vision.image_min_pixels and
// image_max_pixels), which the converter leaves out. The file appears
// when complete.
func WriteGGUF(ctx context.Context, dir, out string, o WriteGGUFOptions) (*WriteGGUFResult, error) {
	typ := o.Type
	if typ == "" {
		typ = GGUFTypeF16
	}
	matrix, fileType := map[string]gguf.GGMLType{GGUFTypeF16: gguf.F16, GGUFTypeBF16: gguf.BF16, GGUFTypeF32: gguf.F32}[typ],
		map[string]int{GGUFTypeF16: clip.FileTypeF16, GGUFTypeBF16: clip.FileTypeBF16, GGUFTypeF32: clip.FileTypeF32}[typ]
	if !slices.Contains(GGUFTypes(), typ) {
		return nil, fmt.Errorf("vision: mmproj type %q: want f16, bf16 or f32", typ)
	}
	cfg, ok, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("vision: %s has no vision tower (no vision_config in its config.json)", dir)
	}
	switch {
	case cfg.TemporalPatchSize != 2:
		return nil, fmt.Errorf("vision: temporal_patch_size %d: an mmproj file holds a patch kernel of 2 frames", cfg.TemporalPatchSize)
	case cfg.HiddenAct == GELU:
		return nil, fmt.Errorf("vision: hidden_act %q: llama.cpp's %s runs the tanh GELU", cfg.HiddenAct, clip.ProjectorQwen3VL)
	case cfg.RopeTheta != DefaultRopeTheta:
		return nil, fmt.Errorf("vision: rope_theta %v: llama.cpp's %s uses %v", cfg.RopeTheta, clip.ProjectorQwen3VL, DefaultRopeTheta)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	defer ck.Close()
	prefix, err := detectPrefix(ck)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	proc, err := imageproc.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	if proc.PatchSize != cfg.PatchSize || proc.MergeSize != cfg.SpatialMergeSize || proc.TemporalPatchSize != cfg.TemporalPatchSize {
		return nil, fmt.Errorf("vision: preprocessor_config.json's patch %d, merge %d, temporal patch %d differ from config.json's %d, %d, %d",
			proc.PatchSize, proc.MergeSize, proc.TemporalPatchSize, cfg.PatchSize, cfg.SpatialMergeSize, cfg.TemporalPatchSize)
	}
	if proc.MaxPixels > math.MaxUint32 {
		return nil, fmt.Errorf("vision: max pixels %d do not fit %s", proc.MaxPixels, clip.KeyImageMaxPixels)
	}
	// The tensors in the converter's order: the checkpoint's names sorted,
	// the patch kernel's two frames in its place.
	shapes := towerShapes(cfg)
	l := &loader{src: ck, prefix: prefix}
	hfNames := make([]string, 0, len(shapes))
	for name := range shapes {
		hfNames = append(hfNames, name)
	}
	slices.Sort(hfNames)
	for _, name := range hfNames {
		if _, err := l.info(name, shapes[name]); err != nil {
			return nil, err
		}
	}
	var plan []mmprojTensor
	var infos []gguf.TensorInfo
	for _, hf := range hfNames {
		shape := shapes[hf]
		if hf == clip.PatchKernel {
			pt := gguf.F32
			if matrix == gguf.F16 {
				pt = gguf.F16
			}
			frame := []int{shape[0], shape[1], shape[3], shape[4]}
			for k, name := range []string{clip.PatchWeight, clip.PatchWeight1} {
				plan = append(plan, mmprojTensor{name: name, hf: hf, frame: k, typ: pt, shape: frame})
			}
			continue
		}
		t, ok := clip.Lookup(hf)
		if !ok {
			return nil, fmt.Errorf("vision: no GGUF name for tensor %s", hf)
		}
		tt := gguf.F32
		if t.Class == clip.Matrix {
			tt = matrix
		}
		plan = append(plan, mmprojTensor{name: t.Name, hf: hf, frame: -1, typ: tt, shape: shape})
	}
	for _, p := range plan {
		infos = append(infos, gguf.TensorInfo{Name: p.name, Type: p.typ, Dims: ggmlDims(p.shape)})
	}
	md, err := mmprojMetadata(dir, cfg, proc, o.Name, fileType)
	if err != nil {
		return nil, err
	}
	w, err := gguf.NewWriter(out, md, infos)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	defer w.Abort()
	res := &WriteGGUFResult{Path: out, FileType: fileType, Tensors: len(plan)}
	for _, p := range plan {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := mmprojData(ck, prefix+p.hf, p)
		if err != nil {
			return nil, err
		}
		if err := w.WriteTensor(p.name, data); err != nil {
			return nil, fmt.Errorf("vision: %w", err)
		}
		res.Bytes += int64(len(data))
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return res, nil
}

// mmprojMetadata returns the metadata of the mmproj file of a tower, as
// llama.cpp's converter writes it, with the pixel bounds added.
func mmprojMetadata(dir string, c *Config, proc imageproc.Config, name string, fileType int) (*gguf.Metadata, error) {
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	f32s := func(v [3]float64) []float32 { return []float32{float32(v[0]), float32(v[1]), float32(v[2])} }
	md, err := gguf.NewMetadata(
		gguf.KV{Key: clip.KeyArchitecture, Value: clip.Arch},
		gguf.KV{Key: clip.KeyType, Value: clip.FileType},
		gguf.KV{Key: clip.KeyName, Value: name},
		gguf.KV{Key: clip.KeyFileType, Value: uint32(fileType)},
		gguf.KV{Key: clip.KeyHasVisionEncoder, Value: true},
		gguf.KV{Key: clip.KeyProjectionDim, Value: uint32(c.OutHiddenSize)},
		gguf.KV{Key: clip.KeyImageSize, Value: uint32(c.PositionSide() * c.PatchSize)},
		gguf.KV{Key: clip.KeyPatchSize, Value: uint32(c.PatchSize)},
		gguf.KV{Key: clip.KeyEmbeddingLength, Value: uint32(c.HiddenSize)},
		gguf.KV{Key: clip.KeyFeedForwardLength, Value: uint32(c.IntermediateSize)},
		gguf.KV{Key: clip.KeyBlockCount, Value: uint32(c.Depth)},
		gguf.KV{Key: clip.KeyHeadCount, Value: uint32(c.NumHeads)},
		gguf.KV{Key: clip.KeyImageMean, Value: f32s(proc.Mean)},
		gguf.KV{Key: clip.KeyImageStd, Value: f32s(proc.Std)},
		gguf.KV{Key: clip.KeyProjectorType, Value: clip.ProjectorQwen3VL},
		gguf.KV{Key: clip.KeyUseGELU, Value: true},
		gguf.KV{Key: clip.KeySpatialMergeSize, Value: uint32(c.SpatialMergeSize)},
		gguf.KV{Key: clip.KeyLayerNormEps, Value: float32(c.LayerNormEps)},
		gguf.KV{Key: clip.KeyIsDeepstackLayers, Value: make([]bool, c.Depth)},
		gguf.KV{Key: clip.KeyImageMinPixels, Value: uint32(proc.MinPixels)},
		gguf.KV{Key: clip.KeyImageMaxPixels, Value: uint32(proc.MaxPixels)},
		gguf.KV{Key: clip.KeyQuantizationVersion, Value: uint32(2)},
	)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return md, nil
}

// mmprojData reads a tensor of the checkpoint and encodes it as p says:
// one frame of the patch kernel, or the whole tensor, in p.typ.
func mmprojData(ck *safetensors.Checkpoint, name string, p mmprojTensor) ([]byte, error) {
	t, err := ck.Tensor(name)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	v, err := t.ToFloat32()
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	if p.frame >= 0 {
		// [D, C, 2, P, P] -> frame p.frame of each (D, C): [D, C, P, P].
		run := p.shape[2] * p.shape[3]
		rows := p.shape[0] * p.shape[1]
		f := make([]float32, rows*run)
		for r := range rows {
			copy(f[r*run:(r+1)*run], v[(2*r+p.frame)*run:])
		}
		v = f
	}
	switch p.typ {
	case gguf.F32:
		out := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		}
		return out, nil
	case gguf.F16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			h := half.F32ToF16(x)
			if h&0x7fff == 0x7c00 && !math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("vision: tensor %s: value %g at %d overflows F16 (write the mmproj in bf16 or f32)", name, x, i)
			}
			binary.LittleEndian.PutUint16(out[2*i:], h)
		}
		return out, nil
	default:
		out := make([]byte, 2*len(v))
		return out, half.EncodeBF16(out, v)
	}
}
