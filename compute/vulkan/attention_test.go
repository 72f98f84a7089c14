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
			split := b.attnSplit(c.pos + c.n)
			if nsplit := (c.pos + c.n + split - 1) / split; nsplit < 2 && c.target == attnTargetGPU {
				t.Fatalf("expected the cache to be split, got %d split", nsplit)
			}
			checkAttention(t, b, rand.New(rand.NewPCG(uint64(c.pos), uint64(c.n))), heads, kvHeads, dim, c.pos, c.n)
		})
	}
}

// TestAttentionCutsExact checks that attention over a prompt's rows is
// bitwise independent of where the prompt is cut into calls and of the
// split of the cache length: rows computed in one call, in calls cut at
// multiples of 64, or in batches of rows forced by a small binding limit,
// give the same bits, with the GPU's splits, a forced split length and
// none.
func TestAttentionCutsExact(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	const heads, kvHeads, dim, pos, n = 4, 2, 64, 200, 330
	maxBinding := b.maxBinding
	for _, c := range []struct {
		name             string
		target, splitLen int
		maxBinding       uint64
	}{
		{"gpu", attnTargetGPU, 0, 0},
		{"split48", attnTargetGPU, 48, 0},
		{"split48-batched", attnTargetGPU, 48, 400 << 10}, // rows in batches of 31
		{"cpu", attnTargetCPU, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.attnTarget, b.attnSplitLen, b.maxBinding = c.target, c.splitLen, maxBinding
			want := runAttentionCuts(t, b, heads, kvHeads, dim, pos, n, nil)
			if c.maxBinding > 0 {
				b.maxBinding = c.maxBinding
			}
			for _, cuts := range [][]int{{256}, {256, 320, 448}} {
				got := runAttentionCuts(t, b, heads, kvHeads, dim, pos, n, cuts)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("cut at %v: output %d is %v, %v in one call", cuts, i, got[i], want[i])
					}
				}
			}
		})
	}
	b.maxBinding = maxBinding
}

// runAttentionCuts runs attention for tokens [pos, pos+n) of one sequence
// in calls ending at the absolute positions cuts (and pos+n), with random
// inputs from a generator seeded the same way each time, and returns the
// outputs of every row.
func runAttentionCuts(t *testing.T, b *Backend, heads, kvHeads, dim, pos, n int, cuts []int) []float32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	width := kvHeads * dim
	randv := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	qv, kv, vv := randv(n*heads*dim), randv(n*width), randv(n*width)
	kcv, vcv := randv((pos+n)*width), randv((pos+n)*width)
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
	start := pos
	for _, c := range append(cuts, pos+n) {
		r := start - pos
		b.CausalAttention([]compute.Attention{{
			Q: compute.DenseHeads(heads, dim).Rows(r), QBuf: qb, K: compute.DenseHeads(kvHeads, dim).Rows(r), KBuf: kb,
			V: compute.DenseHeads(kvHeads, dim).Rows(r), VBuf: vb, KCache: kc, VCache: vc, Out: out, OutRow: r,
			Pos: start, N: c - start, Scale: 0.125}})
		start = c
		// The engine's steps wait for each other; so do these calls.
		if err := b.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]float32, n*heads*dim)
	if err := b.Download(context.Background(), got, out, 0); err != nil {
		t.Fatal(err)
	}
	return got
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
