// Package computetest is a conformance suite for compute.Backend
// implementations. It runs every operation on random inputs at awkward sizes
// (tails that are not multiples of any workgroup, n = 1, heads embedded in
// wider rows, attention at Pos > 0, recurrent ops with prior state) on the
// backend under test and on the pure-Go CPU reference, and compares the
// whole of every buffer involved.
//
// Tolerances come from float32 rounding, relative to the magnitude of the
// terms that make up each result rather than to the result itself: a sum of
// K terms computed in a different order differs by about u·√K·Σ|terms| (u =
// 2⁻²⁴, the unit roundoff), and transcendental functions add a few ulp. The
// suite allows tolFactor times that, tight enough that dropping a single term
// of a long dot product fails. Elements an operation must not touch are
// compared exactly.
package computetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/internal/half"
)

// unitRoundoff is u = 2⁻²⁴, half an ulp of 1 in float32.
const unitRoundoff = 1.0 / (1 << 24)

// tolFactor scales the u·(√K + 4) rounding model into a tolerance. Two
// independent float32 evaluations each err by at most about u·√K·Σ|terms|
// in practice (a random walk of K roundings, each bounded by u times a
// partial sum no larger than Σ|terms|); 8 covers both plus a few ulp from
// exp, rsqrt and division.
const tolFactor = 8

// tol returns the allowed difference for a result made of terms whose
// absolute values sum to mag, accumulated over k terms.
func tol(mag float64, k int) float64 {
	return tolFactor * unitRoundoff * (math.Sqrt(float64(k)) + 4) * mag
}

// Case is one named conformance check. Fn returns an error describing the
// first mismatch, so a suite can itself be tested against broken backends.
type Case struct {
	Name string
	Fn   func(e *Env) error
}

// Env holds the reference backend, the backend under test and a seeded
// random source shared by a case.
type Env struct {
	Ref, DUT compute.Backend
	Rng      *rand.Rand
	Ctx      context.Context
}

// Run runs every case of the suite as a subtest. newBackend is called once
// and the backend it returns is closed when Run returns.
func Run(t *testing.T, newBackend func(t *testing.T) compute.Backend) {
	t.Helper()
	dut := newBackend(t)
	if dut == nil {
		t.Fatal("computetest: newBackend returned nil")
	}
	defer func() {
		if err := dut.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	ref := cpu.New(cpu.Options{Threads: 2})
	defer ref.Close()
	for i, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			e := &Env{Ref: ref, DUT: dut, Rng: rand.New(rand.NewPCG(uint64(i)+1, 0x9e3779b97f4a7c15)), Ctx: t.Context()}
			err := c.Fn(e)
			var skip *SkipError
			if errors.As(err, &skip) {
				defer t.Skip(skip.Reason)
			} else if err != nil {
				t.Error(err)
			}
			if err := dut.Sync(t.Context()); err != nil {
				t.Errorf("Sync after case: %v", err)
			}
		})
	}
}

// Cases returns the conformance cases in a fixed order.
func Cases() []Case {
	return append([]Case{
		{"UploadDownload", testUploadDownload},
		{"Copy", testCopy},
		{"Embed", testEmbed},
		{"MatMul", testMatMul},
		{"RMSNorm", testRMSNorm},
		{"AddRMSNorm", testAddRMSNorm},
		{"HeadRMSNorm", testHeadRMSNorm},
		{"GatedRMSNorm", testGatedRMSNorm},
		{"L2Norm", testL2Norm},
		{"Rope", testRope},
		{"CausalConv1D", testConv},
		{"GDNGates", testGates},
		{"GatedDeltaRule", testDeltaRule},
		{"CausalAttention", testAttention},
		{"SigmoidMul", testSigmoidMul},
		{"SiLUMul", testSiLUMul},
		{"Add", testAdd},
		{"Argmax", testArgmax},
		{"Chain", testChain},
	}, quantCases()...)
}

// pair is a buffer on both backends with the same contents.
type pair struct {
	ref, dut compute.Buffer
	vals     []float32 // initial contents
}

// wpair is a weight on both backends with its values widened to float64.
type wpair struct {
	ref, dut compute.Weight
	vals     []float64
}

// Buf allocates a buffer on both backends holding vals.
func (e *Env) buf(vals []float32) (pair, error) {
	p := pair{vals: vals}
	var err error
	if p.ref, err = e.Ref.NewBuffer(len(vals)); err != nil {
		return p, fmt.Errorf("reference NewBuffer(%d): %w", len(vals), err)
	}
	if p.dut, err = e.DUT.NewBuffer(len(vals)); err != nil {
		return p, fmt.Errorf("NewBuffer(%d): %w", len(vals), err)
	}
	if err := e.Ref.Upload(p.ref, 0, vals); err != nil {
		return p, fmt.Errorf("reference Upload: %w", err)
	}
	if err := e.DUT.Upload(p.dut, 0, vals); err != nil {
		return p, fmt.Errorf("Upload of %d elements: %w", len(vals), err)
	}
	return p, nil
}

// randVals returns n normal values times scale.
func (e *Env) randVals(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(e.Rng.NormFloat64() * scale)
	}
	return v
}

// randBuf allocates a buffer of n random normal values times scale.
func (e *Env) randBuf(n int, scale float64) (pair, error) {
	return e.buf(e.randVals(n, scale))
}

// free releases both sides of buffers.
func (e *Env) free(ps ...pair) {
	for _, p := range ps {
		e.Ref.Free(p.ref)
		e.DUT.Free(p.dut)
	}
}

// pick returns the backend under test's side of p when dut is set, else
// the reference's.
func (p pair) pick(dut bool) compute.Buffer {
	if dut {
		return p.dut
	}
	return p.ref
}

// dutBuf allocates a buffer holding vals on the backend under test only.
func (e *Env) dutBuf(vals []float32) (compute.Buffer, error) {
	b, err := e.DUT.NewBuffer(len(vals))
	if err != nil {
		return nil, fmt.Errorf("NewBuffer(%d): %w", len(vals), err)
	}
	if err := e.DUT.Upload(b, 0, vals); err != nil {
		return nil, fmt.Errorf("Upload of %d elements: %w", len(vals), err)
	}
	return b, nil
}

// freeDUT releases buffers of the backend under test.
func (e *Env) freeDUT(bs ...compute.Buffer) {
	for _, b := range bs {
		e.DUT.Free(b)
	}
}

// sameBits checks that two buffers of the backend under test hold the same
// bits: a sequence's results must not depend on the other sequences of a
// call.
func (e *Env) sameBits(what string, got, want compute.Buffer) error {
	g, w := make([]float32, got.Len()), make([]float32, want.Len())
	if err := e.DUT.Download(e.Ctx, g, got, 0); err != nil {
		return fmt.Errorf("%s: Download: %w", what, err)
	}
	if err := e.DUT.Download(e.Ctx, w, want, 0); err != nil {
		return fmt.Errorf("%s: Download: %w", what, err)
	}
	for i := range g {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			return fmt.Errorf("%s: element %d = %g, want %g bit for bit", what, i, g[i], w[i])
		}
	}
	return nil
}

