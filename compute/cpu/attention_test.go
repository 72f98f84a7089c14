package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
)

// TestCausalAttention checks CausalAttention against a float64 reference on
// random inputs, for whole-context jobs and for contexts split into segments
// (few heads, many threads) and for prompts run blocked, with grouped KV
// heads, row offsets and strided head layouts.
func TestCausalAttention(t *testing.T) {
	cases := []struct{ heads, kvHeads, dim, pos, n, threads int }{
		{1, 1, 16, 0, 1, 1},
		{4, 2, 64, 5, 3, 3},
		{6, 3, 40, 63, 2, 2},    // dim not a multiple of the vector width
		{8, 2, 128, 17, 40, 3},  // prefill-like, longest jobs first
		{2, 1, 256, 1100, 1, 8}, // decode, split over the context
		{1, 1, 32, 700, 3, 5},   // several tokens, split, uneven segments
		{4, 1, 64, 2000, 2, 16}, // split into many segments
		{16, 4, 256, 300, 1, 2}, // 9B widths, decode
		// Blocked prefill: several query and key blocks, ragged edges.
		{3, 1, 40, 0, 65, 2},    // three heads per KV head, dim not a vector multiple
		{4, 4, 16, 100, 16, 3},  // one head per KV head, shortest blocked prompt
		{2, 1, 32, 0, 200, 2},   // many key blocks from position 0
		{16, 4, 256, 70, 20, 2}, // 9B widths, continuing a prompt
		{8, 2, 64, 130, 129, 4}, // blocks straddling key-block edges
		{5, 5, 24, 1, 33, 1},    // one thread
	}
	kernels := map[string]*asm.Kernels{"best": asm.Detect(), "generic": asm.Generic()}
	for name, ks := range kernels {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%+v", name, c), func(t *testing.T) {
				b := New(Options{Threads: c.threads, Kernels: ks})
				defer b.Close()
				rng := rand.New(rand.NewPCG(uint64(c.pos), uint64(c.dim)))
				checkAttention(t, b, rng, c.heads, c.kvHeads, c.dim, c.pos, c.n)
			})
		}
	}
}

// TestAttentionSplits checks that the work division picks the split path
// where it should, so TestCausalAttention covers both.
func TestAttentionSplits(t *testing.T) {
	for _, c := range []struct {
		threads, kvHeads, pos, n int
		split                    bool
	}{
		{2, 4, 4096, 1, true},  // 9B decode: four jobs for two workers
		{2, 8, 4096, 1, false}, // enough KV heads for two workers
		{8, 1, 1100, 1, true},
		{8, 1, 200, 1, false}, // too short to split
		{2, 1, 4096, 8, false},
	} {
		splits := attnSplits(c.threads, c.n*c.kvHeads, c.pos+c.n)
		if (splits > 1) != c.split {
			t.Errorf("%+v: %d splits", c, splits)
		}
	}
}

