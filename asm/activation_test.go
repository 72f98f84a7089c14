package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// actTol is the allowed relative error of Exp, Sigmoid, SiLU, SiLUMul and
// SigmoidMul against the float64 reference (3.4 to 6.7 float32 ulps).
const actTol = 4e-7

// subStep is the spacing of float32 subnormals, the absolute error any
// float32 result below the normal range may carry from its final rounding.
const subStep = 0x1p-149

// exp64, sigmoid64 and silu64 are the float64 references.
func exp64(x float64) float64 { return math.Exp(x) }

func sigmoid64(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func silu64(x float64) float64 {
	if math.IsInf(x, -1) {
		return 0 // the limit; x*sigmoid(x) would be -Inf*0
	}
	return x * sigmoid64(x)
}

// actErr reports whether got is within actTol relative error plus floor of
// the float64 value want. Values at or beyond the float32 overflow threshold
// must be ±Inf, and +Inf where allowed counts as 2^128 (the value it rounds).
// NaN must give NaN. It returns the relative error for the statistics.
func actErr(got float32, want, floor float64) (float64, bool) {
	const overflow = 0x1p128 * (1 - 0x1p-25) // smallest value that rounds to +Inf
	g := float64(got)
	switch {
	case math.IsNaN(want):
		return 0, math.IsNaN(g)
	case want >= overflow:
		return 0, math.IsInf(g, 1)
	case want <= -overflow:
		return 0, math.IsInf(g, -1)
	case math.IsNaN(g):
		return math.Inf(1), false
	case math.IsInf(g, 0):
		g = math.Copysign(0x1p128, g)
	}
	d := math.Abs(g - want)
	rel := 0.0
	if want != 0 {
		rel = d / math.Abs(want)
	}
	return rel, d <= actTol*math.Abs(want)+floor
}

// actInputs returns the inputs of the accuracy test: a dense even grid over
// [lo, hi], random values, runs of consecutive float32 values around the
// points where the kernels change regime, and special values.
func actInputs(r *rand.Rand, lo, hi float32, grid int) []float32 {
	var v []float32
	for i := range grid {
		v = append(v, lo+(hi-lo)*float32(i)/float32(grid-1))
	}
	for range grid / 4 {
		v = append(v, lo+(hi-lo)*r.Float32())
	}
	edges := []float32{0, 0.34657359, 0.5, 1, 15, 16, 87.33654, 88.72283, 88.72284, 89,
		92.6, 103.97, 104, 109.9, 110, 110.1}
	for _, e := range edges {
		for _, s := range []float32{1, -1} {
			x := s * e
			for range 64 {
				x = math.Nextafter32(x, float32(math.Inf(-1)))
			}
			for range 128 {
				v = append(v, x)
				x = math.Nextafter32(x, float32(math.Inf(1)))
			}
		}
	}
	inf := float32(math.Inf(1))
	v = append(v, 1e-45, -1e-45, 1e-40, -1e-40, 1e-30, -1e-30, 200, -200, 1e30, -1e30,
		math.MaxFloat32, -math.MaxFloat32, inf, -inf, float32(math.NaN()),
		math.Float32frombits(0xffc00000)) // a NaN with the sign bit set
	return v
}

// actCase is one activation kernel under test: run applies it to out, and
// want and floor give the reference for element i.
type actCase struct {
	name  string
	lo    float32 // input range of the dense grid
	hi    float32
	run   func(k *Kernels, out, x, y []float32)
	want  func(x, y float64) float64
	floor func(x, y float64) float64
}

func actCases() []actCase {
	unit := func(x, y float64) float64 { return subStep }
	return []actCase{
		{"Exp", expMin, expMax, func(k *Kernels, out, x, _ []float32) { k.Exp(out, x) },
			func(x, _ float64) float64 { return exp64(x) }, unit},
		{"Sigmoid", -120, 120, func(k *Kernels, out, x, _ []float32) { k.Sigmoid(out, x) },
			func(x, _ float64) float64 { return sigmoid64(x) }, unit},
		{"SiLU", -120, 120, func(k *Kernels, out, x, _ []float32) { copy(out, x); k.SiLU(out) },
			func(x, _ float64) float64 { return silu64(x) }, unit},
		{"SiLUMul", -120, 120, func(k *Kernels, out, x, y []float32) { k.SiLUMul(out, x, y) },
			func(x, y float64) float64 { return silu64(x) * y },
			func(_, y float64) float64 { return subStep * (1 + math.Abs(y)) }},
		{"SigmoidMul", -120, 120, func(k *Kernels, out, x, y []float32) { copy(out, y); k.SigmoidMul(out, x) },
			func(x, y float64) float64 { return y * sigmoid64(x) },
			func(_, y float64) float64 { return subStep * (1 + math.Abs(y)) }},
	}
}

// TestActivationAccuracy checks every activation kernel of every set against
// the float64 reference over dense grids, the regime boundaries and special
// values, and logs the largest relative error seen.
func TestActivationAccuracy(t *testing.T) {
	grid := 1 << 19
	if testing.Short() {
		grid = 1 << 15
	}
	for _, c := range actCases() {
		r := rand.New(rand.NewPCG(11, 12))
		x := actInputs(r, c.lo, c.hi, grid)
		y := make([]float32, len(x)) // second operand: mostly ±[0.5, 2), some 0, ±Inf, NaN, huge
		for i := range y {
			y[i] = (1.5*r.Float32() + 0.5) * float32(1-2*r.IntN(2))
		}
		// Specials where x is about 60, so the reference is not Inf*0.
		at := grid * 3 / 4
		y[at], y[at+1], y[at+2], y[at+3] = 0, float32(math.Inf(1)), float32(math.NaN()), 1e30
		out := make([]float32, len(x))
		for _, k := range kernelSets(t) {
			c.run(k, out, x, y)
			worst, at := 0.0, 0
			bad := 0
			for i := range x {
				xi, yi := float64(x[i]), float64(y[i])
				rel, ok := actErr(out[i], c.want(xi, yi), c.floor(xi, yi))
				if !ok {
					if bad++; bad <= 5 {
						t.Errorf("%s %s(%g, %g) = %g, want %g", k.Name(), c.name, x[i], y[i], out[i], c.want(xi, yi))
					}
				}
				if rel > worst && math.Abs(c.want(xi, yi)) >= 0x1p-126 && !math.IsInf(rel, 0) {
					worst, at = rel, i
				}
			}
			if bad > 0 {
				t.Errorf("%s %s: %d of %d values out of tolerance", k.Name(), c.name, bad, len(x))
			}
			t.Logf("%-10s %-10s max relative error %.3g (%.2f × 2^-24) in the normal range at x=%g", k.Name(), c.name, worst, worst/0x1p-24, x[at])
		}
	}
}

// TestActivationLengths runs the activation kernels on every length 0..257
// at unaligned offsets, with guard bands around the output, and in place
// where the API allows it.
func TestActivationLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, k := range kernelSets(t) {
		for _, c := range actCases() {
			for n := 0; n <= 257; n++ {
				off := n % 4
				x := make([]float32, n)
				for i := range x {
					x[i] = (r.Float32()*2 - 1) * 20
				}
				y := offset(randF32(r, n), off+1)
				x = offset(x, off+2)
				buf, out := guarded(n + off)
				out = out[off:]
				what := fmt.Sprintf("%s %s n=%d", k.Name(), c.name, n)
				c.run(k, out, x, y)
				checkGuards(t, what, buf[off:])
				for i := range n {
					xi, yi := float64(x[i]), float64(y[i])
					if _, ok := actErr(out[i], c.want(xi, yi), c.floor(xi, yi)); !ok {
						t.Fatalf("%s: element %d: f(%g, %g) = %g, want %g", what, i, x[i], y[i], out[i], c.want(xi, yi))
					}
				}
				// The same in place: the result must not depend on the aliasing.
				got := append([]float32(nil), out...)
				a := append([]float32(nil), x...)
				b := append([]float32(nil), y...)
				switch c.name {
				case "Exp":
					k.Exp(a, a)
				case "Sigmoid":
					k.Sigmoid(a, a)
				case "SiLU":
					k.SiLU(a)
				case "SiLUMul":
					k.SiLUMul(a, a, b)
					b2 := append([]float32(nil), y...)
					k.SiLUMul(b2, x, b2)
					checkSame(t, what+" dst=up", b2, got)
				case "SigmoidMul":
					k.SigmoidMul(b, a)
					a = b
				}
				checkSame(t, what+" in place", a, got)
			}
		}
	}
}