// weight makes a [rows, cols] weight of dtype dt with values drawn from
// gen (rounded to the dtype), on both backends.
func (e *Env) weight(name string, dt compute.DType, rows, cols int, gen func() float64) (wpair, error) {
	w := wpair{vals: make([]float64, rows*cols)}
	data := make([]byte, rows*cols*dt.Size())
	for i := range w.vals {
		f := float32(gen())
		switch dt {
		case compute.F32:
			bits := math.Float32bits(f)
			data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
			w.vals[i] = float64(f)
		case compute.BF16:
			h := half.F32ToBF16(f)
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
			w.vals[i] = float64(half.BF16ToF32(h))
		case compute.F16:
			h := half.F32ToF16(f)
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
			w.vals[i] = float64(half.F16ToF32(h))
		default:
			return w, fmt.Errorf("weight %s: dtype %v", name, dt)
		}
	}
	var err error
	if w.ref, err = e.Ref.LoadWeight(name, dt, rows, cols, data); err != nil {
		return w, fmt.Errorf("reference LoadWeight %s: %w", name, err)
	}
	// A backend may alias data (the CPU backend does), so each gets its own.
	if w.dut, err = e.DUT.LoadWeight(name, dt, rows, cols, append([]byte(nil), data...)); err != nil {
		return w, fmt.Errorf("LoadWeight %s [%d, %d] %v: %w", name, rows, cols, dt, err)
	}
	return w, nil
}

// normal returns a generator of normal values times scale.
func (e *Env) normal(scale float64) func() float64 {
	return func() float64 { return e.Rng.NormFloat64() * scale }
}

// download reads a whole buffer from both backends.
func (e *Env) download(p pair) (ref, dut []float32, err error) {
	ref = make([]float32, p.ref.Len())
	dut = make([]float32, p.dut.Len())
	if len(ref) != len(dut) {
		return nil, nil, fmt.Errorf("buffer lengths differ: reference %d, backend %d", len(ref), len(dut))
	}
	if err := e.Ref.Download(e.Ctx, ref, p.ref, 0); err != nil {
		return nil, nil, fmt.Errorf("reference Download: %w", err)
	}
	if err := e.DUT.Download(e.Ctx, dut, p.dut, 0); err != nil {
		return nil, nil, fmt.Errorf("Download: %w", err)
	}
	return ref, dut, nil
}

// check compares the whole of p on both backends; tolOf gives the allowed
// difference of element i (nil: exact everywhere).
func (e *Env) check(what string, p pair, tolOf func(i int) float64) error {
	ref, dut, err := e.download(p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	bad, first := 0, -1
	var worst float64
	for i := range ref {
		d := math.Abs(float64(ref[i]) - float64(dut[i]))
		allowed := 0.0
		if tolOf != nil {
			allowed = tolOf(i)
		}
		if ref[i] != dut[i] && !(d <= allowed) {
			bad++
			if first < 0 {
				first = i
			}
			if allowed > 0 {
				worst = max(worst, d/allowed)
			} else {
				worst = math.Inf(1)
			}
		}
	}
	if bad > 0 {
		allowed := 0.0
		if tolOf != nil {
			allowed = tolOf(first)
		}
		return fmt.Errorf("%s: %d of %d elements differ; first at %d: got %g, want %g (tolerance %.3g); worst diff/tolerance %.3g",
			what, bad, len(ref), first, dut[first], ref[first], allowed, worst)
	}
	return nil
}

// regionTol returns a tolerance function that is tol[i] inside a map of
// touched elements and zero elsewhere.
func regionTol(m map[int]float64) func(int) float64 {
	return func(i int) float64 { return m[i] }
}

var dtypes = []compute.DType{compute.BF16, compute.F16, compute.F32}

func testUploadDownload(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4099} {
		p, err := e.randBuf(n, 1)
		if err != nil {
			return err
		}
		if err := e.check(fmt.Sprintf("n=%d", n), p, nil); err != nil {
			return err
		}
		// Partial upload at an offset, then a partial download.
		if n > 4 {
			part := e.randVals(n/2, 3)
			if err := e.Ref.Upload(p.ref, 3, part); err != nil {
				return err
			}
			if err := e.DUT.Upload(p.dut, 3, part); err != nil {
				return fmt.Errorf("Upload at offset 3: %w", err)
			}
			got := make([]float32, n-5)
			if err := e.DUT.Download(e.Ctx, got, p.dut, 2); err != nil {
				return fmt.Errorf("Download at offset 2: %w", err)
			}
			want := append(append([]float32{p.vals[2]}, part...), p.vals[3+len(part):]...)[:n-5]
			for i := range want {
				if got[i] != want[i] {
					return fmt.Errorf("n=%d: partial download element %d = %g, want %g", n, i, got[i], want[i])
				}
			}
		}
		e.free(p)
	}
	// A fresh buffer is zeroed.
	z, err := e.DUT.NewBuffer(37)
	if err != nil {
		return err
	}
	got := make([]float32, 37)
	for i := range got {
		got[i] = 1
	}
	if err := e.DUT.Download(e.Ctx, got, z, 0); err != nil {
		return err
	}
	for i, v := range got {
		if v != 0 {
			return fmt.Errorf("NewBuffer not zeroed: element %d = %g", i, v)
		}
	}
	e.DUT.Free(z)
	e.DUT.Free(nil)
	// Out-of-range transfers are errors, not panics.
	p, err := e.randBuf(5, 1)
	if err != nil {
		return err
	}
	if err := e.DUT.Upload(p.dut, 3, make([]float32, 3)); err == nil {
		return fmt.Errorf("Upload past the end succeeded")
	}
	if err := e.DUT.Download(e.Ctx, make([]float32, 6), p.dut, 0); err == nil {
		return fmt.Errorf("Download past the end succeeded")
	}
	e.free(p)
	return nil
}

func testCopy(e *Env) error {
	src, err := e.randBuf(301, 1)
	if err != nil {
		return err
	}
	dst, err := e.randBuf(257, 1)
	if err != nil {
		return err
	}
	for _, c := range [][3]int{{0, 0, 1}, {5, 17, 64}, {1, 3, 255}, {200, 250, 51}} {
		e.Ref.Copy(dst.ref, c[0], src.ref, c[1], c[2])
		e.DUT.Copy(dst.dut, c[0], src.dut, c[1], c[2])
	}
	// Copy within one buffer, non-overlapping.
	e.Ref.Copy(dst.ref, 0, dst.ref, 100, 50)
	e.DUT.Copy(dst.dut, 0, dst.dut, 100, 50)
	err = e.check("Copy", dst, nil)
	e.free(src, dst)
	return err
}

func testEmbed(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range [][2]int{{1, 1}, {7, 3}, {50, 17}, {33, 256}, {130, 65}} {
			rows, cols := sh[0], sh[1]
			w, err := e.weight("embed", dt, rows, cols, e.normal(1))
			if err != nil {
				return err
			}
			ids := []int32{int32(rows - 1), 0, int32(rows / 2), int32(rows - 1), int32(e.Rng.IntN(rows))}
			dst, err := e.randBuf(len(ids)*cols+3, 1)
			if err != nil {
				return err
			}
			e.Ref.Embed(dst.ref, w.ref, ids)
			e.DUT.Embed(dst.dut, w.dut, ids)
			ids[0] = 12345 // the backend must have copied ids
			if err := e.check(fmt.Sprintf("Embed %v [%d, %d]", dt, rows, cols), dst, nil); err != nil {
				return err
			}
			e.free(dst)
		}
	}
	return nil
}