func checkAttention(t *testing.T, b *Backend, rng *rand.Rand, heads, kvHeads, dim, pos, n int) {
	t.Helper()
	rnd := func(m int) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = 2*rng.Float32() - 1
		}
		return v
	}
	mk := func(v []float32) compute.Buffer {
		buf, err := b.NewBuffer(len(v))
		if err != nil {
			t.Fatal(err)
		}
		copy(Data(buf), v)
		return buf
	}
	// Fused [q | gate] heads, padded k rows, offset v rows, as in the model.
	q := compute.Heads{Off: 2, RowStride: 2*heads*dim + 1, HeadStride: 2 * dim, Count: heads, Dim: dim}
	k := compute.Heads{Off: 0, RowStride: kvHeads*dim + 5, HeadStride: dim, Count: kvHeads, Dim: dim}
	v := compute.Heads{Off: 3, RowStride: kvHeads * dim, HeadStride: dim, Count: kvHeads, Dim: dim}
	width := kvHeads * dim
	capacity := pos + n + 2
	qv, kv, vv := rnd(n*q.RowStride+q.Off), rnd(n*k.RowStride+k.Off), rnd(n*v.RowStride+v.Off)
	kcv, vcv := rnd(capacity*width), rnd(capacity*width)
	const outRow = 1
	outLen := (outRow+n)*heads*dim + 1
	kc, vc := mk(kcv), mk(vcv)
	out := mk(make([]float32, outLen))
	for i := range Data(out) {
		Data(out)[i] = float32(math.NaN())
	}
	scale := float32(1 / math.Sqrt(float64(dim)))
	b.CausalAttention([]compute.Attention{{Q: q, QBuf: mk(qv), K: k, KBuf: mk(kv), V: v, VBuf: mk(vv),
		KCache: kc, VCache: vc, Out: out, OutRow: outRow, Pos: pos, N: n, Scale: scale}})

	// The caches: new rows written, the rest untouched.
	for tk := 0; tk < n; tk++ {
		for h := 0; h < kvHeads; h++ {
			copy(kcv[(pos+tk)*width+h*dim:], kv[k.Head(tk, h):k.Head(tk, h)+dim])
			copy(vcv[(pos+tk)*width+h*dim:], vv[v.Head(tk, h):v.Head(tk, h)+dim])
		}
	}
	for i := range kcv {
		if Data(kc)[i] != kcv[i] || Data(vc)[i] != vcv[i] {
			t.Fatalf("cache element %d (row %d) = %g, %g, want %g, %g", i, i/width, Data(kc)[i], Data(vc)[i], kcv[i], vcv[i])
		}
	}
	// The outputs against float64, with a tolerance from the rounding
	// model: each score errs by about u·(√dim+4)·Σ|q_i k_i|·scale, which
	// becomes a relative error of each softmax weight, and the weighted
	// sum adds u·(√len+4) relative to Σ p|v|.
	const u = 1.0 / (1 << 24)
	group := heads / kvHeads
	got := Data(out)
	for i := 0; i < outRow*heads*dim; i++ {
		if !math.IsNaN(float64(got[i])) {
			t.Fatalf("output element %d before OutRow written", i)
		}
	}
	if !math.IsNaN(float64(got[outLen-1])) {
		t.Fatalf("output element after the last row written")
	}
	for tk := 0; tk < n; tk++ {
		ctx := pos + tk + 1
		for h := 0; h < heads; h++ {
			off := (h / group) * dim
			qh := qv[q.Head(tk, h) : q.Head(tk, h)+dim]
			sc := make([]float64, ctx)
			mx, maxTerms := math.Inf(-1), 0.0
			for s := range sc {
				var d, terms float64
				for i, x := range qh {
					d += float64(x) * float64(kcv[s*width+off+i])
					terms += math.Abs(float64(x) * float64(kcv[s*width+off+i]))
				}
				sc[s] = d * float64(scale)
				mx = max(mx, sc[s])
				maxTerms = max(maxTerms, terms*float64(scale))
			}
			var sum float64
			for s := range sc {
				sc[s] = math.Exp(sc[s] - mx)
				sum += sc[s]
			}
			scoreErr := 8 * u * (math.Sqrt(float64(dim)) + 4) * (1 + maxTerms)
			sumErr := 8 * u * (math.Sqrt(float64(ctx)) + 4)
			for j := 0; j < dim; j++ {
				var want, mag float64
				for s := range sc {
					x := float64(vcv[s*width+off+j])
					want += sc[s] / sum * x
					mag += sc[s] / sum * math.Abs(x)
				}
				g := float64(got[(outRow+tk)*heads*dim+h*dim+j])
				if d := math.Abs(g - want); !(d <= (scoreErr+sumErr)*mag) {
					t.Fatalf("token %d head %d element %d = %g, want %g (diff %.3g, tol %.3g)", tk, h, j, g, want, d, (scoreErr+sumErr)*mag)
				}
			}
		}
	}
}

// TestAttentionAllocs checks that a call allocates only per-call and
// per-worker scratch, not per token, head or block.
func TestAttentionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, c := range []struct{ pos, n, threads int }{{600, 1, 1}, {600, 1, 8}, {0, 100, 2}} {
		b := New(Options{Threads: c.threads})
		mk := func(n int) compute.Buffer {
			buf, err := b.NewBuffer(n)
			if err != nil {
				t.Fatal(err)
			}
			return buf
		}
		const heads, kvHeads, dim = 8, 2, 64
		p := compute.Attention{
			Q: compute.DenseHeads(heads, dim), QBuf: mk(c.n * heads * dim),
			K: compute.DenseHeads(kvHeads, dim), KBuf: mk(c.n * kvHeads * dim),
			V: compute.DenseHeads(kvHeads, dim), VBuf: mk(c.n * kvHeads * dim),
			KCache: mk((c.pos + c.n) * kvHeads * dim), VCache: mk((c.pos + c.n) * kvHeads * dim),
			Out: mk(c.n * heads * dim), Pos: c.pos, N: c.n, Scale: 0.125,
		}
		limit := 6 + 3*float64(c.threads)
		if allocs := testing.AllocsPerRun(5, func() { b.CausalAttention([]compute.Attention{p}) }); allocs > limit {
			t.Errorf("%+v: %v allocations per call, want at most %v", c, allocs, limit)
		}
		b.Close()
	}
}
