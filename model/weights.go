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
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// layer is one decoder layer: its norms, its token mixer (Gated DeltaNet
// or gated attention, by config.json's layer_types) and its MLP.
type layer struct {
	inputNorm, postNorm compute.Weight
	mixer               mixer
	mlp                 mlp // dense or a mixture of experts
}

// weights holds every tensor the text model uses.
type weights struct {
	embed  compute.Weight
	norm   compute.Weight
	lmHead compute.Weight // the embedding matrix when tied
	layers []layer
	// linears are the text model's matrices by module name without the
	// checkpoint's prefix ("layers.0.self_attn.q_proj", moduleKey), for
	// LoRA adapters; linearOn names the backend of those not on the
	// model's (experts kept on the CPU).
	linears  map[string]compute.Weight
	linearOn map[string]compute.Backend
}

// binding names one tensor the model needs, the shape config.json implies
// for it, and where it goes.
type binding struct {
	name  string
	shape []int
	dst   *compute.Weight
	// part, when set, binds only some rows of the tensor (one expert of a
	// tensor holding them all); shape is then the whole tensor's.
	part *rowPart
	// on, when set, points at the backend the weight is loaded on where
	// that is not the model's (a MoE layer's experts kept on the CPU:
	// moeMLP.host); nil there means the model's.
	on *compute.Backend
	// stack, when set, is where the rows (one expert) go when the layer's
	// experts are stacked for routing on the device (moe.go); dst is then
	// left unset.
	stack *stackSlot
}

// backend returns the backend b's weight is loaded on: the model's (be)
// unless b.on says another.
func (b binding) backend(be compute.Backend) compute.Backend {
	if b.on != nil && *b.on != nil {
		return *b.on
	}
	return be
}

// rowPart is rows [lo, lo+n) of a tensor seen as a matrix of its last
// dimension's columns; last marks the tensor's last part to load, after
// which its pages may be released.
type rowPart struct {
	lo, n int
	last  bool
}

// matrix returns the rows and columns of the weight b binds and its bytes
// within data, the tensor's bytes as the source loaded them (b.shape).
func (b binding) matrix(data []byte) (rows, cols int, out []byte) {
	rows, cols = 1, b.shape[len(b.shape)-1]
	for _, d := range b.shape[:len(b.shape)-1] {
		rows *= d
	}
	if b.part == nil || rows == 0 {
		return rows, cols, data
	}
	rb := len(data) / rows
	return b.part.n, cols, data[b.part.lo*rb : (b.part.lo+b.part.n)*rb]
}

// evictable reports whether the tensor's pages may be released once b is
// loaded: its last (or only) part is.
func (b binding) evictable() bool { return b.part == nil || b.part.last }

// size returns the bytes b binds of a tensor of total bytes.
func (b binding) size(total int64) int64 {
	if b.part == nil {
		return total
	}
	rows := int64(1)
	for _, d := range b.shape[:len(b.shape)-1] {
		rows *= int64(d)
	}
	return total / max(rows, 1) * int64(b.part.n)
}