// matmulTol returns tolerances for dst[n, rows] = x[n, cols] · wᵀ.
func matmulTol(x []float32, w []float64, n, rows, cols int) []float64 {
	t := make([]float64, n*rows)
	for i := 0; i < n; i++ {
		for r := 0; r < rows; r++ {
			var mag float64
			for c := 0; c < cols; c++ {
				mag += math.Abs(float64(x[i*cols+c]) * w[r*cols+c])
			}
			t[i*rows+r] = tol(mag, cols)
		}
	}
	return t
}

// MatMulShapes lists the [n, rows, cols] shapes the MatMul case runs.
var matmulShapes = [][3]int{
	{1, 1, 1}, {1, 7, 5}, {1, 65, 129}, {1, 130, 256}, {1, 33, 1000},
	{2, 17, 64}, {3, 64, 65}, {5, 9, 4096}, {8, 100, 96},
	{9, 67, 130}, {17, 65, 64}, {33, 129, 257}, {64, 64, 64}, {65, 31, 33},
}

func testMatMul(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range matmulShapes {
			n, rows, cols := sh[0], sh[1], sh[2]
			if err := e.matmulOne(dt, n, rows, cols); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Env) matmulOne(dt compute.DType, n, rows, cols int) error {
	w, err := e.weight("w", dt, rows, cols, e.normal(0.5))
	if err != nil {
		return err
	}
	x, err := e.randBuf(n*cols+1, 1)
	if err != nil {
		return err
	}
	dst, err := e.randBuf(n*rows+2, 1) // the tail must stay untouched
	if err != nil {
		return err
	}
	e.Ref.MatMul(dst.ref, x.ref, w.ref, n)
	e.DUT.MatMul(dst.dut, x.dut, w.dut, n)
	t := matmulTol(x.vals, w.vals, n, rows, cols)
	err = e.check(fmt.Sprintf("MatMul %v n=%d [%d, %d]", dt, n, rows, cols), dst, func(i int) float64 {
		if i < len(t) {
			return t[i]
		}
		return 0
	})
	e.free(x, dst)
	return err
}

// headShapes are strided head layouts: heads of dim elements at HeadStride,
// starting at Off, in rows of RowStride.
var headShapes = []compute.Heads{
	{Off: 0, RowStride: 1, HeadStride: 1, Count: 1, Dim: 1},
	{Off: 3, RowStride: 40, HeadStride: 17, Count: 2, Dim: 16},
	{Off: 0, RowStride: 96, HeadStride: 32, Count: 3, Dim: 32},
	{Off: 5, RowStride: 4*130 + 7, HeadStride: 130, Count: 4, Dim: 128},
	{Off: 1, RowStride: 2 * 256, HeadStride: 256, Count: 2, Dim: 256},
	{Off: 2, RowStride: 1 * 70, HeadStride: 70, Count: 1, Dim: 65},
}

// headsLen returns the buffer length needed for n rows of h.
func headsLen(h compute.Heads, n int) int {
	return h.Head(n-1, h.Count-1) + h.Dim + 1
}

// invRMS64 returns 1/sqrt(mean(v²)+eps) in float64.
func invRMS64(v []float32, eps float64) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return 1 / math.Sqrt(ss/float64(len(v))+eps)
}

// rmsNormShapes are the [n, dim] shapes of the RMSNorm cases.
var rmsNormShapes = [][2]int{{1, 1}, {1, 17}, {3, 64}, {2, 65}, {5, 1000}, {17, 256}, {2, 4096}}

// rmsNormTol returns the tolerances of dst = rmsnorm(x) * (1 + w) for n
// rows of dim (zero past them, where dst must stay untouched).
func rmsNormTol(x []float32, w []float64, n, dim int, eps float64) func(int) float64 {
	return func(i int) float64 {
		if i >= n*dim {
			return 0
		}
		r := i / dim
		inv := invRMS64(x[r*dim:(r+1)*dim], eps)
		return tol(math.Abs(float64(x[i])*inv)*(1+math.Abs(w[i%dim])), dim)
	}
}

// eachRMSNorm calls fn with every dtype and shape of the RMSNorm cases, a
// norm weight, an input of n*dim+1 elements and an output with one more.
func (e *Env) eachRMSNorm(fn func(dt compute.DType, n, dim int, w wpair, x, dst pair) error) error {
	for _, dt := range dtypes {
		for _, sh := range rmsNormShapes {
			n, dim := sh[0], sh[1]
			w, err := e.weight("norm", dt, 1, dim, e.normal(0.3))
			if err != nil {
				return err
			}
			x, err := e.randBuf(n*dim+1, 2) // the tails must stay untouched
			if err != nil {
				return err
			}
			dst, err := e.randBuf(n*dim+1, 1)
			if err != nil {
				return err
			}
			if err := fn(dt, n, dim, w, x, dst); err != nil {
				return err
			}
			e.free(x, dst)
		}
	}
	return nil
}

func testRMSNorm(e *Env) error {
	return e.eachRMSNorm(func(dt compute.DType, n, dim int, w wpair, x, dst pair) error {
		const eps = 1e-6
		e.Ref.RMSNorm(dst.ref, x.ref, w.ref, n, dim, eps)
		e.DUT.RMSNorm(dst.dut, x.dut, w.dut, n, dim, eps)
		return e.check(fmt.Sprintf("RMSNorm %v n=%d dim=%d", dt, n, dim), dst, rmsNormTol(x.vals, w.vals, n, dim, eps))
	})
}

func testAddRMSNorm(e *Env) error {
	return e.eachRMSNorm(func(dt compute.DType, n, dim int, w wpair, x, dst pair) error {
		y, err := e.randBuf(n*dim, 1)
		if err != nil {
			return err
		}
		defer e.free(y)
		const eps = 1e-6
		e.Ref.AddRMSNorm(x.ref, y.ref, dst.ref, w.ref, n, dim, eps)
		e.DUT.AddRMSNorm(x.dut, y.dut, dst.dut, w.dut, n, dim, eps)
		what := fmt.Sprintf("AddRMSNorm %v n=%d dim=%d", dt, n, dim)
		// The sums are one float32 addition each: exact up to rounding.
		sum := make([]float32, n*dim)
		for i := range sum {
			sum[i] = x.vals[i] + y.vals[i]
		}
		err = e.check(what+" sums", x, func(i int) float64 {
			if i >= n*dim {
				return 0
			}
			return unitRoundoff * (math.Abs(float64(x.vals[i])) + math.Abs(float64(y.vals[i])))
		})
		if err != nil {
			return err
		}
		return e.check(what, dst, rmsNormTol(sum, w.vals, n, dim, eps))
	})
}

// headTol builds a tolerance map over every element of every head of n rows.
func headTol(h compute.Heads, n int, f func(r, hd, i, idx int) float64) map[int]float64 {
	m := make(map[int]float64)
	for r := 0; r < n; r++ {
		for hd := 0; hd < h.Count; hd++ {
			for i := 0; i < h.Dim; i++ {
				idx := h.Head(r, hd) + i
				m[idx] = f(r, hd, i, idx)
			}
		}
	}
	return m
}

