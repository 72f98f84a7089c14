package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

// relTol is the allowed error of a float32-accumulated dot product relative to
// the sum of the absolute values of its terms (computed in float64).
const relTol = 1e-6

// guard is the number of sentinel values placed on each side of outputs.
const guard = 16

// sentinel fills guard bands; a kernel that writes out of bounds changes it.
const sentinel = float32(-12345.5)

// kernelSets returns every kernel set this CPU can run, each once: the
// AVX512_VNNI sets with and without the one-input group kernels
// (Features.multiStream), whichever the CPU's vendor gets by default.
func kernelSets(t testing.TB) []*Kernels {
	t.Helper()
	wants := []Features{
		{},
		{AVX2: true},
		{AVX2: true, packedBF16: true},
		{AVX2: true, AVXVNNI: true},
		{AVX2: true, AVX512: true},
		{AVX2: true, AVX512: true, AVX512BF16: true},
		{AVX2: true, AVX512: true, AVX512VNNI: true},
		{AVX2: true, AVX512: true, AVX512BF16: true, AVX512VNNI: true},
		{AVX2: true, AVX512: true, AVX512BF16: true, AVX512VNNI: true, AMXBF16: true},
		{AVX2: true, AVX512: true, AVX512BF16: true, AVX512VNNI: true, multiStream: true},
		{NEON: true},
		{NEON: true, DotProd: true},
	}
	seen := map[string]bool{}
	var sets []*Kernels
	for _, f := range wants {
		k := New(f)
		key := fmt.Sprintf("%s %+v", k.Name(), k.Features())
		if seen[key] {
			continue
		}
		seen[key] = true
		sets = append(sets, k)
	}
	if testing.Verbose() {
		var names []string
		for _, k := range sets {
			name := k.Name()
			if k.Features().multiStream {
				name += " (group kernels)"
			}
			names = append(names, name)
		}
		t.Logf("kernel sets on %s: %s (detected %+v)", runtime.GOARCH, strings.Join(names, ", "), DetectFeatures())
	}
	return sets
}

// elemKind describes a weight element type for the tests.
type elemKind struct {
	name string
	conv func(uint16) float32
	rand func(r *rand.Rand) uint16
}

var kinds = []elemKind{
	{"bf16", half.BF16ToF32, func(r *rand.Rand) uint16 { return half.F32ToBF16(r.Float32()*2 - 1) }},
	{"f16", half.F16ToF32, randF16},
}

// randF16 returns a random half-precision value in about ±[2^-14, 2) with
// occasional subnormals and zeros, so the conversions are exercised.
func randF16(r *rand.Rand) uint16 {
	sign := uint16(r.IntN(2)) << 15
	man := uint16(r.IntN(1024))
	exp := uint16(r.IntN(16)) // biased: 1..15 are 2^-14..2^0
	if r.IntN(16) == 0 {
		exp = 0 // subnormal or zero
	}
	return sign | exp<<10 | man
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

func randU16(r *rand.Rand, k elemKind, n int) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		v[i] = k.rand(r)
	}
	return v
}

// offset returns a copy of v placed off elements into a larger buffer, so the
// kernels see slices that are not aligned like a fresh allocation.
func offset[T any](v []T, off int) []T {
	buf := make([]T, len(v)+off+guard)
	copy(buf[off:], v)
	return buf[off : off+len(v) : off+len(v)]
}

// ref returns the float64 dot product of the terms a[i]*b[i] and the sum of their magnitudes.
func ref(n int, a, b func(i int) float64) (sum, abs float64) {
	for i := range n {
		p := a(i) * b(i)
		sum += p
		abs += math.Abs(p)
	}
	return sum, abs
}

func check(t *testing.T, what string, got float32, want, abs float64) {
	t.Helper()
	if d := math.Abs(float64(got) - want); !(d <= relTol*abs+1e-30) {
		t.Fatalf("%s: got %g, want %g (error %g, allowed %g)", what, got, want, d, relTol*abs)
	}
}

// guarded returns an output buffer of n values with sentinel guard bands and
// the slice of it the kernel should write.
func guarded(n int) (buf, out []float32) {
	buf = make([]float32, n+2*guard)
	for i := range buf {
		buf[i] = sentinel
	}
	return buf, buf[guard : guard+n]
}

