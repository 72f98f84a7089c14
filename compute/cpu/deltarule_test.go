package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
)

// deltaProblem is a random delta rule input laid out as in the model: fused
// [q | k | v | pad] rows, gates and outputs at row offsets, a prior state.
type deltaProblem struct {
	nk, nv, dk, dv, n int
	gateRow, outRow   int
	q, k, v           compute.Heads
	qkv, g, beta      []float32
	state             []float32 // the prior state
	scale             float32
}

// newDeltaProblem draws q and k heads of unit length, v in [-1, 1), log
// decays in [gMin, 0), beta in [0, 1) and a prior state in [-0.5, 0.5).
func newDeltaProblem(rng *rand.Rand, nk, nv, dk, dv, n int, gMin float64) *deltaProblem {
	pr := &deltaProblem{nk: nk, nv: nv, dk: dk, dv: dv, n: n, gateRow: 2, outRow: 1,
		scale: float32(1 / math.Sqrt(float64(dk)))}
	stride := 2*nk*dk + nv*dv + 3
	pr.q = compute.Heads{Off: 1, RowStride: stride, HeadStride: dk, Count: nk, Dim: dk}
	pr.k = compute.Heads{Off: 1 + nk*dk, RowStride: stride, HeadStride: dk, Count: nk, Dim: dk}
	pr.v = compute.Heads{Off: 1 + 2*nk*dk, RowStride: stride, HeadStride: dv, Count: nv, Dim: dv}
	pr.qkv = make([]float32, n*stride+2)
	for i := range pr.qkv {
		pr.qkv[i] = 2*rng.Float32() - 1
	}
	for t := 0; t < n; t++ {
		for h := 0; h < nk; h++ {
			for _, hs := range []compute.Heads{pr.q, pr.k} {
				seg := pr.qkv[hs.Head(t, h) : hs.Head(t, h)+dk]
				var ss float64
				for _, x := range seg {
					ss += float64(x) * float64(x)
				}
				for i := range seg {
					seg[i] = float32(float64(seg[i]) / math.Sqrt(ss))
				}
			}
		}
	}
	pr.g = make([]float32, (pr.gateRow+n)*nv)
	pr.beta = make([]float32, len(pr.g))
	for i := range pr.g {
		pr.g[i] = float32(gMin * rng.Float64())
		pr.beta[i] = rng.Float32()
	}
	pr.state = make([]float32, nv*dk*dv)
	for i := range pr.state {
		pr.state[i] = rng.Float32() - 0.5
	}
	return pr
}

// run applies f to the problem in blocks of the given sizes (summing to n;
// nil means one block), each continuing from the state the previous one
// left, and returns the outputs [n, nv*dv] and the final state.
func (pr *deltaProblem) run(t *testing.T, b *Backend, blocks []int, f func(compute.DeltaRule)) (out, state []float32) {
	t.Helper()
	if blocks == nil {
		blocks = []int{pr.n}
	}
	mk := func(v []float32) compute.Buffer {
		buf, err := b.NewBuffer(len(v))
		if err != nil {
			t.Fatal(err)
		}
		copy(Data(buf), v)
		return buf
	}
	width := pr.nv * pr.dv
	qkv, g, beta := mk(pr.qkv), mk(pr.g), mk(pr.beta)
	st := mk(pr.state)
	outBuf := mk(make([]float32, (pr.outRow+pr.n)*width+1))
	for i := range Data(outBuf) {
		Data(outBuf)[i] = float32(math.NaN()) // every output must be written
	}
	t0 := 0
	for _, nb := range blocks {
		f(compute.DeltaRule{
			Q: pr.q.Rows(t0), K: pr.k.Rows(t0), V: pr.v.Rows(t0), QKV: qkv,
			G: g, Beta: beta, GateRow: pr.gateRow + t0,
			Out: outBuf, OutRow: pr.outRow + t0, State: st, N: nb,
			QScale: pr.scale, Nk: pr.nk, Nv: pr.nv, Dk: pr.dk, Dv: pr.dv,
		})
		t0 += nb
	}
	if t0 != pr.n {
		t.Fatalf("blocks %v sum to %d, want %d", blocks, t0, pr.n)
	}
	o := Data(outBuf)
	return slices.Clone(o[pr.outRow*width : (pr.outRow+pr.n)*width]), slices.Clone(Data(st))
}