func testHeadRMSNorm(e *Env) error {
	for k, h := range headShapes {
		dt := dtypes[k%len(dtypes)]
		for _, n := range []int{1, 3} {
			w, err := e.weight("qnorm", dt, 1, h.Dim, e.normal(0.3))
			if err != nil {
				return err
			}
			x, err := e.randBuf(headsLen(h, n), 1.5)
			if err != nil {
				return err
			}
			const eps = 1e-6
			e.Ref.HeadRMSNorm(x.ref, h, n, w.ref, eps)
			e.DUT.HeadRMSNorm(x.dut, h, n, w.dut, eps)
			m := headTol(h, n, func(r, hd, i, idx int) float64 {
				inv := invRMS64(x.vals[h.Head(r, hd):h.Head(r, hd)+h.Dim], eps)
				return tol(math.Abs(float64(x.vals[idx])*inv)*(1+math.Abs(w.vals[i])), h.Dim)
			})
			if err := e.check(fmt.Sprintf("HeadRMSNorm %v %+v n=%d", dt, h, n), x, regionTol(m)); err != nil {
				return err
			}
			e.free(x)
		}
	}
	return nil
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func testGatedRMSNorm(e *Env) error {
	for k, h := range headShapes {
		dt := dtypes[k%len(dtypes)]
		n := 1 + k%3
		w, err := e.weight("gnorm", dt, 1, h.Dim, e.normal(1))
		if err != nil {
			return err
		}
		x, err := e.randBuf(headsLen(h, n), 1.5)
		if err != nil {
			return err
		}
		// z in its own layout: dense heads after an offset.
		zh := compute.Heads{Off: 7, RowStride: h.Count*h.Dim + 3, HeadStride: h.Dim, Count: h.Count, Dim: h.Dim}
		z, err := e.randBuf(headsLen(zh, n), 3)
		if err != nil {
			return err
		}
		const eps = 1e-6
		e.Ref.GatedRMSNorm(x.ref, h, z.ref, zh, n, w.ref, eps)
		e.DUT.GatedRMSNorm(x.dut, h, z.dut, zh, n, w.dut, eps)
		m := headTol(h, n, func(r, hd, i, idx int) float64 {
			inv := invRMS64(x.vals[h.Head(r, hd):h.Head(r, hd)+h.Dim], eps)
			zv := float64(z.vals[zh.Head(r, hd)+i])
			return tol(math.Abs(float64(x.vals[idx])*inv*w.vals[i]*zv*sigmoid64(zv))*(1+math.Abs(zv)), h.Dim)
		})
		if err := e.check(fmt.Sprintf("GatedRMSNorm %v %+v n=%d", dt, h, n), x, regionTol(m)); err != nil {
			return err
		}
		if err := e.check("GatedRMSNorm z untouched", z, nil); err != nil {
			return err
		}
		e.free(x, z)
	}
	return nil
}

func testL2Norm(e *Env) error {
	for k, h := range headShapes {
		n := 1 + k%4
		x, err := e.randBuf(headsLen(h, n), 2)
		if err != nil {
			return err
		}
		const eps = 1e-6
		e.Ref.L2Norm(x.ref, h, n, eps)
		e.DUT.L2Norm(x.dut, h, n, eps)
		m := headTol(h, n, func(r, hd, i, idx int) float64 {
			var ss float64
			for _, v := range x.vals[h.Head(r, hd) : h.Head(r, hd)+h.Dim] {
				ss += float64(v) * float64(v)
			}
			return tol(math.Abs(float64(x.vals[idx]))/math.Sqrt(ss+eps), h.Dim)
		})
		if err := e.check(fmt.Sprintf("L2Norm %+v n=%d", h, n), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x)
	}
	return nil
}

// ropeTable returns n rows of [cos | sin] for rotaryDim at positions pos0...
func ropeTable(n, rotaryDim, pos0 int) []float32 {
	half := rotaryDim / 2
	t := make([]float32, n*rotaryDim)
	for r := 0; r < n; r++ {
		for i := 0; i < half; i++ {
			theta := float64(pos0+r) * math.Pow(10000, -2*float64(i)/float64(rotaryDim))
			t[r*rotaryDim+i] = float32(math.Cos(theta))
			t[r*rotaryDim+half+i] = float32(math.Sin(theta))
		}
	}
	return t
}

func testRope(e *Env) error {
	cases := []struct {
		h         compute.Heads
		n, rotary int
	}{
		{compute.Heads{Off: 0, RowStride: 2, HeadStride: 2, Count: 1, Dim: 2}, 1, 2},
		{compute.Heads{Off: 3, RowStride: 40, HeadStride: 17, Count: 2, Dim: 16}, 3, 16},
		{compute.Heads{Off: 0, RowStride: 3 * 256, HeadStride: 256, Count: 3, Dim: 256}, 5, 64},
		{compute.Heads{Off: 5, RowStride: 4*130 + 7, HeadStride: 130, Count: 4, Dim: 128}, 17, 32},
		{compute.Heads{Off: 1, RowStride: 2*64 + 1, HeadStride: 64, Count: 2, Dim: 64}, 2, 64},
		{compute.Heads{Off: 0, RowStride: 8 * 32, HeadStride: 32, Count: 8, Dim: 32}, 9, 26},
	}
	for _, c := range cases {
		x, err := e.randBuf(headsLen(c.h, c.n), 1)
		if err != nil {
			return err
		}
		table := ropeTable(c.n, c.rotary, 1000)
		e.Ref.Rope(x.ref, c.h, c.n, table, c.rotary)
		e.DUT.Rope(x.dut, c.h, c.n, table, c.rotary)
		for i := range table {
			table[i] = 99 // the backend must have copied the table
		}
		half := c.rotary / 2
		ref := ropeTable(c.n, c.rotary, 1000)
		m := headTol(c.h, c.n, func(r, hd, i, idx int) float64 {
			if i >= c.rotary {
				return 0
			}
			j := i % half
			cs, sn := float64(ref[r*c.rotary+j]), float64(ref[r*c.rotary+half+j])
			base := c.h.Head(r, hd)
			a, b := float64(x.vals[base+j]), float64(x.vals[base+j+half])
			return tol(math.Abs(a*cs)+math.Abs(b*sn)+math.Abs(a*sn)+math.Abs(b*cs), 2)
		})
		if err := e.check(fmt.Sprintf("Rope %+v n=%d rotary=%d", c.h, c.n, c.rotary), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x)
	}
	return nil
}

func testConv(e *Env) error {
	cases := []struct{ row, rowStride, n, channels, kernel int }{
		{0, 1, 1, 1, 1},
		{0, 5, 1, 5, 4},
		{2, 70, 3, 65, 4},
		{1, 300, 17, 257, 4},
		{0, 129, 6, 129, 2},
		{3, 1030, 9, 1024, 3},
	}
	for k, c := range cases {
		dt := dtypes[k%len(dtypes)]
		// Run twice so the second call uses the state the first produced.
		if err := e.convBatch(dt, c.rowStride, c.channels, c.kernel, []convSeq{{c.row, c.n}}, 2); err != nil {
			return err
		}
	}
	// Several sequences in one call: different lengths, one empty, rows
	// apart and adjacent.
	batches := []struct {
		rowStride, channels, kernel int
		seqs                        []convSeq
	}{
		{610, 600, 4, []convSeq{{0, 3}, {3, 0}, {4, 1}, {5, 17}, {30, 2}}},
		{65, 65, 3, []convSeq{{7, 1}, {0, 5}, {5, 1}, {6, 1}}},
	}
	for k, c := range batches {
		if err := e.convBatch(dtypes[k%len(dtypes)], c.rowStride, c.channels, c.kernel, c.seqs, 2); err != nil {
			return err
		}
	}
	return nil
}

// convSeq places one sequence of a batched convolution.
type convSeq struct{ row, n int }

// convBatch runs CausalConv1D over the sequences seqs of a shared buffer,
// calls times in a row with fresh inputs (so later calls continue from the
// states the earlier ones produced), checks every result against the
// reference, and checks that calling the backend under test once per
// sequence gives the same bits as the batched call.
func (e *Env) convBatch(dt compute.DType, rowStride, channels, kernel int, seqs []convSeq, calls int) error {
	w, err := e.weight("conv", dt, channels, kernel, e.normal(0.5))
	if err != nil {
		return err
	}
	rows := 0
	for _, s := range seqs {
		rows = max(rows, s.row+s.n+1)
	}
	x, err := e.randBuf(rows*rowStride, 1)
	if err != nil {
		return err
	}
	sts := make([]pair, len(seqs))
	soloSts := make([]compute.Buffer, len(seqs))
	for i := range seqs {
		if sts[i], err = e.randBuf((kernel-1)*channels, 1); err != nil { // prior state
			return err
		}
		if soloSts[i], err = e.dutBuf(sts[i].vals); err != nil {
			return err
		}
	}
	soloX, err := e.dutBuf(x.vals)
	if err != nil {
		return err
	}
	args := func(dut bool) []compute.ConvSeq {
		cs := make([]compute.ConvSeq, len(seqs))
		for i, s := range seqs {
			cs[i] = compute.ConvSeq{Row: s.row, N: s.n, State: sts[i].pick(dut)}
		}
		return cs
	}
	for rep := 0; rep < calls; rep++ {
		// Fresh inputs each time, since the previous call rewrote x.
		before := e.randVals(len(x.vals), 1)
		if err := e.Ref.Upload(x.ref, 0, before); err != nil {
			return err
		}
		for _, b := range []compute.Buffer{x.dut, soloX} {
			if err := e.DUT.Upload(b, 0, before); err != nil {
				return fmt.Errorf("Upload: %w", err)
			}
		}
		stBefore := make([][]float32, len(seqs))
		for i := range seqs {
			if stBefore[i], _, err = e.download(sts[i]); err != nil {
				return err
			}
		}
		e.Ref.CausalConv1D(x.ref, rowStride, channels, w.ref, kernel, args(false))
		e.DUT.CausalConv1D(x.dut, rowStride, channels, w.dut, kernel, args(true))
		for i, s := range seqs {
			e.DUT.CausalConv1D(soloX, rowStride, channels, w.dut, kernel, []compute.ConvSeq{{Row: s.row, N: s.n, State: soloSts[i]}})
		}
		m := map[int]float64{}
		for i, s := range seqs {
			for t := 0; t < s.n; t++ {
				for ch := 0; ch < channels; ch++ {
					var mag float64
					for j := 0; j < kernel; j++ {
						src := t - (kernel - 1) + j
						var in float64
						if src < 0 {
							in = float64(stBefore[i][(kernel-1+src)*channels+ch])
						} else {
							in = float64(before[(s.row+src)*rowStride+ch])
						}
						mag += math.Abs(w.vals[ch*kernel+j] * in)
					}
					m[(s.row+t)*rowStride+ch] = tol(2*mag, kernel)
				}
			}
		}
		what := fmt.Sprintf("CausalConv1D %v rowStride %d channels %d kernel %d seqs %v call %d", dt, rowStride, channels, kernel, seqs, rep)
		if err := e.check(what, x, regionTol(m)); err != nil {
			return err
		}
		// The state holds raw inputs: exactly equal on both backends.
		for i := range seqs {
			if err := e.check(fmt.Sprintf("%s state %d", what, i), sts[i], nil); err != nil {
				return err
			}
		}
		if err := e.sameBits(what+": one call per sequence vs one call", soloX, x.dut); err != nil {
			return err
		}
		for i := range seqs {
			if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, state %d", what, i), soloSts[i], sts[i].dut); err != nil {
				return err
			}
		}
	}
	e.free(append(sts, x)...)
	e.freeDUT(append(soloSts, soloX)...)
	return nil
}