// bindings lists every tensor of the text model for config c, a MoE
// model's experts as layout stores them.
func bindings(c *Config, prefix string, w *weights, layout expertLayout) []binding {
	h := c.HiddenSize
	bs := []binding{
		{name: prefix + "embed_tokens.weight", shape: []int{c.VocabSize, h}, dst: &w.embed},
		{name: prefix + "norm.weight", shape: []int{h}, dst: &w.norm},
	}
	if !c.TieWordEmbeddings {
		bs = append(bs, binding{name: "lm_head.weight", shape: []int{c.VocabSize, h}, dst: &w.lmHead})
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
			binding{name: p + "input_layernorm.weight", shape: []int{h}, dst: &l.inputNorm},
			binding{name: p + "post_attention_layernorm.weight", shape: []int{h}, dst: &l.postNorm},
		)
		l.mlp = newMLP(c)
		bs = append(bs, l.mlp.bindings(c, p, layout)...)
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

// loadWeights binds every tensor of the text model and hands it to the
// backend, quantized to the mix named by mix (quant.Plan) unless mix is
// empty or the tensor is stored quantized already. progress, when not nil,
// is called after each tensor.
func loadWeights(src source, c *Config, be compute.Backend, mix string, progress func(Progress), place expertPlace, merge *merger) (*weights, error) {
	if mix != "" && !slices.Contains(quant.Mixes(), mix) {
		return nil, fmt.Errorf("unknown quantization %q (want one of %v)", mix, quant.Mixes())
	}
	prefix, err := src.prefix()
	if err != nil {
		return nil, err
	}
	if cs, ok := src.(ckSource); ok {
		if err := checkAgainstWeights(cs.ck, c, prefix); err != nil {
			return nil, err
		}
	}
	w := &weights{}
	bs := bindings(c, prefix, w, src.expertLayout(prefix+"layers.0."))
	place.apply(w)
	var total int64
	var errs []error
	sizes := make([]int64, len(bs))
	for i, b := range bs {
		n, err := src.check(b)
		if err != nil {
			if len(errs) == 0 || errs[len(errs)-1].Error() != err.Error() { // the parts of one tensor
				errs = append(errs, err)
			}
			continue
		}
		n = b.size(n)
		sizes[i] = n
		total += n
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
		dt, data, inPlace, err := src.load(b)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", b.name, err)
		}
		rows, cols, data := b.matrix(data)
		if merge != nil {
			var merged bool
			var tiled *qwen35.Heads
			if ts, ok := src.(interface{ tiledHeads(string) *qwen35.Heads }); ok {
				tiled = ts.tiledHeads(b.name)
			}
			if dt, data, merged, err = merge.apply(b, prefix, c, dt, rows, cols, data, tiled); err != nil {
				return nil, fmt.Errorf("adapter: %w", err)
			}
			inPlace = inPlace && !merged
		}
		var note string
		if mix != "" && dt.Quant() == quant.Keep {
			qt, reason, err := quant.Plan(mix, b.name, rows, cols, c.NumLayers)
			if err != nil {
				return nil, fmt.Errorf("quantizing %s: %w", b.name, err)
			}
			if qt != quant.Keep {
				if data, err = quantizeTensor(qt, dt, data, rows, cols); err != nil {
					return nil, fmt.Errorf("quantizing %s to %v: %w", b.name, qt, err)
				}
				dt, _ = compute.QuantDType(qt)
				inPlace = false
			}
			// A fallback (a row length no block divides) is said once per
			// kind of row.
			if i := strings.Index(reason, quant.FallbackNote); i >= 0 && !notes[reason[i:]] {
				notes[reason[i:]] = true
				note = b.name + ": " + reason
			}
		}
		var wt compute.Weight
		stacked := false
		if b.stack != nil {
			stacked, err = b.stack.load(b.backend(be), b.name, dt, rows, cols, data)
		}
		tl, table := be.(compute.TableLoader)
		switch {
		case stacked || err != nil:
		case table && b.dst == &w.embed && !c.TieWordEmbeddings:
			// An untied embedding is only read by Embed.
			wt, err = tl.LoadTable(b.name, dt, rows, cols, data)
		default:
			wt, err = b.backend(be).LoadWeight(b.name, dt, rows, cols, data)
		}
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", b.name, err)
		}
		if o, ok := wt.(compute.DataOwner); b.evictable() && (!inPlace || stacked || ok && o.OwnsData()) {
			// Only the converted (or the backend's own) copy stays resident.
			src.evict(b)
		}
		if !stacked {
			*b.dst = wt
		}
		if b.part == nil && !stacked {
			w.addLinear(b.name, wt, b.backend(be), be)
		}
		done += sizes[i]
		if progress != nil {
			progress(Progress{Tensors: i + 1, TotalTensors: len(bs), Bytes: done, TotalBytes: total, Name: b.name,
				DType: dt.String(), Note: note})
		}
	}
	if c.TieWordEmbeddings {
		w.lmHead = w.embed
	}
	if merge != nil {
		if u := merge.unused(); len(u) > 0 {
			return nil, fmt.Errorf("adapter: modules %s are not linears of this model's text model", strings.Join(u, ", "))
		}
	}
	return w, nil
}

