package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// layer is one decoder layer: its norms, its token mixer (Gated DeltaNet
// or gated attention, by config.json's layer_types) and its MLP.
type layer struct {
	inputNorm, postNorm compute.Weight
	mixer               mixer
	mlp                 mlp
}

// weights holds every tensor the text model uses.
type weights struct {
	embed  compute.Weight
	norm   compute.Weight
	lmHead compute.Weight // the embedding matrix when tied
	layers []layer
}

// binding names one tensor the model needs, the shape config.json implies
// for it, and where it goes.
type binding struct {
	name  string
	shape []int
	dst   *compute.Weight
}

// textPrefixes are the tensor-name prefixes of the text model, in the order
// they are tried: the multimodal checkpoint's, then a text-only export's.
var textPrefixes = [...]string{"model.language_model.", "model."}

// bindings lists every tensor of the text model for config c.
func bindings(c *Config, prefix string, w *weights) []binding {
	h := c.HiddenSize
	bs := []binding{
		{prefix + "embed_tokens.weight", []int{c.VocabSize, h}, &w.embed},
		{prefix + "norm.weight", []int{h}, &w.norm},
	}
	if !c.TieWordEmbeddings {
		bs = append(bs, binding{"lm_head.weight", []int{c.VocabSize, h}, &w.lmHead})
	}
	w.layers = make([]layer, c.NumLayers)
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("%slayers.%d.", prefix, i)
		if c.LayerTypes[i] == LinearAttention {
			l.mixer = &gatedDeltaNet{}
		} else {
			l.mixer = &gatedAttention{}
		}
		bs = append(bs,
			binding{p + "input_layernorm.weight", []int{h}, &l.inputNorm},
			binding{p + "post_attention_layernorm.weight", []int{h}, &l.postNorm},
		)
		bs = append(bs, l.mlp.bindings(c, p)...)
		bs = append(bs, l.mixer.bindings(c, p)...)
	}
	return bs
}

// checkAgainstWeights compares config.json's sizes with the weights
// present before anything is bound or allocated for them: the embedding's
// shape and the number of layers.
func checkAgainstWeights(ck *safetensors.Checkpoint, c *Config, prefix string) error {
	info, err := ck.Info(prefix + "embed_tokens.weight")
	if err != nil {
		return err
	}
	if want := []int{c.VocabSize, c.HiddenSize}; !slices.Equal(info.Shape, want) {
		return fmt.Errorf("tensor %sembed_tokens.weight has shape %v, config.json implies %v (vocab_size, hidden_size)", prefix, info.Shape, want)
	}
	layers := 0
	for _, name := range ck.Names() {
		rest, ok := strings.CutPrefix(name, prefix+"layers.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil && i >= layers && i < MaxLayers {
			layers = i + 1
		}
	}
	if c.NumLayers > layers {
		return fmt.Errorf("config.json says num_hidden_layers %d, but the checkpoint holds weights for %d layers", c.NumLayers, layers)
	}
	return nil
}

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