func testGates(e *Env) error {
	for k, sh := range [][2]int{{1, 1}, {3, 16}, {17, 32}, {5, 48}, {65, 3}} {
		n, heads := sh[0], sh[1]
		dt := dtypes[k%len(dtypes)]
		aLog, err := e.weight("A_log", dt, 1, heads, func() float64 { return e.Rng.Float64()*4 - 2 })
		if err != nil {
			return err
		}
		dtBias, err := e.weight("dt_bias", dt, 1, heads, e.normal(1))
		if err != nil {
			return err
		}
		// Spread a over the softplus regimes, including past its threshold.
		av := e.randVals(n*heads, 8)
		av[0] = 25
		a, err := e.buf(av)
		if err != nil {
			return err
		}
		b, err := e.randBuf(n*heads, 4)
		if err != nil {
			return err
		}
		g, err := e.randBuf(n*heads+1, 1)
		if err != nil {
			return err
		}
		beta, err := e.randBuf(n*heads+2, 1)
		if err != nil {
			return err
		}
		e.Ref.GDNGates(g.ref, beta.ref, a.ref, b.ref, aLog.ref, dtBias.ref, n, heads)
		e.DUT.GDNGates(g.dut, beta.dut, a.dut, b.dut, aLog.dut, dtBias.dut, n, heads)
		what := fmt.Sprintf("GDNGates %v n=%d heads=%d", dt, n, heads)
		err = e.check(what+" g", g, func(i int) float64 {
			if i >= n*heads {
				return 0
			}
			h := i % heads
			x := float64(av[i]) + dtBias.vals[h]
			sp := x
			if x <= 20 {
				sp = math.Log1p(math.Exp(x))
			}
			ea := math.Exp(aLog.vals[h])
			// exp's error grows with |aLog| (3+2|x| ulp allowed by Vulkan).
			return tol(ea*sp*(1+math.Abs(aLog.vals[h]))+ea*(math.Abs(float64(av[i]))+math.Abs(dtBias.vals[h])), 2)
		})
		if err != nil {
			return err
		}
		err = e.check(what+" beta", beta, func(i int) float64 {
			if i >= n*heads {
				return 0
			}
			x := float64(b.vals[i])
			return tol(sigmoid64(x)*(1+math.Abs(x)), 1)
		})
		if err != nil {
			return err
		}
		e.free(a, b, g, beta)
	}
	return nil
}

// deltaCase is one gated delta rule configuration: the shape, the number
// of tokens, and where its gate and output rows start relative to its qkv
// rows.
type deltaCase struct {
	nk, nv, dk, dv, n int
	gateRow, outRow   int
}

