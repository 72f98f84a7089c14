package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// A quantized draft head (Options.DraftQuantize). Every draft step of the
// MTP head reads the head's matrices and the output matrix it shares with
// the main model (lm_head: 248320 × 4096 values at the 9B, 2 GB in BF16,
// four times the head's own bytes), so in BF16 a draft costs about a
// sixth of a 9B decode step. Drafts need not be exact: the main model
// verifies each with its own lm_head and commits only what it would have
// chosen itself, so a draft head quantized to a block format makes draft
// steps cheaper and changes at most which drafts are accepted, never the
// output. The main model's weights stay as they are; the output matrix the
// drafts read is a second, quantized copy, made while loading.

// DraftTypes lists the values of Options.DraftQuantize besides "" (exact):
// the block formats a draft head can be quantized to.
func DraftTypes() []string { return []string{"q8_0", "q6_k", "q4_k"} }

// ParseDraftType returns the block format named by a value of
// Options.DraftQuantize: quant.Keep for "" (exact drafts), else Q8_0,
// Q6_K or Q4_K.
func ParseDraftType(s string) (quant.Type, error) {
	switch s {
	case "":
		return quant.Keep, nil
	case "q8_0":
		return quant.Q8_0, nil
	case "q6_k":
		return quant.Q6_K, nil
	case "q4_k":
		return quant.Q4_K, nil
	}
	return quant.Keep, fmt.Errorf("unknown draft quantization %q (want one of %s)", s, strings.Join(DraftTypes(), ", "))
}

// draftType returns the block format a draft-only matrix of cols values
// per row stored as dt is quantized to for target qt: qt, or a wider one
// where qt's blocks do not divide the row (a K-quant falls back to Q8_0);
// quant.Keep where the matrix is stored in as few bytes as that already
// (a model quantized at or below qt: the matrix is used as it is) or no
// block format fits the row.
func draftType(qt quant.Type, dt compute.DType, cols int) quant.Type {
	if qt == quant.Keep {
		return quant.Keep
	}
	if !qt.Fits(cols) && qt != quant.Q8_0 {
		qt = quant.Q8_0
	}
	if !qt.Fits(cols) {
		return quant.Keep
	}
	if have := dt.RowBytes(cols); have > 0 && have <= qt.RowBytes(cols) {
		return quant.Keep
	}
	return qt
}

// requantize converts rows rows of cols values stored as dt (BF16, F16,
// F32 or a block format) to qt, rows split over the CPUs.
func requantize(qt quant.Type, dt compute.DType, data []byte, rows, cols int) ([]byte, error) {
	from := dt.Quant()
	if from == quant.Keep {
		return quantizeTensor(qt, dt, data, rows, cols)
	}
	if !from.Fits(cols) {
		return nil, fmt.Errorf("rows of %d values do not fit %v blocks", cols, from)
	}
	ib := from.RowBytes(cols)
	if len(data) != rows*ib {
		return nil, fmt.Errorf("%d bytes for %d rows of %d %v values", len(data), rows, cols, from)
	}
	return quantizeRows(qt, rows, cols, func(row []float32, r int) error {
		return quant.DequantizeRow(from, row, data[r*ib:(r+1)*ib])
	})
}

// toDraftType quantizes one loaded matrix for drafting (draftType), or
// returns it unchanged where it stays as it is.
func toDraftType(qt quant.Type, name string, dt compute.DType, data []byte, rows, cols int) (compute.DType, []byte, bool, error) {
	t := draftType(qt, dt, cols)
	if t == quant.Keep {
		return dt, data, false, nil
	}
	q, err := requantize(t, dt, data, rows, cols)
	if err != nil {
		return 0, nil, false, fmt.Errorf("quantizing %s to %v for drafting: %w", name, t, err)
	}
	qdt, _ := compute.QuantDType(t)
	return qdt, q, true, nil
}

// loadDraftHead returns the output matrix the MTP head's draft steps read
// for draft format qt: a copy of the main model's output matrix (lm_head,
// or the embedding when tied) quantized to qt, or the main model's own
// where it is stored in as few bytes already (or qt is Keep).
func loadDraftHead(src source, c *Config, be compute.Backend, main compute.Weight, qt quant.Type) (compute.Weight, error) {
	if draftType(qt, main.DType(), main.Cols()) == quant.Keep {
		return main, nil
	}
	prefix, err := src.prefix()
	if err != nil {
		return nil, err
	}
	w := &weights{}
	bs := bindings(c, prefix, w, src.expertLayout(prefix+"layers.0."))
	i := slices.IndexFunc(bs, func(b binding) bool {
		return b.dst == &w.lmHead || c.TieWordEmbeddings && b.dst == &w.embed
	})
	if i < 0 {
		return nil, errors.New("no output matrix to copy for drafting")
	}
	b := bs[i]
	dt, data, _, err := src.load(b)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", b.name, err)
	}
	rows, cols := b.shape[0], b.shape[1]
	dt, data, _, err = toDraftType(qt, b.name, dt, data, rows, cols)
	if err != nil {
		return nil, err
	}
	wt, err := be.LoadWeight(b.name+" (draft)", dt, rows, cols, data)
	if err != nil {
		return nil, fmt.Errorf("loading the draft copy of %s: %w", b.name, err)
	}
	// The stored pages were read for the copy only, unless the main
	// model computes from them in place.
	if o, ok := main.(compute.DataOwner); ok && o.OwnsData() {
		src.evict(b)
	}
	return wt, nil
}

// DraftType returns the block format the MTP head's draft steps read the
// output matrix in (Options.DraftQuantize; where the main model's is
// already as small, the main model's format), or quant.Keep when the
// drafts read an unquantized matrix or there is no head.
func (m *Model) DraftType() quant.Type {
	if m.mtp == nil {
		return quant.Keep
	}
	return m.draftHead.DType().Quant()
}

// DraftBytesFraction returns the share of a decode step's weight bytes
// (DecodeBytes) that one draft step reads (DraftBytes) in a model of this
// one's widths and weight formats with layers decoder layers (the layers
// taken as this model's on average): how a benchmark on a few layers of a
// large model's width projects to the whole model. 0 without a head.
func (m *Model) DraftBytesFraction(layers int) float64 {
	if m.mtp == nil || layers < 1 {
		return 0
	}
	out := weightBytes(m.w.lmHead) + weightBytes(m.w.norm)
	stack := float64(m.DecodeBytes()-out) * float64(layers) / float64(m.cfg.NumLayers)
	return float64(m.DraftBytes()) / (float64(out) + stack)
}