// loadWeights binds every tensor of the text model and hands it to the
// backend, quantized to the mix named by mix (quant.Plan) unless mix is
// empty. progress, when not nil, is called after each tensor.
func loadWeights(ck *safetensors.Checkpoint, c *Config, be compute.Backend, mix string, progress func(Progress)) (*weights, error) {
	if mix != "" && !slices.Contains(quant.Mixes(), mix) {
		return nil, fmt.Errorf("unknown quantization %q (want one of %v)", mix, quant.Mixes())
	}
	prefix, err := detectPrefix(ck)
	if err != nil {
		return nil, err
	}
	if err := checkAgainstWeights(ck, c, prefix); err != nil {
		return nil, err
	}
	w := &weights{}
	bs := bindings(c, prefix, w)
	var total int64
	var errs []error
	tensors := make([]safetensors.Tensor, len(bs))
	for i, b := range bs {
		t, err := ck.Tensor(b.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Equal(t.Shape, b.shape) {
			errs = append(errs, fmt.Errorf("tensor %s has shape %v, config.json implies %v", b.name, t.Shape, b.shape))
			continue
		}
		if _, ok := computeDType(t.DType); !ok {
			errs = append(errs, fmt.Errorf("tensor %s has dtype %s; want F32, F16 or BF16", b.name, t.DType))
			continue
		}
		tensors[i] = t
		total += int64(len(t.Data))
	}
	if len(errs) > 0 {
		if len(errs) > 8 {
			errs = append(errs[:8], fmt.Errorf("... and %d more", len(errs)-8))
		}
		return nil, errors.Join(errs...)
	}
	var done int64
	notes := map[string]bool{}
	for i, b := range bs {
		t := tensors[i]
		dt, _ := computeDType(t.DType)
		rows, cols := 1, t.Shape[len(t.Shape)-1]
		for _, d := range t.Shape[:len(t.Shape)-1] {
			rows *= d
		}
		data := t.Data
		var note string
		if mix != "" {
			qt, reason, err := quant.Plan(mix, b.name, rows, cols, c.NumLayers)
			if err != nil {
				return nil, fmt.Errorf("quantizing %s: %w", b.name, err)
			}
			if qt != quant.Keep {
				if data, err = quantizeTensor(qt, t.DType, data, rows, cols); err != nil {
					return nil, fmt.Errorf("quantizing %s to %v: %w", b.name, qt, err)
				}
				dt, _ = compute.QuantDType(qt)
			}
			// A fallback (a row length no block divides) is said once per
			// kind of row.
			if i := strings.Index(reason, quant.FallbackNote); i >= 0 && !notes[reason[i:]] {
				notes[reason[i:]] = true
				note = b.name + ": " + reason
			}
		}
		wt, err := be.LoadWeight(b.name, dt, rows, cols, data)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", b.name, err)
		}
		if dt.Quant() != quant.Keep {
			// Only the quantized copy stays resident.
			ck.Evict(b.name)
		}
		*b.dst = wt
		done += int64(len(t.Data))
		if progress != nil {
			progress(Progress{Tensors: i + 1, TotalTensors: len(bs), Bytes: done, TotalBytes: total, Name: b.name,
				DType: dt.String(), Note: note})
		}
	}
	if c.TieWordEmbeddings {
		w.lmHead = w.embed
	}
	return w, nil
}

// Progress reports weight loading.
type Progress struct {
	Tensors, TotalTensors int
	Bytes, TotalBytes     int64
	// Name is the tensor just loaded, and DType the type it was loaded as
	// (a block format when quantized while loading).
	Name, DType string
	// Note, when not empty, says why a tensor was kept in a wider format
	// than its quantization asked for; each reason is noted once.
	Note string
}

// quantizeTensor quantizes rows rows of cols values of a BF16, F16 or F32
// tensor to qt, rows split over the CPUs; each worker widens its rows into
// one reused float32 row, so quantizing allocates only the result.
func quantizeTensor(qt quant.Type, st safetensors.DType, data []byte, rows, cols int) ([]byte, error) {
	var widen func(dst []float32, src []byte) error
	size := 0
	switch st {
	case safetensors.BF16:
		widen, size = half.DecodeBF16, 2
	case safetensors.F16:
		widen, size = half.DecodeF16, 2
	case safetensors.F32:
		widen, size = func(dst []float32, src []byte) error {
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			}
			return nil
		}, 4
	default:
		return nil, fmt.Errorf("cannot quantize %s values", st)
	}
	rb := qt.RowBytes(cols)
	out := make([]byte, rows*rb)
	workers := min(runtime.NumCPU(), rows)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := make([]float32, cols)
			lo, hi := wk*rows/workers, (wk+1)*rows/workers
			for r := lo; r < hi && errs[wk] == nil; r++ {
				if errs[wk] = widen(row, data[r*cols*size:(r+1)*cols*size]); errs[wk] == nil {
					errs[wk] = quant.QuantizeRow(qt, out[r*rb:(r+1)*rb], row)
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// all returns every weight once.
func (w *weights) all() []compute.Weight {
	ws := []compute.Weight{w.embed, w.norm}
	if w.lmHead != w.embed {
		ws = append(ws, w.lmHead)
	}
	for i := range w.layers {
		l := &w.layers[i]
		ws = append(ws, l.inputNorm, l.postNorm)
		ws = append(ws, l.mixer.weights()...)
		ws = append(ws, l.mlp.weights()...)
	}
	return ws
}

func weightBytes(x compute.Weight) int64 {
	return int64(x.Rows()) * int64(x.DType().RowBytes(x.Cols()))
}