// reference runs the recurrence of HF's torch_recurrent_gated_delta_rule in
// float64 and returns the outputs [n, nv*dv] and the final state.
func (pr *deltaProblem) reference() (out, state []float64) {
	dk, dv := pr.dk, pr.dv
	group := pr.nv / pr.nk
	out = make([]float64, pr.n*pr.nv*dv)
	state = make([]float64, len(pr.state))
	for i, x := range pr.state {
		state[i] = float64(x)
	}
	u := make([]float64, dv)
	for h := 0; h < pr.nv; h++ {
		kh := h / group
		s := state[h*dk*dv : (h+1)*dk*dv]
		for t := 0; t < pr.n; t++ {
			q := pr.qkv[pr.q.Head(t, kh):]
			k := pr.qkv[pr.k.Head(t, kh):]
			v := pr.qkv[pr.v.Head(t, h):]
			gi := (pr.gateRow+t)*pr.nv + h
			decay, beta := math.Exp(float64(pr.g[gi])), float64(pr.beta[gi])
			for i := range s {
				s[i] *= decay
			}
			for j := 0; j < dv; j++ {
				var pred float64
				for i := 0; i < dk; i++ {
					pred += s[i*dv+j] * float64(k[i])
				}
				u[j] = beta * (float64(v[j]) - pred)
			}
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					s[i*dv+j] += float64(k[i]) * u[j]
				}
			}
			o := out[(t*pr.nv+h)*dv : (t*pr.nv+h+1)*dv]
			for j := range o {
				var acc float64
				for i := 0; i < dk; i++ {
					acc += s[i*dv+j] * float64(q[i]) * float64(pr.scale)
				}
				o[j] = acc
			}
		}
	}
	return out, state
}

// deltaTol is the allowed difference between a float32 evaluation and the
// float64 reference for a vector of length-dk dot products whose largest
// element has magnitude mag after a recurrence over t tokens: the u·(√dk+4)
// rounding model of a dot product (u = 2⁻²⁴), times 8 for the exps and the
// separate rounding of the operands, growing like √t as independent
// roundings accumulate in the state.
func deltaTol(mag float64, dk, t int) float64 {
	const u = 1.0 / (1 << 24)
	return 8 * u * (math.Sqrt(float64(dk)) + 4) * math.Sqrt(float64(t+1)) * mag
}

// checkDelta compares a float32 result with the float64 reference vector by
// vector (dim elements each), allowing slack times deltaTol scaled by the
// largest element of each reference vector; tok returns the token count
// behind vector i.
func checkDelta(t *testing.T, what string, got []float32, want []float64, dim, dk int, tok func(i int) int, slack float64) {
	t.Helper()
	for v := 0; v*dim < len(want); v++ {
		ref := want[v*dim : (v+1)*dim]
		var mag float64
		for _, x := range ref {
			mag = max(mag, math.Abs(x))
		}
		tl := slack * deltaTol(max(mag, 1e-3), dk, tok(v))
		for j, x := range ref {
			d := math.Abs(float64(got[v*dim+j]) - x)
			if !(d <= tl) {
				t.Fatalf("%s: vector %d element %d = %g, want %g (diff %.3g, tol %.3g)", what, v, j, got[v*dim+j], x, d, tl)
			}
		}
	}
}

