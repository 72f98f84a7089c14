package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/quant"
)

// MergedAdapter is a LoRA adapter added into the weights while they load
// (Options.Merge): W' = W + Scale · s · B A for every module it updates,
// s being the adapter's own scale.
type MergedAdapter struct {
	Adapter *lora.Adapter
	// Scale multiplies the update; 1 applies the adapter as trained.
	Scale float64
}

// merger adds merged adapters' updates to the matrices they target as
// those load.
type merger struct {
	terms map[string][]mergeTerm // by module key (moduleKey)
	// keep stores a float checkpoint's merged matrices in its own format
	// (Options.MergeFormat "base"), not in F32.
	keep bool
	used map[string]bool
	k    *asm.Kernels
}

// mergeTerm is one adapter's update of a matrix: W += scale · B A, rows
// [row0, row0+rows) of the module's update when the model stores the
// module in parts (a GGUF's experts' gate and up apart).
type mergeTerm struct {
	md    *lora.Module
	scale float64
}

// newMerger checks the adapters' modules against the text model's linears
// and returns their merger; nil when there are none.
func newMerger(ms []MergedAdapter, c *Config, format string) (*merger, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	mg := &merger{terms: map[string][]mergeTerm{}, used: map[string]bool{}, k: asm.Detect()}
	switch format {
	case "", "f32":
	case "base":
		mg.keep = true
	default:
		return nil, fmt.Errorf("merge format %q is not f32 or base", format)
	}
	for i, ma := range ms {
		if ma.Adapter == nil {
			return nil, fmt.Errorf("merged adapter %d is nil", i)
		}
		if math.IsNaN(ma.Scale) || math.IsInf(ma.Scale, 0) {
			return nil, fmt.Errorf("merged adapter %s: scale %v", ma.Adapter.Dir, ma.Scale)
		}
		for j := range ma.Adapter.Modules {
			md := &ma.Adapter.Modules[j]
			key, ok := moduleKey(md.Name)
			if md.Name == "lm_head" {
				key, ok = "lm_head", true
			}
			if !ok || !(isLinearKey(key) || key == "lm_head" || md.Experts > 0 && isExpertKey(key)) {
				return nil, fmt.Errorf("adapter %s: module %s is not a linear of the text model", ma.Adapter.Dir, md.Name)
			}
			if md.Experts > 0 {
				// The stacked tensor's shape in the HF layout, which PEFT's
				// update follows (an older PEFT's transposed one is turned).
				e, h, f := c.NumExperts, c.HiddenSize, c.MoEIntermediateSize
				shape := []int{e, 2 * f, h}
				if strings.HasSuffix(key, "down_proj") {
					shape = []int{e, h, f}
				}
				if err := md.FitBase(shape); err != nil {
					return nil, fmt.Errorf("adapter %s: %w", ma.Adapter.Dir, err)
				}
			}
			mg.terms[key] = append(mg.terms[key], mergeTerm{md: md, scale: ma.Scale * md.Scale})
		}
	}
	return mg, nil
}

// isExpertKey reports whether key names a MoE layer's stacked experts
// (mlp.experts.gate_up_proj or mlp.experts.down_proj), which PEFT updates
// through target_parameters.
func isExpertKey(key string) bool {
	return strings.HasSuffix(key, ".mlp.experts.gate_up_proj") || strings.HasSuffix(key, ".mlp.experts.down_proj")
}

// termsFor returns the updates of the matrix bound by b (prefix being the
// checkpoint's text-model prefix), with the expert and the rows of its
// update that the binding's part holds.
func (mg *merger) termsFor(b binding, prefix string, c *Config) (key string, terms []mergeTerm, expert, row0 int) {
	name := strings.TrimSuffix(strings.TrimPrefix(b.name, prefix), ".weight")
	if b.part == nil {
		return name, mg.terms[name], -1, 0
	}
	// A part of stacked experts: the update of expert e, whose rows the
	// part holds. GGUF keeps an expert's gate and up apart, PEFT updates
	// them as one gate_up_proj.
	e := b.part.lo / b.part.n
	switch {
	case strings.HasSuffix(name, ".mlp.experts.gate_proj"):
		key = strings.TrimSuffix(name, "gate_proj") + "gate_up_proj"
	case strings.HasSuffix(name, ".mlp.experts.up_proj"):
		key, row0 = strings.TrimSuffix(name, "up_proj")+"gate_up_proj", c.MoEIntermediateSize
	default:
		key = name
	}
	return key, mg.terms[key], e, row0
}