func checkSame(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}

// TestActivationShortSlices checks that the kernels stop at the shortest slice.
func TestActivationShortSlices(t *testing.T) {
	for _, k := range kernelSets(t) {
		x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
		for _, n := range []int{0, 5, 16} {
			dst := make([]float32, 17)
			k.Exp(dst, x[:n])
			k.Sigmoid(dst[n:], x) // writes dst[n:] only
			k.SiLUMul(dst, x, x[:n])
			for i := range n {
				if want := exp32(x[i]); math.Abs(float64(dst[i]-silu32(x[i])*x[i])) > 1e-5*math.Abs(float64(silu32(x[i])*x[i])) || want == 0 {
					t.Fatalf("%s n=%d: element %d is %g", k.Name(), n, i, dst[i])
				}
			}
			g := make([]float32, 17)
			k.SigmoidMul(g, x[:n]) // g is all zero: stays zero
			for i, v := range g {
				if v != 0 {
					t.Fatalf("%s SigmoidMul wrote %g at %d", k.Name(), v, i)
				}
			}
		}
	}
}

// TestActivationNoAllocs checks that the activation kernels do not allocate.
func TestActivationNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := randF32(r, 100)
	y := randF32(r, 100)
	dst := make([]float32, 100)
	for _, k := range kernelSets(t) {
		calls := map[string]func(){
			"Exp":        func() { k.Exp(dst, x) },
			"Sigmoid":    func() { k.Sigmoid(dst, x) },
			"SiLU":       func() { k.SiLU(dst) },
			"SiLUMul":    func() { k.SiLUMul(dst, x, y) },
			"SigmoidMul": func() { k.SigmoidMul(dst, y) },
		}
		for name, f := range calls {
			if a := testing.AllocsPerRun(20, f); a != 0 {
				t.Errorf("%s %s: %v allocations per call", k.Name(), name, a)
			}
		}
	}
}

// TestActivationConstants checks that the constant table the generator writes
// into the assembly holds the float32 values of the constants in exp.go.
func TestActivationConstants(t *testing.T) {
	text, err := os.ReadFile("exp_avx2_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float32) uint32 { return math.Float32bits(v) }
	want := []uint32{signBit, f(expMin), f(expMax), f(expLog2e), f(-expLn2Hi), f(-expLn2Lo),
		f(expC0), f(expC1), f(expC2), f(expC3), f(expC4), f(expC5), f(1), expBias}
	var got []uint32
	for _, line := range strings.Split(string(text), "\n") {
		var off int
		var bits uint32
		if n, _ := fmt.Sscanf(line, "DATA actc<>+%d(SB)/4, $0x%x", &off, &bits); n == 2 && off%32 == 0 {
			got = append(got, bits)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("table has %d constants, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("constant %d: table %#08x, exp.go %#08x", i, got[i], want[i])
		}
	}
}
