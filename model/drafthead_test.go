package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// TestDraftType checks which format a draft-only matrix gets: the target,
// a fallback where its blocks do not divide the row, and none where the
// matrix is as small already.
func TestDraftType(t *testing.T) {
	for _, c := range []struct {
		qt   quant.Type
		dt   compute.DType
		cols int
		want quant.Type
	}{
		{quant.Keep, compute.BF16, 4096, quant.Keep},
		{quant.Q8_0, compute.BF16, 4096, quant.Q8_0},
		{quant.Q4_K, compute.BF16, 4096, quant.Q4_K},
		{quant.Q4_K, compute.F32, 64, quant.Q8_0}, // 64 values: no K-quant block
		{quant.Q8_0, compute.BF16, 48, quant.Keep},
		{quant.Q8_0, compute.Q8_0, 4096, quant.Keep}, // reused
		{quant.Q8_0, compute.Q6_K, 4096, quant.Keep}, // smaller already
		{quant.Q4_K, compute.Q8_0, 4096, quant.Q4_K},
		{quant.Q6_K, compute.Q4_K, 4096, quant.Keep},
	} {
		if got := draftType(c.qt, c.dt, c.cols); got != c.want {
			t.Errorf("draftType(%v, %v, %d) = %v, want %v", c.qt, c.dt, c.cols, got, c.want)
		}
	}
	for _, s := range DraftTypes() {
		if qt, err := ParseDraftType(s); err != nil || qt == quant.Keep {
			t.Errorf("ParseDraftType(%q) = %v, %v", s, qt, err)
		}
	}
	for _, s := range []string{"Q8_0", "bf16", "q4_k_m", "exact"} {
		if _, err := ParseDraftType(s); err == nil {
			t.Errorf("ParseDraftType(%q): no error", s)
		}
	}
}

// TestRequantize checks requantize against a plain row-by-row reference:
// BF16 rows quantized directly, and Q8_0 rows dequantized and quantized
// again.
func TestRequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 37, 512
	vals := make([]float32, rows*cols)
	bf := make([]byte, 2*rows*cols)
	for i := range vals {
		b := half.F32ToBF16(float32(rng.NormFloat64()))
		bf[2*i], bf[2*i+1] = byte(b), byte(b>>8)
		vals[i] = half.BF16ToF32(b)
	}
	q8 := make([]byte, rows*quant.Q8_0.RowBytes(cols))
	for r := range rows {
		if err := quant.QuantizeRow(quant.Q8_0, q8[r*quant.Q8_0.RowBytes(cols):(r+1)*quant.Q8_0.RowBytes(cols)], vals[r*cols:(r+1)*cols]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		dt   compute.DType
		data []byte
	}{{"bf16", compute.BF16, bf}, {"q8_0", compute.Q8_0, q8}} {
		got, err := requantize(quant.Q4_K, c.dt, c.data, rows, cols)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rb := quant.Q4_K.RowBytes(cols)
		row := make([]float32, cols)
		want := make([]byte, rb)
		for r := range rows {
			if c.dt == compute.BF16 {
				copy(row, vals[r*cols:(r+1)*cols])
			} else if err := quant.DequantizeRow(quant.Q8_0, row, q8[r*quant.Q8_0.RowBytes(cols):(r+1)*quant.Q8_0.RowBytes(cols)]); err != nil {
				t.Fatal(err)
			}
			if err := quant.QuantizeRow(quant.Q4_K, want, row); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[r*rb:(r+1)*rb], want) {
				t.Fatalf("%s: row %d differs from the reference", c.name, r)
			}
		}
	}
	if _, err := requantize(quant.Q4_K, compute.Q8_0, q8[:len(q8)-1], rows, cols); err == nil {
		t.Error("requantize of a short tensor: no error")
	}
}

