package vision

import (
	"fmt"
	"slices"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// Prefixes of the tower's tensor names, in the order they are tried: the
// Hugging Face multimodal checkpoint's, then that of exports without the
// model. prefix.
var towerPrefixes = [...]string{"model.visual.", "visual."}

// tensorSource is where the tower's tensors come from:
// *safetensors.Checkpoint, or an in-memory set in tests.
type tensorSource interface {
	Has(name string) bool
	Info(name string) (safetensors.TensorInfo, error)
	Tensor(name string) (safetensors.Tensor, error)
}

// block is one transformer block of the tower.
type block struct {
	norm1W, norm1B []float32
	norm2W, norm2B []float32
	qkv, proj      linear
	fc1, fc2       linear
}

// loader binds tensors of one source under one prefix.
type loader struct {
	src    tensorSource
	prefix string
	be     compute.Backend
	quant  quant.Type // the matrices' block format (Options.Quant)
}

// info returns the tensor's metadata after checking its shape and dtype.
func (l *loader) info(name string, shape []int) (safetensors.TensorInfo, error) {
	info, err := l.src.Info(l.prefix + name)
	if err != nil {
		return info, fmt.Errorf("vision: %w", err)
	}
	if !slices.Equal(info.Shape, shape) {
		return info, fmt.Errorf("vision: tensor %s%s has shape %v, config.json implies %v", l.prefix, name, info.Shape, shape)
	}
	switch info.DType {
	case safetensors.F32, safetensors.F16, safetensors.BF16:
	default:
		return info, fmt.Errorf("vision: tensor %s%s has dtype %s; want F32, F16 or BF16", l.prefix, name, info.DType)
	}
	return info, nil
}

// floats reads a tensor of the given shape as float32 values (a copy).
func (l *loader) floats(name string, shape ...int) ([]float32, error) {
	if _, err := l.info(name, shape); err != nil {
		return nil, err
	}
	t, err := l.src.Tensor(l.prefix + name)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	v, err := t.ToFloat32()
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return v, nil
}

// matrix loads a weight whose stored shape is shape, as a [rows, cols]
// matrix on the backend (cols the product of the trailing dimensions).
func (l *loader) matrix(name string, shape ...int) (compute.Weight, error) {
	info, err := l.info(name, shape)
	if err != nil {
		return nil, err
	}
	t, err := l.src.Tensor(l.prefix + name)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	dt := map[safetensors.DType]compute.DType{
		safetensors.F32: compute.F32, safetensors.F16: compute.F16, safetensors.BF16: compute.BF16,
	}[info.DType]
	cols := 1
	for _, d := range shape[1:] {
		cols *= d
	}
	data := t.Data
	if qt := matrixType(l.quant, cols); qt != quant.Keep && len(shape) > 1 {
		if data, err = quantizeMatrix(qt, dt, data, shape[0], cols); err != nil {
			return nil, err
		}
		dt, _ = compute.QuantDType(qt)
	}
	w, err := l.be.LoadWeight(l.prefix+name, dt, shape[0], cols, data)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return w, nil
}

// linear loads name.weight (of the given stored shape) and name.bias.
func (l *loader) linear(name string, shape ...int) (linear, error) {
	w, err := l.matrix(name+".weight", shape...)
	if err != nil {
		return linear{}, err
	}
	b, err := l.floats(name+".bias", shape[0])
	if err != nil {
		return linear{}, err
	}
	return linear{name: l.prefix + name, w: w, b: b, in: w.Cols(), out: w.Rows()}, nil
}

// detectPrefix returns the prefix under which src holds the tower.
func detectPrefix(src tensorSource) (string, error) {
	for _, p := range towerPrefixes {
		if src.Has(p + "patch_embed.proj.weight") {
			return p, nil
		}
	}
	return "", fmt.Errorf("vision: no vision tower: neither %spatch_embed.proj.weight nor %spatch_embed.proj.weight is present",
		towerPrefixes[0], towerPrefixes[1])
}

// load binds every tensor of the tower to t.
func (t *Tower) load(src tensorSource) error {
	prefix, err := detectPrefix(src)
	if err != nil {
		return err
	}
	l := &loader{src: src, prefix: prefix, be: t.be, quant: t.quant}
	c := t.cfg
	d, m2 := c.HiddenSize, c.SpatialMergeSize*c.SpatialMergeSize
	if t.patch, err = l.linear("patch_embed.proj", d, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize); err != nil {
		return err
	}
	if t.pos, err = l.floats("pos_embed.weight", c.NumPositionEmbeddings, d); err != nil {
		return err
	}
	t.blocks = make([]block, c.Depth)
	for i := range t.blocks {
		b := &t.blocks[i]
		p := fmt.Sprintf("blocks.%d.", i)
		for _, v := range []struct {
			dst  *[]float32
			name string
		}{
			{&b.norm1W, "norm1.weight"}, {&b.norm1B, "norm1.bias"},
			{&b.norm2W, "norm2.weight"}, {&b.norm2B, "norm2.bias"},
		} {
			if *v.dst, err = l.floats(p+v.name, d); err != nil {
				return err
			}
		}
		for _, v := range []struct {
			dst     *linear
			name    string
			out, in int
		}{
			{&b.qkv, "attn.qkv", 3 * d, d},
			{&b.proj, "attn.proj", d, d},
			{&b.fc1, "mlp.linear_fc1", c.IntermediateSize, d},
			{&b.fc2, "mlp.linear_fc2", d, c.IntermediateSize},
		} {
			if *v.dst, err = l.linear(p+v.name, v.out, v.in); err != nil {
				return err
			}
		}
	}
	if t.mergeNormW, err = l.floats("merger.norm.weight", d); err != nil {
		return err
	}
	if t.mergeNormB, err = l.floats("merger.norm.bias", d); err != nil {
		return err
	}
	if t.mergeFC1, err = l.linear("merger.linear_fc1", m2*d, m2*d); err != nil {
		return err
	}
	if t.mergeFC2, err = l.linear("merger.linear_fc2", c.OutHiddenSize, m2*d); err != nil {
		return err
	}
	return nil
}