// apply adds the updates of the matrix bound by b, rows×cols values of dt
// in data, and returns the merged matrix: in F32 where the base is a
// float format (BF16 would round much of an update away: an update is a
// small change of each weight) unless mg.keep, in its own format where
// the base is quantized. Matrices no adapter updates come back as they
// are; tiled, when set, is the file's value-head order the matrix keeps.
func (mg *merger) apply(b binding, prefix string, c *Config, dt compute.DType, rows, cols int, data []byte, tiled *qwen35.Heads) (compute.DType, []byte, bool, error) {
	key, terms, expert, row0 := mg.termsFor(b, prefix, c)
	if len(terms) == 0 {
		return dt, data, false, nil
	}
	if key == "lm_head" && c.TieWordEmbeddings {
		return 0, nil, false, errors.New("lm_head is the embedding matrix (tie_word_embeddings): an update of it cannot be merged")
	}
	type pair struct {
		a, b  []float32 // [rank][cols], [rows of the update][rank]
		rank  int
		scale float32
	}
	pairs := make([]pair, 0, len(terms))
	for _, t := range terms {
		md := t.md
		if tiled != nil {
			md = tiledUpdate(md, key, *tiled)
		}
		a, bm, out := md.A, md.B, md.Out
		if md.Experts > 0 {
			if expert < 0 || expert >= md.Experts {
				return 0, nil, false, fmt.Errorf("module %s updates %d experts, the model has more", md.Name, md.Experts)
			}
			a = md.A[expert*md.Rank*md.In : (expert+1)*md.Rank*md.In]
			bm = md.B[expert*md.Out*md.Rank : (expert+1)*md.Out*md.Rank]
		} else if expert >= 0 {
			return 0, nil, false, fmt.Errorf("module %s: the model stores these experts stacked, the adapter updates one matrix", md.Name)
		}
		if md.In != cols || row0+rows > out {
			return 0, nil, false, fmt.Errorf("module %s is [%d, %d] (out, in), the model's matrix is [%d, %d]: an adapter for another base", md.Name, out, md.In, rows+row0, cols)
		}
		pairs = append(pairs, pair{a: a, b: bm[row0*md.Rank : (row0+rows)*md.Rank], rank: md.Rank, scale: float32(t.scale)})
	}
	mg.used[key] = true
	read, err := rowReader(dt, cols, data)
	if err != nil {
		return 0, nil, false, fmt.Errorf("merging into %s: %w", b.name, err)
	}
	outDT, rowBytes := compute.F32, 4*cols
	if dt.Quant() != quant.Keep || mg.keep {
		outDT, rowBytes = dt, dt.RowBytes(cols)
	}
	out := make([]byte, rows*rowBytes)
	err = parallelRows(rows, cols, func(row []float32, r int) error {
		if err := read(row, r); err != nil {
			return err
		}
		for _, p := range pairs {
			for k := range p.rank {
				if s := p.scale * p.b[r*p.rank+k]; s != 0 {
					mg.k.Axpy(s, p.a[k*cols:(k+1)*cols], row)
				}
			}
		}
		dst := out[r*rowBytes : (r+1)*rowBytes]
		switch outDT {
		case compute.F32:
			putF32(dst, row)
			return nil
		case compute.BF16:
			return half.EncodeBF16(dst, row)
		case compute.F16:
			return half.EncodeF16(dst, row)
		}
		return quant.QuantizeRow(outDT.Quant(), dst, row)
	})
	if err != nil {
		return 0, nil, false, fmt.Errorf("merging into %s: %w", b.name, err)
	}
	return outDT, out, true, nil
}

// putF32 stores src's values little-endian in dst.
func putF32(dst []byte, src []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// rowReader returns a function that widens row r of a rows×cols matrix of
// dt stored in data.
func rowReader(dt compute.DType, cols int, data []byte) (func(dst []float32, r int) error, error) {
	if q := dt.Quant(); q != quant.Keep {
		rb := dt.RowBytes(cols)
		return func(dst []float32, r int) error { return quant.DequantizeRow(q, dst, data[r*rb:(r+1)*rb]) }, nil
	}
	widen, size := widener(dt)
	if widen == nil {
		return nil, fmt.Errorf("cannot merge into %v values", dt)
	}
	return func(dst []float32, r int) error { return widen(dst, data[r*cols*size:(r+1)*cols*size]) }, nil
}

// unused returns the modules no loaded matrix took, sorted.
func (mg *merger) unused() []string {
	var out []string
	for key, ts := range mg.terms {
		if !mg.used[key] {
			for _, t := range ts {
				out = append(out, t.md.Name)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