// addLinear records a loaded matrix by its module name (weights.linears).
func (w *weights) addLinear(name string, wt compute.Weight, on, be compute.Backend) {
	key, ok := moduleKey(name)
	if !ok && name != "lm_head.weight" {
		return
	}
	if w.linears == nil {
		w.linears, w.linearOn = map[string]compute.Weight{}, map[string]compute.Backend{}
	}
	w.linears[key] = wt
	if on != be {
		w.linearOn[key] = on
	}
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
// tensor to qt, rows split over the CPUs (quantizeRows).
func quantizeTensor(qt quant.Type, dt compute.DType, data []byte, rows, cols int) ([]byte, error) {
	widen, size := widener(dt)
	if widen == nil {
		return nil, fmt.Errorf("cannot quantize %s values", dt)
	}
	return quantizeRows(qt, rows, cols, func(row []float32, r int) error {
		return widen(row, data[r*cols*size:(r+1)*cols*size])
	})
}

// quantizeRows quantizes rows rows of cols values to qt, rows split over
// the CPUs: read fills a worker's one reused float32 row with row r, so
// quantizing allocates only the result.
func quantizeRows(qt quant.Type, rows, cols int, read func(row []float32, r int) error) ([]byte, error) {
	rb := qt.RowBytes(cols)
	out := make([]byte, rows*rb)
	err := parallelRows(rows, cols, func(row []float32, r int) error {
		if err := read(row, r); err != nil {
			return err
		}
		return quant.QuantizeRow(qt, out[r*rb:(r+1)*rb], row)
	})
	return out, err
}

// parallelRows calls do(row, r) for each r < rows, the rows split over
// the CPUs in blocks, each worker handing do its one reused row of cols
// float32s; a worker stops at its first error.
func parallelRows(rows, cols int, do func(row []float32, r int) error) error {
	workers := min(runtime.NumCPU(), rows)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := make([]float32, cols)
			for r := wk * rows / workers; r < (wk+1)*rows/workers && errs[wk] == nil; r++ {
				errs[wk] = do(row, r)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// widener returns the decoder of a float dtype's values and their size,
// nil for other dtypes.
func widener(dt compute.DType) (func(dst []float32, src []byte) error, int) {
	switch dt {
	case compute.BF16:
		return half.DecodeBF16, 2
	case compute.F16:
		return half.DecodeF16, 2
	case compute.F32:
		return func(dst []float32, src []byte) error {
			if len(src) != 4*len(dst) {
				return fmt.Errorf("%d bytes for %d float32 values", len(src), len(dst))
			}
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			}
			return nil
		}, 4
	}
	return nil, 0
}

// TensorSpec is one tensor of the text model: its Hugging Face name and
// the shape the config implies for it.
type TensorSpec struct {
	Name  string
	Shape []int
}

// TextTensors lists every tensor the text model binds for config c, named
// under prefix ("model.language_model." or "model."; see TextPrefix), in
// the order the model loads them. Tied models have no lm_head.weight.
// A MoE model's experts are listed as the BF16 releases store them
// (experts.gate_up_proj and experts.down_proj), each tensor once.
func TextTensors(c *Config, prefix string) []TensorSpec {
	return tensorSpecs(bindings(c, prefix, &weights{}, expertsFused))
}

// tensorSpecs lists the tensors of bs, each once (a tensor of several
// parts is bound several times).
func tensorSpecs(bs []binding) []TensorSpec {
	var out []TensorSpec
	seen := map[string]bool{}
	for _, b := range bs {
		if !seen[b.name] {
			seen[b.name] = true
			out = append(out, TensorSpec{Name: b.name, Shape: slices.Clone(b.shape)})
		}
	}
	return out
}

// TextPrefix returns the prefix of the text model's tensor names in a
// checkpoint: the multimodal checkpoints' "model.language_model.", or a
// text-only export's "model.".
func TextPrefix(ck *safetensors.Checkpoint) (string, error) { return detectPrefix(ck) }

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