// TestDeltaRuleForms checks the recurrent and chunked forms, and the
// GatedDeltaRule dispatch between them, against a float64 reference on random
// inputs with a prior state, for several head shapes and lengths around the
// chunk boundaries, with the tokens in one call or split into blocks.
func TestDeltaRuleForms(t *testing.T) {
	shapes := []struct{ nk, nv, dk, dv int }{
		{1, 1, 16, 16},
		{2, 4, 32, 48}, // dk != dv, two value heads per key head
		{1, 3, 48, 32}, // three value heads per key head
		{3, 3, 40, 24}, // lengths that are not multiples of the kernels' vectors
		{2, 4, 128, 128},
	}
	lengths := []int{1, 15, 16, 63, 64, 65, 130, 200}
	if testing.Short() {
		lengths = []int{1, 16, 65, 130}
	}
	kernels := map[string]*asm.Kernels{"best": asm.Detect(), "generic": asm.Generic()}
	for name, ks := range kernels {
		for _, threads := range []int{1, 3} {
			b := New(Options{Threads: threads, Kernels: ks})
			defer b.Close()
			for _, sh := range shapes {
				for _, n := range lengths {
					if name == "generic" && sh.dk == 128 && n > 65 {
						continue // slow without vector kernels, and no new path
					}
					t.Run(fmt.Sprintf("%s/t%d/nk%d_nv%d_dk%d_dv%d/N%d", name, threads, sh.nk, sh.nv, sh.dk, sh.dv, n), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(n), uint64(sh.dk*1000+sh.dv)))
						pr := newDeltaProblem(rng, sh.nk, sh.nv, sh.dk, sh.dv, n, -2)
						wantOut, wantState := pr.reference()
						tokOut := func(i int) int { return i / sh.nv }
						tokState := func(int) int { return n }
						forms := map[string]func(compute.DeltaRule){
							"recurrent": deltaFn(b, deltaRecurrent),
							"chunked":   deltaFn(b, deltaChunked),
							"dispatch":  deltaFn(b, deltaAuto),
						}
						for form, f := range forms {
							out, st := pr.run(t, b, nil, f)
							checkDelta(t, form+" out", out, wantOut, sh.dv, sh.dk, tokOut, 1)
							checkDelta(t, form+" state", st, wantState, sh.dv, sh.dk, tokState, 1)
						}
						// Split into uneven blocks, some chunked and some
						// recurrent under the dispatch.
						var blocks []int
						for left, i := n, 0; left > 0; i++ {
							nb := min(left, []int{17, 3, 64, 1, 40}[i%5])
							blocks = append(blocks, nb)
							left -= nb
						}
						out, st := pr.run(t, b, blocks, deltaFn(b, deltaAuto))
						checkDelta(t, fmt.Sprintf("blocks %v out", blocks), out, wantOut, sh.dv, sh.dk, tokOut, 1)
						checkDelta(t, fmt.Sprintf("blocks %v state", blocks), st, wantState, sh.dv, sh.dk, tokState, 1)
					})
				}
			}
		}
	}
}

// TestDeltaRuleDecays runs the chunked form with strong decays, where
// e^{G} over a chunk underflows float32, and with no decay at all, where the
// state keeps everything it is given.
func TestDeltaRuleDecays(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	for _, gMin := range []float64{-30, 0} {
		t.Run(fmt.Sprintf("gMin%g", gMin), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(-gMin)))
			pr := newDeltaProblem(rng, 2, 4, 32, 32, 150, gMin)
			wantOut, wantState := pr.reference()
			for form, f := range map[string]func(compute.DeltaRule){"recurrent": deltaFn(b, deltaRecurrent), "chunked": deltaFn(b, deltaChunked)} {
				out, st := pr.run(t, b, nil, f)
				checkDelta(t, form+" out", out, wantOut, 32, 32, func(i int) int { return i / 4 }, 1)
				checkDelta(t, form+" state", st, wantState, 32, 32, func(int) int { return 150 }, 1)
			}
		})
	}
}

// TestDeltaRuleChunkedAgreesWithRecurrent checks the two float32 forms
// against each other at the 9B head widths.
func TestDeltaRuleChunkedAgreesWithRecurrent(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	pr := newDeltaProblem(rng, 2, 4, 128, 128, 100, -1)
	rOut, rSt := pr.run(t, b, nil, deltaFn(b, deltaRecurrent))
	cOut, cSt := pr.run(t, b, nil, deltaFn(b, deltaChunked))
	for _, c := range []struct {
		what      string
		got, want []float32
		tok       func(int) int
	}{{"out", cOut, rOut, func(i int) int { return i / 4 }}, {"state", cSt, rSt, func(int) int { return 100 }}} {
		want := make([]float64, len(c.want))
		for i, x := range c.want {
			want[i] = float64(x)
		}
		// Each side is within deltaTol of the exact result; allow both.
		checkDelta(t, c.what, c.got, want, 128, 128, c.tok, 2)
	}
}

// TestDeltaRuleAllocs checks that a call allocates only its per-worker
// scratch, not per head, token or chunk.
func TestDeltaRuleAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	b := New(Options{Threads: 1})
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 200} {
		pr := newDeltaProblem(rng, 2, 4, 32, 32, n, -1)
		var p compute.DeltaRule
		pr.run(t, b, nil, func(d compute.DeltaRule) { p = d })
		allocs := testing.AllocsPerRun(5, func() { b.GatedDeltaRule([]compute.DeltaRule{p}) })
		if allocs > 8 {
			t.Errorf("N=%d: %v allocations per call, want at most 8 (one scratch set)", n, allocs)
		}
	}
}

// deltaFn returns a function running the delta rule in form f for one
// sequence.
func deltaFn(b *Backend, f deltaForm) func(compute.DeltaRule) {
	return func(p compute.DeltaRule) { b.deltaRule([]compute.DeltaRule{p}, f) }
}
