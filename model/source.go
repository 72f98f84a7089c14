package model

import (
	"fmt"
	"slices"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/safetensors"
)

// source is where loadWeights finds the tensors of the text model, by the
// Hugging Face names the bindings give them: a safetensors checkpoint, or a
// GGUF file (gguf.go).
type source interface {
	// prefix returns the prefix of the text model's tensor names.
	prefix() (string, error)
	// check validates the tensor bound by b (present, of the shape b wants,
	// of a dtype the backends compute with) without touching its data, and
	// returns its stored size in bytes.
	check(b binding) (int64, error)
	// load returns the tensor's dtype and bytes, laid out as b.shape says:
	// a view of the file when inPlace, else a converted copy.
	load(b binding) (dt compute.DType, data []byte, inPlace bool, err error)
	// evict releases the resident pages of the tensor's stored bytes.
	evict(b binding)
	// expertLayout returns how the MoE layer whose tensors are named
	// under p stores its experts.
	expertLayout(p string) expertLayout
}

// ckSource reads a safetensors checkpoint, whose tensors are used as
// stored, except the F8_E4M3 matrices of an FP8 checkpoint, which load as
// BF16 (fp8.go).
type ckSource struct {
	ck *safetensors.Checkpoint
	// fp8Block is the block of the FP8 weights' scales (Config.FP8Block);
	// nil when the checkpoint is not FP8.
	fp8Block []int
}

// textPrefixes are the tensor-name prefixes of the text model, in the order
// they are tried: the multimodal checkpoint's, then a text-only export's.
var textPrefixes = [...]string{"model.language_model.", "model."}

// prefix returns the text-model prefix used by the checkpoint.
func (s ckSource) prefix() (string, error) { return detectPrefix(s.ck) }

// detectPrefix returns the text-model prefix used by the checkpoint.
func detectPrefix(ck *safetensors.Checkpoint) (string, error) {
	for _, p := range textPrefixes {
		if ck.Has(p + "embed_tokens.weight") {
			return p, nil
		}
	}
	return "", fmt.Errorf("no text model: neither %sembed_tokens.weight nor %sembed_tokens.weight is present",
		textPrefixes[0], textPrefixes[1])
}

func (s ckSource) check(b binding) (int64, error) {
	info, err := s.ck.Info(b.name)
	if err != nil {
		return 0, err
	}
	if !slices.Equal(info.Shape, b.shape) {
		return 0, fmt.Errorf("tensor %s has shape %v, config.json implies %v", b.name, info.Shape, b.shape)
	}
	if info.DType == safetensors.F8E4M3 {
		return s.checkFP8(b, info)
	}
	dt, ok := computeDType(info.DType)
	if !ok {
		return 0, fmt.Errorf("tensor %s has dtype %s; want F32, F16 or BF16", b.name, info.DType)
	}
	n := int64(dt.Size())
	for _, d := range b.shape {
		n *= int64(d)
	}
	return n, nil
}

func (s ckSource) load(b binding) (compute.DType, []byte, bool, error) {
	t, err := s.ck.Tensor(b.name)
	if err != nil {
		return 0, nil, false, err
	}
	if t.DType == safetensors.F8E4M3 {
		data, err := s.loadFP8(b, t)
		return compute.BF16, data, false, err
	}
	dt, _ := computeDType(t.DType)
	return dt, t.Data, true, nil
}

func (s ckSource) evict(b binding) { s.ck.Evict(b.name) }

func (s ckSource) expertLayout(p string) expertLayout { return detectExpertLayout(s.ck.Has, p) }

// computeDType maps a safetensors dtype to a weight dtype.
func computeDType(d safetensors.DType) (compute.DType, bool) {
	switch d {
	case safetensors.F32:
		return compute.F32, true
	case safetensors.F16:
		return compute.F16, true
	case safetensors.BF16:
		return compute.BF16, true
	}
	return 0, false
}