// TestDraftQuantize opens vl-tiny with a quantized draft head: the main
// model's logits are the exact model's bit for bit, the head reads fewer
// bytes, its draft logits stay near the exact head's, and speculative
// greedy decoding (k = 1..3) still gives plain greedy's tokens. The
// acceptance on the golden prompt is logged against the exact head's.
func TestDraftQuantize(t *testing.T) {
	g, gm, _ := loadMTPGolden(t, Options{})
	exact := gm.m
	ctx := context.Background()
	for _, dq := range []string{"q8_0", "q4_k"} {
		t.Run(dq, func(t *testing.T) {
			m, err := Open(vlTiny, withCPU(t, Options{MTP: true, DraftQuantize: dq}))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// vl-tiny's rows of 64 values fit no K-quant block: q4_k
			// falls back to Q8_0.
			if m.DraftType() != quant.Q8_0 || exact.DraftType() != quant.Keep {
				t.Errorf("draft types %v and %v (exact), want Q8_0 and keep", m.DraftType(), exact.DraftType())
			}
			if m.DecodeBytes() != exact.DecodeBytes() {
				t.Errorf("decode bytes %d, exact model's %d", m.DecodeBytes(), exact.DecodeBytes())
			}
			if db, eb := m.DraftBytes(), exact.DraftBytes(); !(db < eb*6/10) {
				t.Errorf("draft bytes %d, exact %d: want under 60 %%", db, eb)
			}
			if m.WeightBytes() <= exact.WeightBytes() {
				t.Errorf("weight bytes %d, exact %d: the draft copy is missing", m.WeightBytes(), exact.WeightBytes())
			}
			tf := g.TeacherForced
			var rows [2][]float32 // draft logits: exact head, quantized
			var mainLogits []float32
			for i, mm := range []*Model{exact, m} {
				seq, _ := mm.NewSequence()
				out, err := mm.Step(ctx, []Input{{Seq: seq, Tokens: tf.Sequence, Logits: AllLogits, Hidden: true}})
				seq.Close()
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					mainLogits = out[0].Logits
				}
				for j, x := range out[0].Logits {
					if math.Float32bits(x) != math.Float32bits(mainLogits[j]) {
						t.Fatalf("main logit %d: %v, exact model's %v", j, x, mainLogits[j])
					}
				}
				ds, _ := mm.NewDraftSequence()
				d, err := mm.DraftStep(ctx, []DraftInput{{Seq: ds, Tokens: tf.MTPTokens, Hidden: out[0].Hidden, Logits: AllLogits}})
				ds.Close()
				if err != nil {
					t.Fatal(err)
				}
				rows[i] = d[0].Logits
			}
			e := relErr(rows[1], rows[0])
			t.Logf("%s: teacher-forced draft logits vs the exact head's: rel err %.3g", dq, e)
			if !(e < 0.05) {
				t.Errorf("draft logits rel err %.3g vs the exact head's: not a %s copy", e, dq)
			}
			checkDraftSpeculation(t, m, g, dq)
		})
	}
	if _, err := Open(vlTiny, withCPU(t, Options{DraftQuantize: "q8_0"})); err == nil {
		t.Error("DraftQuantize without MTP: no error")
	}
	if _, err := Open(vlTiny, withCPU(t, Options{MTP: true, DraftQuantize: "q3_k"})); err == nil {
		t.Error("DraftQuantize q3_k: no error")
	}
}

// TestDraftQuantizeReuse checks that a model quantized at the draft
// format already drafts with its own output matrix, no copy.
func TestDraftQuantizeReuse(t *testing.T) {
	plain, err := Open(vlTiny, withCPU(t, Options{MTP: true, Quantize: "q8_0"}))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	m, err := Open(vlTiny, withCPU(t, Options{MTP: true, Quantize: "q8_0", DraftQuantize: "q8_0"}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.draftHead != m.w.lmHead || m.WeightBytes() != plain.WeightBytes() || m.DraftBytes() != plain.DraftBytes() {
		t.Errorf("q8_0 model with a q8_0 draft head: copy %v, weight bytes %d vs %d, draft bytes %d vs %d",
			m.draftHead != m.w.lmHead, m.WeightBytes(), plain.WeightBytes(), m.DraftBytes(), plain.DraftBytes())
	}
}

// checkDraftSpeculation runs speculative greedy decoding of the golden
// prompt on m for k = 1..3: the tokens must be plain greedy's. It logs the
// acceptance against the exact head's (the goldens').
func checkDraftSpeculation(t *testing.T, m *Model, g *mtpGolden, name string) {
	t.Helper()
	ctx := context.Background()
	sg := g.Speculative
	for k := 1; k <= 3; k++ {
		seq, _ := m.NewSequence()
		sp, err := m.NewSpeculator(seq)
		if err != nil {
			t.Fatal(err)
		}
		next, err := sp.Prefill(ctx, sg.Prompt)
		if err != nil {
			t.Fatal(err)
		}
		toks, rounds, accepted := []int{next}, 0, 0
		for len(toks) < sg.Steps {
			r, err := sp.Round(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			rounds++
			accepted += r.Accepted
			toks = append(toks, r.Committed...)
		}
		sp.Close()
		seq.Close()
		if !slices.Equal(toks[:sg.Steps], sg.PlainGreedy) {
			t.Errorf("%s k=%d: %v, plain greedy %v", name, k, toks[:sg.Steps], sg.PlainGreedy)
		}
		w := sg.Runs[k-1]
		t.Logf("%s k=%d: %d of %d drafts accepted (%.0f %%); exact head %d of %d (%.0f %%)", name, k,
			accepted, k*rounds, 100*float64(accepted)/float64(k*rounds), w.Accepted, k*w.Rounds, 100*float64(w.Accepted)/float64(k*w.Rounds))
	}
}