func testDeltaRule(e *Env) error {
	cases := []deltaCase{
		{1, 1, 16, 16, 1, 0, 0},
		{1, 2, 32, 16, 3, 1, 2},
		{2, 4, 16, 32, 5, 0, 1},
		{2, 2, 128, 128, 4, 2, 0},
		{1, 3, 64, 17, 2, 0, 0},
		{2, 4, 128, 128, 17, 1, 1},
		// Prompt lengths around and across chunks of 64 tokens (where a
		// backend may switch to a chunked form), dk != dv.
		{1, 1, 32, 16, 63, 0, 0},
		{1, 3, 32, 16, 64, 1, 0},
		{2, 4, 16, 32, 65, 0, 2},
		{1, 2, 64, 17, 130, 2, 1},
		{2, 2, 128, 128, 200, 0, 0},
		{1, 2, 256, 40, 70, 1, 0},
	}
	for _, c := range cases {
		if err := e.deltaBatch([]deltaCase{c}); err != nil {
			return err
		}
	}
	// Several sequences of one layer in one call: decode steps, an empty
	// one and prompt chunks (which a backend may evaluate differently).
	batches := [][]deltaCase{
		{{2, 4, 32, 16, 3, 1, 2}, {2, 4, 32, 16, 0, 0, 0}, {2, 4, 32, 16, 1, 0, 0}, {2, 4, 32, 16, 17, 2, 1}, {2, 4, 32, 16, 1, 1, 1}, {2, 4, 32, 16, 40, 0, 0}},
		{{2, 4, 128, 128, 1, 0, 0}, {2, 4, 128, 128, 1, 0, 0}, {2, 4, 128, 128, 2, 0, 0}, {2, 4, 128, 128, 16, 0, 0}},
		{{2, 6, 32, 16, 63, 0, 0}, {2, 6, 32, 16, 1, 0, 0}, {2, 6, 32, 16, 64, 1, 2}, {2, 6, 32, 16, 0, 0, 0}, {2, 6, 32, 16, 130, 0, 1}, {2, 6, 32, 16, 65, 2, 0}},
		{{1, 1, 32, 16, 200, 0, 0}, {1, 1, 32, 16, 3, 1, 1}, {1, 1, 32, 16, 64, 0, 0}},
	}
	for _, b := range batches {
		if err := e.deltaBatch(b); err != nil {
			return err
		}
	}
	return nil
}

