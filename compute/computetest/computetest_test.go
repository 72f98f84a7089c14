package computetest

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// TestCPUAgainstCPU runs the suite with the reference as the backend under
// test: every case must pass.
func TestCPUAgainstCPU(t *testing.T) {
	Run(t, func(*testing.T) compute.Backend { return cpu.New(cpu.Options{Threads: 1}) })
}

// perturbing wraps a CPU backend and nudges the largest element of every
// download, as a subtly wrong backend would.
type perturbing struct{ *cpu.Backend }

func (p perturbing) Download(ctx context.Context, dst []float32, src compute.Buffer, off int) error {
	if err := p.Backend.Download(ctx, dst, src, off); err != nil {
		return err
	}
	best := 0
	for i, v := range dst {
		if math.Abs(float64(v)) > math.Abs(float64(dst[best])) {
			best = i
		}
	}
	if len(dst) > 0 {
		dst[best] += float32(1e-3*math.Abs(float64(dst[best])) + 1e-4)
	}
	return nil
}

func (p perturbing) Argmax(ctx context.Context, dst []int32, x compute.Buffer, dim int) error {
	if err := p.Backend.Argmax(ctx, dst, x, dim); err != nil {
		return err
	}
	dst[len(dst)-1] = (dst[len(dst)-1] + 1) % int32(dim)
	if dim == 1 {
		dst[len(dst)-1] = 1
	}
	return nil
}

// TestSuiteCatchesPerturbation checks that every case notices a backend
// whose results are off by 0.1% in one element.
func TestSuiteCatchesPerturbation(t *testing.T) {
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	dut := perturbing{cpu.New(cpu.Options{Threads: 1})}
	defer dut.Close()
	for i, c := range Cases() {
		e := &Env{Ref: ref, DUT: dut, Rng: rand.New(rand.NewPCG(uint64(i), 1)), Ctx: t.Context()}
		if err := c.Fn(e); err == nil {
			t.Errorf("%s: a perturbed backend passed", c.Name)
		}
	}
}

// droppingMatMul computes MatMul without the last input column, the kind of
// tail bug a tiled kernel has.
type droppingMatMul struct{ *cpu.Backend }

func (d droppingMatMul) MatMul(dst, x compute.Buffer, w compute.Weight, n int) {
	xs := cpu.Data(x)
	saved := make([]float32, n)
	for i := 0; i < n; i++ {
		saved[i] = xs[i*w.Cols()+w.Cols()-1]
		xs[i*w.Cols()+w.Cols()-1] = 0
	}
	d.Backend.MatMul(dst, x, w, n)
	for i := 0; i < n; i++ {
		xs[i*w.Cols()+w.Cols()-1] = saved[i]
	}
}

// TestMatMulToleranceCatchesDroppedTerm checks the tolerance is tight enough
// that losing one term of a 4096-long dot product fails.
func TestMatMulToleranceCatchesDroppedTerm(t *testing.T) {
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	dut := droppingMatMul{cpu.New(cpu.Options{Threads: 1})}
	defer dut.Close()
	e := &Env{Ref: ref, DUT: dut, Rng: rand.New(rand.NewPCG(7, 7)), Ctx: t.Context()}
	for _, dt := range dtypes {
		if err := e.matmulOne(dt, 5, 9, 4096); err == nil {
			t.Errorf("%v: MatMul missing its last column passed", dt)
		}
	}
}

// float64MatMul computes MatMul exactly in float64 and rounds once: a
// legitimately different summation that the tolerance must accept.
type float64MatMul struct{ *cpu.Backend }

func (f float64MatMul) MatMul(dst, x compute.Buffer, w compute.Weight, n int) {
	rows, cols := w.Rows(), w.Cols()
	xs, ds := cpu.Data(x), cpu.Data(dst)
	tmp, _ := f.Backend.NewBuffer(cols)
	one := cpu.Data(tmp)
	wrow := make([]float64, cols)
	for r := 0; r < rows; r++ {
		// Extract row r by multiplying unit vectors (exact for one term).
		for c := 0; c < cols; c++ {
			one[c] = 1
			tmpOut, _ := f.Backend.NewBuffer(rows)
			f.Backend.MatMul(tmpOut, tmp, w, 1)
			wrow[c] = float64(cpu.Data(tmpOut)[r])
			one[c] = 0
		}
		for i := 0; i < n; i++ {
			var s float64
			for c := 0; c < cols; c++ {
				s += wrow[c] * float64(xs[i*cols+c])
			}
			ds[i*rows+r] = float32(s)
		}
	}
}

// TestMatMulToleranceAcceptsOtherOrder checks that an exactly rounded
// result passes: the tolerance is not tuned to the reference's own order.
func TestMatMulToleranceAcceptsOtherOrder(t *testing.T) {
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	dut := float64MatMul{cpu.New(cpu.Options{Threads: 1})}
	defer dut.Close()
	e := &Env{Ref: ref, DUT: dut, Rng: rand.New(rand.NewPCG(8, 8)), Ctx: t.Context()}
	for _, sh := range [][3]int{{1, 3, 1000}, {2, 4, 257}} {
		if err := e.matmulOne(compute.BF16, sh[0], sh[1], sh[2]); err != nil {
			t.Error(err)
		}
	}
}