func checkGuards(t *testing.T, what string, buf []float32) {
	t.Helper()
	n := len(buf) - 2*guard
	for i, v := range buf {
		if (i < guard || i >= guard+n) && v != sentinel {
			t.Fatalf("%s: guard value %d was overwritten with %g", what, i, v)
		}
	}
}

func TestDot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range kernelSets(t) {
		for n := 0; n <= 257; n++ {
			for _, off := range []int{0, 1, 3} {
				x := offset(randF32(r, n), off+1)
				xf := func(i int) float64 { return float64(x[i]) }
				for _, kind := range kinds {
					w := offset(randU16(r, kind, n), off)
					want, abs := ref(n, func(i int) float64 { return float64(kind.conv(w[i])) }, xf)
					var got float32
					if kind.name == "bf16" {
						got = k.DotBF16(w, x)
					} else {
						got = k.DotF16(w, x)
					}
					check(t, k.Name()+" Dot"+kind.name, got, want, abs)
				}
				w := offset(randF32(r, n), off)
				want, abs := ref(n, func(i int) float64 { return float64(w[i]) }, xf)
				check(t, k.Name()+" DotF32", k.DotF32(w, x), want, abs)
				// Lengths differ: only the common prefix counts.
				if n > 0 {
					want, abs = ref(n-1, func(i int) float64 { return float64(w[i]) }, xf)
					check(t, k.Name()+" DotF32 short", k.DotF32(w[:n-1], x), want, abs)
				}
			}
		}
	}
}

func TestAxpyScale(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range kernelSets(t) {
		for n := 0; n <= 257; n++ {
			for _, off := range []int{0, 1, 2} {
				a := r.Float32()*4 - 2
				x := offset(randF32(r, n), off)
				y0 := randF32(r, n)
				buf, y := guarded(n + off)
				y = y[off:]
				copy(y, y0)
				k.Axpy(a, x, y)
				for i := range n {
					want := float64(y0[i]) + float64(a)*float64(x[i])
					check(t, k.Name()+" Axpy", y[i], want, math.Abs(float64(y0[i]))+math.Abs(float64(a)*float64(x[i])))
				}
				checkGuards(t, k.Name()+" Axpy", buf[off:])
				y1 := append([]float32(nil), y...)
				k.Scale(a, y)
				for i := range n {
					want := float64(a) * float64(y1[i])
					check(t, k.Name()+" Scale", y[i], want, math.Abs(want))
				}
				checkGuards(t, k.Name()+" Scale", buf[off:])
			}
		}
	}
}

// matCase is one shape for the matrix tests.
type matCase struct{ rows, cols, n int }

func matCases() []matCase {
	var cs []matCase
	for cols := 0; cols <= 257; cols++ {
		// n > 1 sends every column count through the register-tiled path.
		cs = append(cs, matCase{5, cols, 1}, matCase{8, cols, 1}, matCase{4, cols, 5})
	}
	for rows := 0; rows <= 13; rows++ {
		for _, cols := range []int{1, 8, 16, 33, 64, 100} {
			for _, n := range []int{1, 2, 3, 5} {
				cs = append(cs, matCase{rows, cols, n})
			}
		}
	}
	for _, cols := range []int{0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 64, 95, 257} {
		for _, n := range []int{2, 3, 4, 6, 7, 8, 13} {
			cs = append(cs, matCase{12, cols, n})
		}
	}
	// Crosses the cache blocks: several column blocks and input blocks.
	cs = append(cs, matCase{8, 2*kBlock + 40, 35})
	if !testing.Short() {
		cs = append(cs, matCase{9, kBlock + 17, 64})
	}
	return cs
}

// runMat checks one matrix kernel on one shape. wv(i) is weight element i as
// float64 and xv(i) input element i; call runs the kernel writing dst with
// stride ldd. The output has guard bands and junk between rows and ldd.
func runMat(t *testing.T, what string, c matCase, wv, xv func(i int) float64,
	call func(dst []float32, ldd int) error) {
	t.Helper()
	ldd := c.rows + 3
	if c.n == 1 {
		ldd = c.rows
	}
	size := 0
	if c.n > 0 {
		size = (c.n-1)*ldd + c.rows
	}
	buf, dst := guarded(size)
	if err := call(dst, ldd); err != nil {
		t.Fatalf("%s %+v: %v", what, c, err)
	}
	checkGuards(t, what, buf)
	for i := range c.n {
		for r := range c.rows {
			want, abs := ref(c.cols, func(p int) float64 { return wv(r*c.cols + p) },
				func(p int) float64 { return xv(i*c.cols + p) })
			check(t, what, dst[i*ldd+r], want, abs)
		}
		for r := c.rows; r < ldd && i < c.n-1; r++ {
			if dst[i*ldd+r] != sentinel {
				t.Fatalf("%s %+v: wrote dst[%d] between rows and stride", what, c, i*ldd+r)
			}
		}
	}
}

func TestMatVecMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range kernelSets(t) {
		for ci, c := range matCases() {
			off := ci % 3
			x := offset(randF32(r, c.n*c.cols), off+1)
			xv := func(i int) float64 { return float64(x[i]) }
			for _, kind := range kinds {
				w := offset(randU16(r, kind, c.rows*c.cols), off)
				wv := func(i int) float64 { return float64(kind.conv(w[i])) }
				if c.n == 1 {
					runMat(t, k.Name()+" MatVec"+kind.name, c, wv, xv, func(dst []float32, _ int) error {
						if kind.name == "bf16" {
							return k.MatVecBF16(dst, w, c.rows, c.cols, x)
						}
						return k.MatVecF16(dst, w, c.rows, c.cols, x)
					})
				}
				runMat(t, k.Name()+" MatMul"+kind.name, c, wv, xv, func(dst []float32, ldd int) error {
					if kind.name == "bf16" {
						return k.MatMulBF16(dst, ldd, w, c.rows, c.cols, x, c.n)
					}
					return k.MatMulF16(dst, ldd, w, c.rows, c.cols, x, c.n)
				})
			}
			w := offset(randF32(r, c.rows*c.cols), off)
			wv := func(i int) float64 { return float64(w[i]) }
			if c.n == 1 {
				runMat(t, k.Name()+" MatVecF32", c, wv, xv, func(dst []float32, _ int) error {
					return k.MatVecF32(dst, w, c.rows, c.cols, x)
				})
			}
			runMat(t, k.Name()+" MatMulF32", c, wv, xv, func(dst []float32, ldd int) error {
				return k.MatMulF32(dst, ldd, w, c.rows, c.cols, x, c.n)
			})
			// GemmBF16: both operands bf16.
			wb := offset(randU16(r, kinds[0], c.rows*c.cols), off)
			xb := offset(randU16(r, kinds[0], c.n*c.cols), off+2)
			runMat(t, k.Name()+" GemmBF16", c,
				func(i int) float64 { return float64(half.BF16ToF32(wb[i])) },
				func(i int) float64 { return float64(half.BF16ToF32(xb[i])) },
				func(dst []float32, ldd int) error { return k.GemmBF16(dst, ldd, wb, c.rows, c.cols, xb, c.n) })
		}
	}
}

func TestShapeErrors(t *testing.T) {
	k := Detect()
	w := make([]uint16, 12)
	x := make([]float32, 8)
	dst := make([]float32, 8)
	cases := []struct {
		name string
		err  error
	}{
		{"negative rows", k.MatVecBF16(dst, w, -1, 3, x)},
		{"short weights", k.MatVecBF16(dst, w, 4, 4, x)},
		{"short input", k.MatVecBF16(dst, w, 1, 9, x)},
		{"short output", k.MatVecBF16(dst[:2], w, 3, 4, x)},
		{"overflow", k.MatVecBF16(dst, w, math.MaxInt/2, 4, x)},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		} else if !strings.Contains(c.err.Error(), "MatVecBF16") {
			t.Errorf("%s: error %q does not name the kernel", c.name, c.err)
		}
	}
	if err := k.MatMulBF16(dst, 2, w, 3, 4, x, 2); err == nil {
		t.Error("stride below rows: no error")
	}
	if err := k.MatMulF32(dst[:6], 4, make([]float32, 12), 3, 4, x, 2); err == nil {
		t.Error("output too short for n inputs: no error")
	}
	if err := k.GemmBF16(dst, 3, w, 3, 4, make([]uint16, 7), 2); err == nil {
		t.Error("bf16 input too short: no error")
	}
	if err := k.MatMulBF16(nil, 0, nil, 0, 5, nil, 0); err != nil {
		t.Errorf("empty product: %v", err)
	}
}