// deltaBatch runs the delta rule for the sequences cs (one shape) in one
// call, their q, k and v rows one after another in a shared fused buffer
// and their gates and outputs in shared buffers, checks the results against
// the reference, and checks that calling the backend under test once per
// sequence gives the same bits.
func (e *Env) deltaBatch(cs []deltaCase) error {
	c0 := cs[0]
	// Fused qkv rows as in the model: [q heads | k heads | v heads | pad].
	qOff, kOff, vOff := 0, c0.nk*c0.dk, 2*c0.nk*c0.dk
	rowStride := 2*c0.nk*c0.dk + c0.nv*c0.dv + 3
	q := compute.Heads{Off: qOff + 1, RowStride: rowStride, HeadStride: c0.dk, Count: c0.nk, Dim: c0.dk}
	k := compute.Heads{Off: kOff + 1, RowStride: rowStride, HeadStride: c0.dk, Count: c0.nk, Dim: c0.dk}
	v := compute.Heads{Off: vOff + 1, RowStride: rowStride, HeadStride: c0.dv, Count: c0.nv, Dim: c0.dv}
	base := make([]int, len(cs)) // each sequence's first qkv row
	rows, gateRows, outRows := 0, 0, 0
	for i, c := range cs {
		base[i] = rows
		rows += c.n + 1
		gateRows = max(gateRows, base[i]+c.gateRow+c.n)
		outRows = max(outRows, base[i]+c.outRow+c.n)
	}
	qkvVals := e.randVals(rows*rowStride+2, 1)
	// q and k are L2-normalised in the model; keep them at that scale.
	for t := 0; t < rows; t++ {
		for h := 0; h < c0.nk; h++ {
			for _, hs := range []compute.Heads{q, k} {
				seg := qkvVals[hs.Head(t, h) : hs.Head(t, h)+c0.dk]
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
	qkv, err := e.buf(qkvVals)
	if err != nil {
		return err
	}
	gv := make([]float32, gateRows*c0.nv)
	bv := make([]float32, len(gv))
	for i := range gv {
		gv[i] = float32(-e.Rng.Float64() * 2)
		bv[i] = float32(e.Rng.Float64())
	}
	g, err := e.buf(gv)
	if err != nil {
		return err
	}
	beta, err := e.buf(bv)
	if err != nil {
		return err
	}
	out, err := e.randBuf(outRows*c0.nv*c0.dv+1, 1)
	if err != nil {
		return err
	}
	soloOut, err := e.dutBuf(out.vals)
	if err != nil {
		return err
	}
	sts := make([]pair, len(cs))
	soloSts := make([]compute.Buffer, len(cs))
	for i := range cs {
		if sts[i], err = e.randBuf(c0.nv*c0.dk*c0.dv, 0.5); err != nil { // prior state
			return err
		}
		if soloSts[i], err = e.dutBuf(sts[i].vals); err != nil {
			return err
		}
	}
	scale := float32(1 / math.Sqrt(float64(c0.dk)))
	arg := func(i int, dut bool, o, st compute.Buffer) compute.DeltaRule {
		c := cs[i]
		return compute.DeltaRule{Q: q.Rows(base[i]), K: k.Rows(base[i]), V: v.Rows(base[i]), QKV: qkv.pick(dut),
			G: g.pick(dut), Beta: beta.pick(dut), GateRow: base[i] + c.gateRow,
			Out: o, OutRow: base[i] + c.outRow, State: st, N: c.n, QScale: scale, Nk: c.nk, Nv: c.nv, Dk: c.dk, Dv: c.dv}
	}
	var refArgs, dutArgs []compute.DeltaRule
	for i := range cs {
		refArgs = append(refArgs, arg(i, false, out.ref, sts[i].ref))
		dutArgs = append(dutArgs, arg(i, true, out.dut, sts[i].dut))
	}
	e.Ref.GatedDeltaRule(refArgs)
	e.DUT.GatedDeltaRule(dutArgs)
	for i := range cs {
		e.DUT.GatedDeltaRule([]compute.DeltaRule{arg(i, true, soloOut, soloSts[i])})
	}

	// Magnitudes: the same recurrence on absolute values, in float64.
	outTol := map[int]float64{}
	stTols := make([][]float64, len(cs))
	group := c0.nv / c0.nk
	for ci, c := range cs {
		sAbs := make([]float64, len(sts[ci].vals))
		for i, x := range sts[ci].vals {
			sAbs[i] = math.Abs(float64(x))
		}
		for h := 0; h < c.nv; h++ {
			kh := h / group
			s := sAbs[h*c.dk*c.dv : (h+1)*c.dk*c.dv]
			for t := 0; t < c.n; t++ {
				gi := (base[ci]+c.gateRow+t)*c.nv + h
				decay := math.Exp(float64(gv[gi]))
				b := float64(bv[gi])
				row := base[ci] + t
				kv := qkvVals[k.Head(row, kh) : k.Head(row, kh)+c.dk]
				qv := qkvVals[q.Head(row, kh) : q.Head(row, kh)+c.dk]
				vv := qkvVals[v.Head(row, h) : v.Head(row, h)+c.dv]
				for j := 0; j < c.dv; j++ {
					var u float64
					for i := 0; i < c.dk; i++ {
						s[i*c.dv+j] *= decay
						u += s[i*c.dv+j] * math.Abs(float64(kv[i]))
					}
					u = b * (math.Abs(float64(vv[j])) + u)
					var o float64
					for i := 0; i < c.dk; i++ {
						s[i*c.dv+j] += math.Abs(float64(kv[i])) * u
						o += s[i*c.dv+j] * math.Abs(float64(qv[i])*float64(scale))
					}
					outTol[(base[ci]+c.outRow+t)*c.nv*c.dv+h*c.dv+j] = tol(o, c.dk) * float64(t+2)
				}
			}
		}
		for i := range sAbs {
			sAbs[i] = tol(sAbs[i], c.dk) * float64(c.n+1)
			if c.n <= 0 {
				sAbs[i] = 0 // skipped: left exactly as it was
			}
		}
		stTols[ci] = sAbs
	}
	what := fmt.Sprintf("GatedDeltaRule %+v", cs)
	if err := e.check(what+" out", out, regionTol(outTol)); err != nil {
		return err
	}
	for i := range cs {
		st := stTols[i]
		if err := e.check(fmt.Sprintf("%s state %d", what, i), sts[i], func(j int) float64 { return st[j] }); err != nil {
			return err
		}
	}
	if err := e.sameBits(what+": one call per sequence vs one call, out", soloOut, out.dut); err != nil {
		return err
	}
	for i := range cs {
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, state %d", what, i), soloSts[i], sts[i].dut); err != nil {
			return err
		}
	}
	e.free(append(sts, qkv, g, beta, out)...)
	e.freeDUT(append(soloSts, soloOut)...)
	return nil
}

// attnCase is one attention configuration: the shape, the sequence's
// position, new tokens, first output row and cache capacity.
type attnCase struct {
	heads, kvHeads, dim, pos, n, outRow, capacity int
}

func testAttention(e *Env) error {
	cases := []attnCase{
		{1, 1, 16, 0, 1, 0, 1},
		{2, 1, 32, 0, 3, 1, 5},
		{4, 2, 64, 5, 1, 0, 9},
		{8, 2, 128, 17, 4, 2, 30},
		{4, 1, 256, 3, 17, 0, 21},
		{2, 2, 128, 200, 1, 0, 203},
		{6, 3, 32, 63, 2, 1, 70},
		{3, 1, 16, 0, 65, 0, 65},
	}
	for _, c := range cases {
		if err := e.attnBatch([]attnCase{c}); err != nil {
			return err
		}
	}
	// Several sequences of one layer in one call: decode steps at
	// different positions (one long enough for a backend to split), an
	// empty one, and prompt chunks.
	batches := [][]attnCase{
		{{8, 2, 64, 5, 1, 0, 9}, {8, 2, 64, 600, 1, 1, 601}, {8, 2, 64, 0, 0, 0, 4}, {8, 2, 64, 0, 20, 2, 20}, {8, 2, 64, 40, 3, 22, 50}, {8, 2, 64, 0, 1, 25, 1}},
		{{4, 1, 32, 300, 1, 0, 301}, {4, 1, 32, 17, 1, 1, 18}, {4, 1, 32, 9, 16, 2, 25}},
	}
	for _, b := range batches {
		if err := e.attnBatch(b); err != nil {
			return err
		}
	}
	return nil
}

// attnBatch runs attention for the sequences cs (one shape) in one call,
// their q, k and v rows one after another in shared buffers, each with its
// own caches, outputs at their OutRow of a shared buffer; checks the results
// against the reference; and checks that calling the backend under test once
// per sequence gives the same bits.
func (e *Env) attnBatch(cs []attnCase) error {
	c0 := cs[0]
	// Fused q/gate rows for q, separate k and v with padding, as in the model.
	q := compute.Heads{Off: 2, RowStride: 2*c0.heads*c0.dim + 1, HeadStride: 2 * c0.dim, Count: c0.heads, Dim: c0.dim}
	k := compute.Heads{Off: 0, RowStride: c0.kvHeads*c0.dim + 5, HeadStride: c0.dim, Count: c0.kvHeads, Dim: c0.dim}
	v := compute.Heads{Off: 3, RowStride: c0.kvHeads * c0.dim, HeadStride: c0.dim, Count: c0.kvHeads, Dim: c0.dim}
	base := make([]int, len(cs)) // each sequence's first q, k and v row
	rows, outRows := 0, 0
	for i, c := range cs {
		base[i] = rows
		rows += c.n
		outRows = max(outRows, c.outRow+c.n)
	}
	rows = max(rows, 1)
	qb, err := e.randBuf(headsLen(q, rows), 1)
	if err != nil {
		return err
	}
	kb, err := e.randBuf(headsLen(k, rows), 1)
	if err != nil {
		return err
	}
	vb, err := e.randBuf(headsLen(v, rows), 1)
	if err != nil {
		return err
	}
	width := c0.kvHeads * c0.dim
	// Earlier positions already in the caches; later ones are garbage the
	// op must neither read nor write.
	kcs, vcs := make([]pair, len(cs)), make([]pair, len(cs))
	soloKC, soloVC := make([]compute.Buffer, len(cs)), make([]compute.Buffer, len(cs))
	for i, c := range cs {
		if kcs[i], err = e.randBuf(c.capacity*width, 1); err != nil {
			return err
		}
		if vcs[i], err = e.randBuf(c.capacity*width, 1); err != nil {
			return err
		}
		if soloKC[i], err = e.dutBuf(kcs[i].vals); err != nil {
			return err
		}
		if soloVC[i], err = e.dutBuf(vcs[i].vals); err != nil {
			return err
		}
	}
	out, err := e.randBuf(outRows*c0.heads*c0.dim+1, 1)
	if err != nil {
		return err
	}
	soloOut, err := e.dutBuf(out.vals)
	if err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(c0.dim)))
	arg := func(i int, dut bool, kc, vc, o compute.Buffer) compute.Attention {
		c := cs[i]
		return compute.Attention{Q: q.Rows(base[i]), QBuf: qb.pick(dut), K: k.Rows(base[i]), KBuf: kb.pick(dut), V: v.Rows(base[i]), VBuf: vb.pick(dut),
			KCache: kc, VCache: vc, Out: o, OutRow: c.outRow, Pos: c.pos, N: c.n, Scale: scale}
	}
	var refArgs, dutArgs []compute.Attention
	for i := range cs {
		refArgs = append(refArgs, arg(i, false, kcs[i].ref, vcs[i].ref, out.ref))
		dutArgs = append(dutArgs, arg(i, true, kcs[i].dut, vcs[i].dut, out.dut))
	}
	e.Ref.CausalAttention(refArgs)
	e.DUT.CausalAttention(dutArgs)
	for i := range cs {
		e.DUT.CausalAttention([]compute.Attention{arg(i, true, soloKC[i], soloVC[i], soloOut)})
	}
	what := fmt.Sprintf("CausalAttention %+v", cs)
	m := map[int]float64{}
	group := c0.heads / c0.kvHeads
	for i, c := range cs {
		if err := e.check(fmt.Sprintf("%s kcache %d", what, i), kcs[i], nil); err != nil {
			return err
		}
		if err := e.check(fmt.Sprintf("%s vcache %d", what, i), vcs[i], nil); err != nil {
			return err
		}
		kcv, _, err := e.download(kcs[i])
		if err != nil {
			return err
		}
		vcv, _, err := e.download(vcs[i])
		if err != nil {
			return err
		}
		for t := 0; t < c.n; t++ {
			for h := 0; h < c.heads; h++ {
				kvh := h / group
				qv := qb.vals[q.Head(base[i]+t, h) : q.Head(base[i]+t, h)+c.dim]
				L := c.pos + t + 1
				sc := make([]float64, L)
				absSc := make([]float64, L)
				mx := math.Inf(-1)
				for s := 0; s < L; s++ {
					for d := 0; d < c.dim; d++ {
						x := float64(qv[d]) * float64(kcv[s*width+kvh*c.dim+d])
						sc[s] += x
						absSc[s] += math.Abs(x)
					}
					sc[s] *= float64(scale)
					absSc[s] *= float64(scale)
					mx = max(mx, sc[s])
				}
				var sum, worstScore float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
					worstScore = max(worstScore, absSc[s])
				}
				for d := 0; d < c.dim; d++ {
					var mag float64
					for s := 0; s < L; s++ {
						mag += sc[s] / sum * math.Abs(float64(vcv[s*width+kvh*c.dim+d]))
					}
					// Score errors of u·√dim·Σ|q·k| perturb the weights; the
					// weighted sum adds its own √L rounding.
					m[(c.outRow+t)*c.heads*c.dim+h*c.dim+d] = tol(mag, L) + tol(mag*(2+2*worstScore), c.dim)
				}
			}
		}
	}
	if err := e.check(what+" out", out, regionTol(m)); err != nil {
		return err
	}
	if err := e.sameBits(what+": one call per sequence vs one call, out", soloOut, out.dut); err != nil {
		return err
	}
	for i := range cs {
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, kcache %d", what, i), soloKC[i], kcs[i].dut); err != nil {
			return err
		}
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, vcache %d", what, i), soloVC[i], vcs[i].dut); err != nil {
			return err
		}
	}
	e.free(append(append(kcs, vcs...), qb, kb, vb, out)...)
	e.freeDUT(append(append(soloKC, soloVC...), soloOut)...)
	return nil
}

