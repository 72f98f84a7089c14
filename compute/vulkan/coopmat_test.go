//go:build cgo

package vulkan

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/computetest"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/internal/half"
)

// envRequireCoopmat, set to 1 where the device must have
// VK_KHR_cooperative_matrix (CI runs these tests on a Mesa lavapipe that
// has it), turns the skips of the cooperative-matrix tests into failures.
const envRequireCoopmat = "GOVINFER_REQUIRE_COOPMAT"

// newCoopmatBackend opens a backend that runs every product of more than
// 8 inputs on the cooperative-matrix shader, skipping (or failing, under
// GOVINFER_REQUIRE_COOPMAT=1) where the device lacks it.
func newCoopmatBackend(t *testing.T) *Backend {
	t.Helper()
	b := newTestBackend(t, Options{})
	if b.coopmat == 0 {
		b.Close()
		if os.Getenv(envRequireCoopmat) == "1" {
			t.Fatalf("%s=1 but the device has no usable VK_KHR_cooperative_matrix", envRequireCoopmat)
		}
		t.Skip("device has no usable VK_KHR_cooperative_matrix (scripts/vk-sysroot.sh makes a lavapipe that has it)")
	}
	b.tiledFrom = maxBatch + 1
	return b
}

func TestBF16FitsF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fits := func(data []byte) bool {
		for i := 0; i+2 <= len(data); i += 2 {
			f := half.BF16ToF32(binary.LittleEndian.Uint16(data[i:]))
			if math.IsNaN(float64(f)) || math.Abs(float64(f)) > 65504 {
				return false
			}
		}
		return true
	}
	edges := []uint16{0, 0x8000, 0x3f80, 0x477f, 0xc77f, 0x4780, 0xc780, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0xffff, 0x0001}
	for n := 0; n <= 41; n++ { // the 32-byte blocks, 8-byte words and the tail
		for _, e := range edges {
			for pos := 0; pos < n; pos++ {
				data := make([]byte, 2*n+1) // an odd trailing byte is ignored
				for i := 0; i < n; i++ {
					binary.LittleEndian.PutUint16(data[2*i:], uint16(rng.IntN(0x4780))|uint16(rng.IntN(2))<<15)
				}
				binary.LittleEndian.PutUint16(data[2*pos:], e)
				if got, want := bf16FitsF16(data), fits(data); got != want {
					t.Fatalf("n=%d value %#04x at %d: bf16FitsF16 = %v, want %v", n, e, pos, got, want)
				}
			}
		}
	}
}

// TestConformanceCoopmat runs the suite with the cooperative-matrix shader
// for every f16 and bf16 product of more than 8 inputs.
func TestConformanceCoopmat(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend { return newCoopmatBackend(t) })
}

// TestCoopmatScaling multiplies input rows of very different magnitudes,
// including all-zero rows and rows dominated by one element, which the
// per-row scaling of the f16 halves must handle, and a bf16 weight beyond
// f16's range, which must fall back to the portable shader.
func TestCoopmatScaling(t *testing.T) {
	b := newCoopmatBackend(t)
	defer b.Close()
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	rowScales := []float64{1, 0, 1e-30, 1e-6, 3e4, 1e8, 1e30, -1}
	for _, sh := range [][3]int{{9, 16, 16}, {64, 64, 32}, {70, 129, 33}, {131, 67, 1000}, {200, 7, 47}} {
		for _, dt := range []compute.DType{compute.BF16, compute.F16} {
			for _, big := range []bool{false, true} {
				if big && dt != compute.BF16 {
					continue
				}
				n, rows, cols := sh[0], sh[1], sh[2]
				name := fmt.Sprintf("%v n=%d [%d, %d] beyond-f16=%v", dt, n, rows, cols, big)
				data := make([]byte, rows*cols*2)
				wv := make([]float64, rows*cols)
				for i := range wv {
					var h uint16
					if dt == compute.BF16 {
						h = half.F32ToBF16(float32(rng.NormFloat64() * 0.5))
						wv[i] = float64(half.BF16ToF32(h))
					} else {
						h = half.F32ToF16(float32(rng.NormFloat64() * 0.5))
						wv[i] = float64(half.F16ToF32(h))
					}
					binary.LittleEndian.PutUint16(data[2*i:], h)
				}
				if big {
					h := half.F32ToBF16(-7e4)
					binary.LittleEndian.PutUint16(data[2*(rows*cols/2):], h)
					wv[rows*cols/2] = float64(half.BF16ToF32(h))
				}
				x := make([]float32, n*cols)
				for i := 0; i < n; i++ {
					s := rowScales[i%len(rowScales)]
					spike := i%len(rowScales) == len(rowScales)-1
					for c := 0; c < cols; c++ {
						if spike {
							// One element 1e6 times the others.
							s = 1e-3
							if c == cols/3 {
								s = 1e3
							}
						}
						x[i*cols+c] = float32(rng.NormFloat64() * s)
					}
				}
				got := coopmatProduct(t, ctx, b, name, dt, data, x, n, rows, cols, !big)
				want := coopmatProduct(t, ctx, ref, name, dt, data, x, n, rows, cols, false)
				for i := 0; i < n; i++ {
					for r := 0; r < rows; r++ {
						var mag float64
						for c := 0; c < cols; c++ {
							mag += math.Abs(float64(x[i*cols+c]) * wv[r*cols+c])
						}
						tol := 8 * (math.Sqrt(float64(cols)) + 4) * mag / (1 << 24)
						g, w := float64(got[i*rows+r]), float64(want[i*rows+r])
						if math.Abs(g-w) > tol || math.IsNaN(g) != math.IsNaN(w) {
							t.Fatalf("%s: dst[%d, %d] = %g, want %g (tolerance %g)", name, i, r, g, w, tol)
						}
					}
				}
			}
		}
	}
}

// coopmatProduct computes x · wᵀ on be; on the Vulkan backend it also
// checks whether the weight takes the cooperative-matrix shader.
func coopmatProduct(t *testing.T, ctx context.Context, be compute.Backend, name string, dt compute.DType, data []byte, x []float32, n, rows, cols int, wantF16 bool) []float32 {
	t.Helper()
	w, err := be.LoadWeight("w", dt, rows, cols, append([]byte(nil), data...))
	if err != nil {
		t.Fatalf("%s: LoadWeight: %v", name, err)
	}
	if vw, ok := w.(*weight); ok && vw.f16 != wantF16 {
		t.Fatalf("%s: weight takes the cooperative-matrix shader: %v, want %v", name, vw.f16, wantF16)
	}
	xb, err := be.NewBuffer(len(x))
	if err != nil {
		t.Fatal(err)
	}
	db, err := be.NewBuffer(n * rows)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free(xb)
	defer be.Free(db)
	if err := be.Upload(xb, 0, x); err != nil {
		t.Fatal(err)
	}
	be.MatMul(db, xb, w, n)
	out := make([]float32, n*rows)
	if err := be.Download(ctx, out, db, 0); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// BenchmarkBF16FitsF16 measures the range check LoadWeight runs over bf16
// weights on devices with cooperative matrices (it reads every byte the
// upload copies).
func BenchmarkBF16FitsF16(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := 0; i < len(data); i += 2 {
		binary.LittleEndian.PutUint16(data[i:], 0x3c00|uint16(i&0x3ff))
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if !bf16FitsF16(data) {
			b.Fatal("in-range data reported out of range")
		}
	}
}
