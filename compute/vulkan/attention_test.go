//go:build cgo

package vulkan

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
)

// TestAttentionLongContext checks attention at the 9B model's head layout
// (16 query heads over 4 KV heads of 256) on contexts of thousands of
// positions against a float64 reference, with the split count the backend
// picks for a GPU (many splits of 256 positions plus the merge), a forced
// awkward split length, and no split at all.
func TestAttentionLongContext(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	const heads, kvHeads, dim = 16, 4, 256
	cases := []struct {
		pos, n   int
		target   int // b.attnTarget
		splitLen int // b.attnSplitLen
	}{
		{2999, 1, attnTargetGPU, 0},
		{1500, 3, attnTargetGPU, 0},
		{777, 1, attnTargetGPU, 48},
		{1200, 5, attnTargetCPU, 0},
	}
	if testing.Short() {
		cases = cases[2:3]
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("pos%d_n%d_target%d_split%d", c.pos, c.n, c.target, c.splitLen), func(t *testing.T) {
			b.attnTarget, b.attnSplitLen = c.target, c.splitLen
			if _, nsplit := b.attnSplits(compute.Attention{Pos: c.pos, N: c.n, Q: compute.DenseHeads(heads, dim)}, kvHeads*((c.n*heads/kvHeads+attnRows-1)/attnRows)); nsplit < 2 && c.target == attnTargetGPU {
				t.Fatalf("expected the cache to be split, got %d split", nsplit)
			}
			checkAttention(t, b, rand.New(rand.NewPCG(uint64(c.pos), uint64(c.n))), heads, kvHeads, dim, c.pos, c.n)
		})
	}
}

// checkAttention runs one CausalAttention with random queries, keys,
// values and earlier cache contents and compares it with a float64
// reference, allowing the rounding computetest allows.
func checkAttention(t *testing.T, b *Backend, rng *rand.Rand, heads, kvHeads, dim, pos, n int) {
	t.Helper()
	ctx := context.Background()
	width := kvHeads * dim
	capacity := pos + n + 3
	randv := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	qv, kv, vv := randv(n*heads*dim), randv(n*width), randv(n*width)
	kcv, vcv := randv(capacity*width), randv(capacity*width)
	// Scale queries so the softmax is neither flat nor one-hot.
	for i := range qv {
		qv[i] *= 2
	}
	up := func(v []float32) compute.Buffer {
		buf, err := b.NewBuffer(len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(buf, 0, v); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	qb, kb, vb, kc, vc := up(qv), up(kv), up(vv), up(kcv), up(vcv)
	out := up(make([]float32, n*heads*dim))
	defer func() {
		for _, x := range []compute.Buffer{qb, kb, vb, kc, vc, out} {
			b.Free(x)
		}
	}()
	scale := float32(1 / math.Sqrt(float64(dim)))
	b.CausalAttention([]compute.Attention{{Q: compute.DenseHeads(heads, dim), QBuf: qb, K: compute.DenseHeads(kvHeads, dim), KBuf: kb,
		V: compute.DenseHeads(kvHeads, dim), VBuf: vb, KCache: kc, VCache: vc, Out: out, Pos: pos, N: n, Scale: scale}})
	got := make([]float32, n*heads*dim)
	if err := b.Download(ctx, got, out, 0); err != nil {
		t.Fatal(err)
	}
	copy(kcv[pos*width:], kv)
	copy(vcv[pos*width:], vv)
	const u = 1.0 / (1 << 24)
	tol := func(mag float64, k int) float64 { return 8 * u * (math.Sqrt(float64(k)) + 4) * mag }
	group := heads / kvHeads
	bad := 0
	for tk := 0; tk < n; tk++ {
		L := pos + tk + 1
		for h := 0; h < heads; h++ {
			kvo := (h / group) * dim
			q := qv[(tk*heads+h)*dim:][:dim]
			sc := make([]float64, L)
			mx, worst := math.Inf(-1), 0.0
			for s := 0; s < L; s++ {
				var a, abs float64
				for d := 0; d < dim; d++ {
					x := float64(q[d]) * float64(kcv[s*width+kvo+d])
					a += x
					abs += math.Abs(x)
				}
				sc[s] = a * float64(scale)
				worst = max(worst, abs*float64(scale))
				mx = max(mx, sc[s])
			}
			var sum float64
			for s := range sc {
				sc[s] = math.Exp(sc[s] - mx)
				sum += sc[s]
			}
			for d := 0; d < dim; d++ {
				var want, mag float64
				for s := 0; s < L; s++ {
					v := float64(vcv[s*width+kvo+d])
					want += sc[s] / sum * v
					mag += sc[s] / sum * math.Abs(v)
				}
				g := float64(got[(tk*heads+h)*dim+d])
				if lim := tol(mag, L) + tol(mag*(2+2*worst), dim); !(math.Abs(g-want) <= lim) {
					if bad++; bad <= 3 {
						t.Errorf("token %d head %d dim %d: got %g, want %g (tolerance %.3g)", tk, h, d, g, want, lim)
					}
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d outputs differ", bad, len(got))
	}
}
