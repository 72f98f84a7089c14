package model

import (
	"context"
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// forward runs one pass over the weights for a set of pieces and stores
// their logits in outs. It reads like the math:
//
//	h = embed(tokens)
//	for each layer: h = h + mixer(rmsnorm(h)); h = h + mlp(rmsnorm(h))
//	logits = lm_head(rmsnorm(h))   for the rows that need them
//
// with each residual add fused with the norm that follows it. The last layer
// computes what follows its mixer's state updates only for the rows whose
// results are read (outputRows).
func (m *Model) forward(ctx context.Context, pass []piece, outs []Output, trace func(int, []float32)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rows, logitRows, err := m.startPass(pass)
	if err != nil {
		return err
	}
	sc, be, c := m.sc, m.be, m.cfg
	eps, h := float32(c.RMSNormEps), c.HiddenSize

	rope, err := m.embed(pass, rows) // x = embed(tokens), image rows replaced
	if err != nil {
		return err
	}
	if err := m.traceHidden(ctx, trace, 0, rows); err != nil {
		return err
	}
	if len(m.w.layers) > 0 {
		be.RMSNorm(sc.xn, sc.x, m.w.layers[0].inputNorm, rows, h, eps) // xn = rmsnorm(x)
	}
	// A trace reads every row of every layer.
	out := outputRows(pass, rows, sc.decodeRows, trace != nil)
	if err := m.startLoRA(pass, out); err != nil {
		return err
	}
	for l := range m.w.layers {
		ly := &m.w.layers[l]
		if l+1 < len(m.w.layers) || out == nil {
			ly.mixer.forward(m, l, pass, rows, rope, nil) // tmp = mixer(xn)
		} else {
			ly.mixer.forward(m, l, pass, rows, rope, out) // tmp = mixer(xn)[out]
			m.gatherRows(sc.xn, sc.x, h, out)             // x = x[out]
			be.Copy(sc.x, 0, sc.xn, 0, out.n*h)
			rows, sc.decodeRows = out.n, out.decode
			if sc.lora != nil {
				sc.lora.cur = sc.lora.out // the MLP's rows
			}
			if rows == 0 {
				break
			}
		}
		be.AddRMSNorm(sc.x, sc.tmp, sc.xn, ly.postNorm, rows, h, eps) // x += tmp; xn = rmsnorm(x)
		if err := ly.mlp.forward(ctx, m, rows); err != nil {          // tmp = mlp(xn)
			return err
		}
		if l+1 < len(m.w.layers) {
			be.AddRMSNorm(sc.x, sc.tmp, sc.xn, m.w.layers[l+1].inputNorm, rows, h, eps) // x += tmp; xn = next rmsnorm(x)
		} else {
			be.Add(sc.x, sc.tmp, rows*h) // x += tmp
		}
		if err := m.traceHidden(ctx, trace, l+1, rows); err != nil {
			return err
		}
	}
	if err := m.finalHidden(ctx, pass, outs, rows); err != nil {
		return err
	}
	if err := m.logits(ctx, pass, outs, logitRows); err != nil {
		return err
	}
	for _, p := range pass {
		p.seq.n = p.pos + len(p.tokens)
	}
	return nil
}

// startPass makes sure the activations exist, lays out the pass's rows and
// logit rows and reserves room in each sequence.
func (m *Model) startPass(pass []piece) (rows, logitRows int, err error) {
	if m.sc == nil {
		if m.sc, err = m.newScratch(m.maxTokens); err != nil {
			return 0, 0, err
		}
	}
	m.sc.decodeRows = 0
	for i := range pass {
		p := &pass[i]
		rows += len(p.tokens)
		if p.nLogits > 0 {
			p.logitRow = logitRows
			logitRows += p.nLogits
		}
		if p.decode {
			m.sc.decodeRows = rows
		}
		if err := p.seq.reserve(p.pos + len(p.tokens)); err != nil {
			return 0, 0, err
		}
	}
	return rows, logitRows, nil
}

// embed writes the token embeddings of every row into sc.x, replaced by
// the pieces' embedding spans where they have them, and returns the
// rotary table ([cos | sin] per row) of their positions: the pieces' 3-D
// positions, or cache index + the sequence's rope delta in all three rows.
func (m *Model) embed(pass []piece, rows int) ([]float32, error) {
	ids := make([]int32, 0, rows)
	rd := m.cfg.RotaryDim()
	var rope []float32
	if rd > 0 {
		rope = make([]float32, rows*rd)
	}
	for _, p := range pass {
		for j, t := range p.tokens {
			ids = append(ids, int32(t))
			if rd == 0 {
				continue
			}
			pos := p.pos + j + p.seq.ropeDelta
			p3 := [3]int{pos, pos, pos}
			if p.positions != nil {
				p3 = p.positions[j]
			}
			m.ropeRow(rope[(p.row+j)*rd:(p.row+j+1)*rd], p3)
		}
	}
	m.be.Embed(m.sc.x, m.w.embed, ids)
	h := m.cfg.HiddenSize
	for _, p := range pass {
		for _, e := range p.embeds {
			if err := m.be.Upload(m.sc.x, (p.row+e.Index)*h, e.Rows); err != nil {
				return nil, fmt.Errorf("model: uploading embeddings: %w", err)
			}
		}
	}
	return rope, nil
}

// logits computes the final norm and lm_head of the rows that need logits
// and delivers them (or their argmax) to outs; a pass without any only
// waits for the device.
func (m *Model) logits(ctx context.Context, pass []piece, outs []Output, logitRows int) error {
	c, sc, be := m.cfg, m.sc, m.be
	h := c.HiddenSize
	if logitRows == 0 {
		if err := be.Sync(ctx); err != nil {
			return fmt.Errorf("model: step: %w", err)
		}
		return nil
	}
	if err := sc.ensureLogits(be, c, logitRows); err != nil {
		return err
	}
	// Gather the rows that need logits, then final norm and lm_head.
	for _, p := range pass {
		if p.nLogits > 0 {
			src := p.outRow + p.keep - p.nLogits
			be.Copy(sc.xn, p.logitRow*h, sc.x, src*h, p.nLogits*h)
		}
	}
	be.RMSNorm(sc.normed, sc.xn, m.w.norm, logitRows, h, float32(c.RMSNormEps))
	// Every logit row takes the decode kernels: a prompt gives one row
	// (or its rows for prompt logprobs), and logits are no state a cut
	// prompt resumes from, so any per-row kernel keeps resumed prompts
	// exact; one row streams the largest matrix, which the decode kernels
	// do fastest.
	m.matMul(sc.logits, sc.normed, m.w.lmHead, logitRows, logitRows)
	var ids []int32
	for _, p := range pass {
		if !p.argmaxOnly {
			continue
		}
		if ids == nil {
			// One id per logit row; rows that also download logits cost
			// a little extra work on the device, nothing more.
			ids = make([]int32, logitRows)
			if err := be.Argmax(ctx, ids, sc.logits, c.VocabSize); err != nil {
				return fmt.Errorf("model: argmax: %w", err)
			}
		}
		o := &outs[p.in]
		o.Argmax = int(ids[p.logitRow+p.nLogits-1])
		if o.Argmaxes != nil { // AllArgmax
			for i := range p.nLogits {
				o.Argmaxes[p.outOff+i] = int(ids[p.logitRow+i])
			}
		}
	}
	for _, p := range pass {
		if p.nLogits == 0 || p.argmaxOnly {
			continue
		}
		dst := outs[p.in].Logits[p.outOff : p.outOff+p.nLogits*c.VocabSize]
		if err := be.Download(ctx, dst, sc.logits, p.logitRow*c.VocabSize); err != nil {
			return fmt.Errorf("model: reading logits: %w", err)
		}
	}
	return nil
}

// rowSet is a subset of a pass's rows, in order: spans of consecutive rows
// that gatherRows packs into rows 0..n-1, of which the first decode are
// decode rows (scratch.decodeRows).
type rowSet struct {
	spans     []rowSpan
	n, decode int
}

// rowSpan is n consecutive rows from row from.
type rowSpan struct{ from, n int }

// outputRows returns the rows of a pass whose final hidden states are read
// (the rows that need logits, or every row of a piece that asks for its
// hidden rows; all of them when all is set) and sets each piece's keep and
// outRow to its share of them. It returns nil when that is every row.
//
// Only these rows need the last layer's work after its mixer has updated
// the sequences' state (caches, recurrent state): its output projection,
// residual, norm and MLP, a layer's worth of products for a prompt that
// wants only its last token's logits, as llama.cpp's graphs skip them
// (inp_out_ids). Every kernel gives a row the same sums alone as inside
// any block of rows, so the kept rows' results do not change.
func outputRows(pass []piece, rows, decodeRows int, all bool) *rowSet {
	out := &rowSet{}
	for i := range pass {
		p := &pass[i]
		p.keep = p.nLogits
		if all || p.hidden {
			p.keep = len(p.tokens)
		}
		p.outRow = out.n
		if p.keep > 0 {
			out.spans = append(out.spans, rowSpan{from: p.row + len(p.tokens) - p.keep, n: p.keep})
		}
		out.n += p.keep
		if p.row < decodeRows {
			out.decode += p.keep
		}
	}
	if out.n < rows {
		return out
	}
	for i := range pass {
		pass[i].outRow = pass[i].row
	}
	return nil
}

// gatherRows packs the rows of set from src (rows of width values) into
// rows 0..set.n-1 of dst, another buffer.
func (m *Model) gatherRows(dst, src compute.Buffer, width int, set *rowSet) {
	off := 0
	for _, s := range set.spans {
		m.be.Copy(dst, off*width, src, s.from*width, s.n*width)
		off += s.n
	}
}

// traceHidden hands the residual stream after layer-1 (the embeddings for
// layer 0) to trace, when set.
func (m *Model) traceHidden(ctx context.Context, trace func(int, []float32), layer, rows int) error {
	if trace == nil {
		return nil
	}
	hid := make([]float32, rows*m.cfg.HiddenSize)
	if err := m.be.Download(ctx, hid, m.sc.x, 0); err != nil {
		return err
	}
	trace(layer, hid)
	return nil
}

// ropeRow fills dst with [cos | sin] of the rotary angles of the 3-D
// position pos, computed in float64: angle_i = pos[r_i] * theta^(-2i/rotaryDim)
// with r_i the position row of frequency i (interleaved M-RoPE, mropeRows);
// a text position has the same value in all three rows.
func (m *Model) ropeRow(dst []float32, pos [3]int) {
	half := len(m.invFreq)
	for i, f := range m.invFreq {
		s, c := math.Sincos(float64(pos[m.mrope[i]]) * f)
		dst[i], dst[half+i] = float32(c), float32(s)
	}
}

// matMul is the backend's MatMul of n rows whose first decode rows are
// tokens being decoded, on the backend's decode kernels where it has them
// (compute.DecodeMatMuler).
func (m *Model) matMul(dst, x compute.Buffer, w compute.Weight, n, decode int) {
	matMulOn(m.be, dst, x, w, n, decode)
}

// matMulOn is Model.matMul on backend be.
func matMulOn(be compute.Backend, dst, x compute.Buffer, w compute.Weight, n, decode int) {
	if dm, ok := be.(compute.DecodeMatMuler); ok && decode > 0 {
		dm.MatMulDecode(dst, x, w, n, decode)
		return
	}
	be.MatMul(dst, x, w, n)
}
