// Package computetest is a conformance suite for compute.Backend
// implementations. It runs every operation on random inputs at awkward sizes
// (tails that are not multiples of any workgroup, n = 1, heads embedded in
// wider rows, attention at Pos > 0, recurrent ops with prior state) on the
// backend under test and on the CPU backend as the reference (with the
// machine's assembly kernels, which package asm tests against their pure-Go
// twins, on row-major weights, which backends of other settings may share),
// and compares the whole of every buffer involved. Each operation's
// cases are in a file of their own (matmul.go, norm.go, attention.go, ...).
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
	ref := cpu.New(cpu.Options{Threads: 2, NoAMXTiles: true, NoFMATiles: true})
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
	}, append(quantCases(),
		// The vision tower's, last so that the cases above keep their
		// seeds.
		Case{"LayerNorm", testLayerNorm},
		Case{"AddBias", testAddBias},
		Case{"GELU", testGELU},
		Case{"SegmentAttention", testSegmentAttention},
		// A mixture of experts' gathers and sums.
		Case{"SumRows", testSumRows},
		Case{"SwiGLU", testSwiGLU},
		// A mixture of experts routed on the device (compute.ExpertRouter).
		Case{"RouteExperts", testRouteExperts},
		Case{"MatMulExperts", testMatMulExperts},
		Case{"CombineExperts", testCombineExperts},
	)...)
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