func testSigmoidMul(e *Env) error {
	for k, xh := range headShapes {
		n := 1 + k%3
		x, err := e.randBuf(headsLen(xh, n), 1)
		if err != nil {
			return err
		}
		gh := compute.Heads{Off: 1, RowStride: xh.Count*xh.Dim*2 + 1, HeadStride: 2 * xh.Dim, Count: xh.Count, Dim: xh.Dim}
		g, err := e.randBuf(headsLen(gh, n), 4)
		if err != nil {
			return err
		}
		e.Ref.SigmoidMul(x.ref, xh, g.ref, gh, n)
		e.DUT.SigmoidMul(x.dut, xh, g.dut, gh, n)
		m := headTol(xh, n, func(r, hd, i, idx int) float64 {
			gv := float64(g.vals[gh.Head(r, hd)+i])
			return tol(math.Abs(float64(x.vals[idx])*sigmoid64(gv))*(1+math.Abs(gv)), 1)
		})
		if err := e.check(fmt.Sprintf("SigmoidMul %+v n=%d", xh, n), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x, g)
	}
	return nil
}

func testSiLUMul(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4097} {
		g, err := e.randBuf(n+1, 4)
		if err != nil {
			return err
		}
		u, err := e.randBuf(n+2, 1)
		if err != nil {
			return err
		}
		d, err := e.randBuf(n+3, 1)
		if err != nil {
			return err
		}
		e.Ref.SiLUMul(d.ref, g.ref, u.ref, n)
		e.DUT.SiLUMul(d.dut, g.dut, u.dut, n)
		err = e.check(fmt.Sprintf("SiLUMul n=%d", n), d, func(i int) float64 {
			if i >= n {
				return 0
			}
			gv := float64(g.vals[i])
			return tol(math.Abs(gv*sigmoid64(gv)*float64(u.vals[i]))*(1+math.Abs(gv)), 1)
		})
		if err != nil {
			return err
		}
		e.free(g, u, d)
	}
	return nil
}

func testAdd(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4097} {
		x, err := e.randBuf(n+1, 1)
		if err != nil {
			return err
		}
		d, err := e.randBuf(n+2, 1)
		if err != nil {
			return err
		}
		e.Ref.Add(d.ref, x.ref, n)
		e.DUT.Add(d.dut, x.dut, n)
		// A float32 addition is correctly rounded everywhere: exact match.
		if err := e.check(fmt.Sprintf("Add n=%d", n), d, nil); err != nil {
			return err
		}
		e.free(x, d)
	}
	return nil
}

func testArgmax(e *Env) error {
	for _, sh := range [][2]int{{1, 1}, {1, 7}, {3, 65}, {2, 1000}, {5, 4099}, {1, 151936}} {
		rows, dim := sh[0], sh[1]
		vals := e.randVals(rows*dim, 3)
		if dim > 10 {
			// A tie between two maxima: the lower index must win.
			r := rows - 1
			vals[r*dim+dim-1] = 100
			vals[r*dim+dim/3] = 100
		}
		x, err := e.buf(vals)
		if err != nil {
			return err
		}
		want := make([]int32, rows)
		got := make([]int32, rows)
		if err := e.Ref.Argmax(e.Ctx, want, x.ref, dim); err != nil {
			return err
		}
		if err := e.DUT.Argmax(e.Ctx, got, x.dut, dim); err != nil {
			return fmt.Errorf("Argmax rows=%d dim=%d: %w", rows, dim, err)
		}
		for r := range want {
			if got[r] != want[r] {
				return fmt.Errorf("Argmax rows=%d dim=%d: row %d = %d, want %d", rows, dim, r, got[r], want[r])
			}
		}
		e.free(x)
	}
	return nil
}

// testChain issues a dependent sequence of operations with no download in
// between, the way a model step does, so that a deferred backend must order
// them correctly.
func testChain(e *Env) error {
	const n, dim, hidden = 3, 64, 96
	emb, err := e.weight("emb", compute.BF16, 11, dim, e.normal(1))
	if err != nil {
		return err
	}
	up, err := e.weight("up", compute.BF16, hidden, dim, e.normal(0.2))
	if err != nil {
		return err
	}
	down, err := e.weight("down", compute.F16, dim, hidden, e.normal(0.2))
	if err != nil {
		return err
	}
	norm, err := e.weight("norm", compute.F32, 1, dim, e.normal(0.2))
	if err != nil {
		return err
	}
	x, err := e.randBuf(n*dim, 1)
	if err != nil {
		return err
	}
	h, err := e.randBuf(n*dim, 1)
	if err != nil {
		return err
	}
	a, err := e.randBuf(n*hidden, 1)
	if err != nil {
		return err
	}
	ids := []int32{3, 10, 0}
	for _, be := range []struct {
		b          compute.Backend
		x, h, a    compute.Buffer
		emb, u, d  compute.Weight
		normWeight compute.Weight
	}{
		{e.Ref, x.ref, h.ref, a.ref, emb.ref, up.ref, down.ref, norm.ref},
		{e.DUT, x.dut, h.dut, a.dut, emb.dut, up.dut, down.dut, norm.dut},
	} {
		b := be.b
		b.Embed(be.x, be.emb, ids)
		for layer := 0; layer < 3; layer++ {
			b.RMSNorm(be.h, be.x, be.normWeight, n, dim, 1e-6)
			b.MatMul(be.a, be.h, be.u, n)
			b.SiLUMul(be.a, be.a, be.a, n*hidden)
			b.MatMul(be.h, be.a, be.d, n)
			b.Add(be.x, be.h, n*dim)
		}
		b.Copy(be.h, 0, be.x, 0, n*dim)
	}
	// Errors compound through the layers; compare relative to the
	// magnitude of the final activations.
	ref, _, err := e.download(h)
	if err != nil {
		return err
	}
	var mag float64
	for _, v := range ref {
		mag = max(mag, math.Abs(float64(v)))
	}
	err = e.check("Chain", h, func(int) float64 { return tol(mag, dim*hidden) })
	e.free(x, h, a)
	return err
}
