//go:build cgo

package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// randomBlocks returns rows×cols values of dt as random blocks whose fp16
// scales are finite, about 1/64 (values of order 1).
func randomBlocks(rng *rand.Rand, dt compute.DType, rows, cols int) []byte {
	t := dt.Quant()
	data := make([]byte, rows*dt.RowBytes(cols))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var fields []int
	switch t {
	case quant.Q8_0:
		fields = []int{0}
	case quant.Q4_K, quant.Q5_K:
		fields = []int{0, 2}
	case quant.Q6_K:
		fields = []int{208}
	}
	for b := 0; b < len(data); b += t.BlockBytes() {
		for _, o := range fields {
			binary.LittleEndian.PutUint16(data[b+o:], half.F32ToF16(float32(rng.Float64()/64)))
		}
	}
	return data
}

// TestQuantLoadErrors checks that LoadWeight refuses quantized weights
// whose columns are not whole blocks or whose bytes are not whole rows,
// and that operations other than MatMul and Embed refuse quantized
// weights.
func TestQuantLoadErrors(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	for _, c := range []struct {
		dt         compute.DType
		rows, cols int
		bytes      int
		want       string
	}{
		{compute.Q8_0, 2, 48, 2 * 34, "not whole Q8_0 blocks"},
		{compute.Q4_K, 2, 128, 144, "not whole Q4_K blocks"},
		{compute.Q6_K, 2, 256, 210, "want 420"},
		{compute.Q5_K, 1, 256, 177, "want 176"},
		{compute.DType(99), 1, 256, 256, "unsupported dtype"},
	} {
		if _, err := b.LoadWeight("w", c.dt, c.rows, c.cols, make([]byte, c.bytes)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadWeight %v [%d, %d] of %d bytes: %v, want an error with %q", c.dt, c.rows, c.cols, c.bytes, err, c.want)
		}
	}
	w, err := b.LoadWeight("norm", compute.Q8_0, 1, 32, make([]byte, 34))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := b.NewBuffer(32)
	b.RMSNorm(x, x, w, 1, 32, 1e-6)
	if err := b.Sync(t.Context()); err == nil || !strings.Contains(err.Error(), "only for MatMul and Embed") {
		t.Errorf("RMSNorm with a Q8_0 weight: %v, want an error", err)
	}
}

// TestQuantMatMulLarge runs the quantized products at a width the
// conformance suite does not reach (4096 columns, 300 rows: a lane of the
// matrix-vector shader takes several K-quant blocks) on both shaders, and
// reports the largest error relative to the float64 product of the
// dequantized weights, over Σ|x·w|.
func TestQuantMatMulLarge(t *testing.T) {
	for _, tiled := range []bool{false, true} {
		b := newTestBackend(t, Options{})
		if tiled {
			b.tiledFrom = maxBatch + 1
		}
		rng := rand.New(rand.NewPCG(3, 4))
		const rows, cols = 300, 4096
		n := 3
		if tiled {
			n = 70
		}
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		xb, _ := b.NewBuffer(len(x))
		db, _ := b.NewBuffer(n * rows)
		if err := b.Upload(xb, 0, x); err != nil {
			t.Fatal(err)
		}
		for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q5_K, compute.Q6_K} {
			data := randomBlocks(rng, dt, rows, cols)
			wv := make([]float32, rows*cols)
			if err := quant.DequantizeRow(dt.Quant(), wv, data); err != nil {
				t.Fatal(err)
			}
			w, err := b.LoadWeight("w", dt, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			shader := "matvecq"
			if tiled {
				shader = "matmulq"
				if b.coopmat > 0 {
					shader = b.coopmatQShader
				}
			}
			if vw := w.(*weight); vw.f16 != (b.coopmat > 0) {
				t.Errorf("%v: takes the cooperative-matrix shader: %v, device has it: %v", dt, vw.f16, b.coopmat > 0)
			}
			b.MatMul(db, xb, w, n)
			got := make([]float32, n*rows)
			if err := b.Download(t.Context(), got, db, 0); err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := 0; i < n; i++ {
				for r := 0; r < rows; r++ {
					var want, mag float64
					for c := 0; c < cols; c++ {
						p := float64(x[i*cols+c]) * float64(wv[r*cols+c])
						want += p
						mag += math.Abs(p)
					}
					worst = max(worst, math.Abs(float64(got[i*rows+r])-want)/mag)
				}
			}
			// u·√K is 3.8e-6 for 4096 terms; float32 accumulation in a
			// tree or strided order stays well under it.
			t.Logf("%s %v n=%d [%d, %d]: max |err|/Σ|x·w| = %.3g", shader, dt, n, rows, cols, worst)
			if worst > 8*math.Sqrt(cols)/(1<<24) {
				t.Errorf("%s %v: max relative error %.3g", shader, dt, worst)
			}
		}
		b.Close()
	}
}

// BenchmarkMatMulQuant times MatMul on quantized weights (random blocks)
// like BenchmarkMatMul does bf16 ones; weightGB/s counts the blocks' bytes.
// scripts/gpu-check.sh tables the vulkan rows.
func BenchmarkMatMulQuant(b *testing.B) {
	for _, sh := range benchShapes {
		for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q6_K} {
			rng := rand.New(rand.NewPCG(1, 2))
			data := randomBlocks(rng, dt, sh.rows, sh.cols)
			x := make([]float32, sh.n*sh.cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for _, be := range []struct {
				name    string
				prefill bool
				opts    Options
			}{
				{"vulkan", false, Options{}},
				{"vulkan-tiled", true, Options{TiledFrom: maxBatch + 1, NoCooperativeMatrix: true}},
			} {
				if be.prefill && sh.n <= maxBatch {
					continue
				}
				b.Run(fmt.Sprintf("%s_%s/%s", sh.name, strings.ToLower(dt.String()), be.name), func(b *testing.B) {
					bk, err := New(be.opts)
					if err != nil {
						b.Skipf("no Vulkan device: %v", err)
					}
					defer bk.Close()
					if sh.gpu && bk.props.DeviceType == vk.PhysicalDeviceTypeCpu {
						b.Skip("9B-sized shape: GPUs only")
					}
					w, err := bk.LoadWeight("w", dt, sh.rows, sh.cols, data)
					if err != nil {
						b.Fatal(err)
					}
					timeMatMul(b, bk, w, len(data), x, sh.n)
				})
			}
		}
	}
}

// TestQuantFitsF16 checks the bound on dequantized values that lets a
// quantized weight take the cooperative-matrix shader.
func TestQuantFitsF16(t *testing.T) {
	put := func(data []byte, o int, f float32) { binary.LittleEndian.PutUint16(data[o:], half.F32ToF16(f)) }
	for _, c := range []struct {
		t      quant.Type
		d, min float32
		fits   bool
	}{
		{quant.Q8_0, 511, 0, true},   // 65408
		{quant.Q8_0, 512, 0, false},  // 65536
		{quant.Q8_0, -511, 0, true},  // magnitudes count
		{quant.Q4_K, 68, 12, true},   // 64260 + 756
		{quant.Q4_K, 68, 30, false},  // 64260 + 1890
		{quant.Q5_K, 33, 0, true},    // 64449
		{quant.Q5_K, 34, 0, false},   // 66402
		{quant.Q6_K, 15.98, 0, true}, // 65454
		{quant.Q6_K, 16, 0, false},   // 65536
		{quant.Q8_0, float32(math.Inf(1)), 0, false},
		{quant.Q6_K, float32(math.NaN()), 0, false},
	} {
		data := make([]byte, 3*c.t.BlockBytes())
		o := 0
		if c.t == quant.Q6_K {
			o = 208
		}
		for b := 0; b < 2; b++ { // small scales elsewhere
			put(data, b*c.t.BlockBytes()+o, 0.01)
		}
		blk := data[2*c.t.BlockBytes():]
		put(blk, o, c.d)
		if c.t == quant.Q4_K || c.t == quant.Q5_K {
			put(blk, 2, c.min)
		}
		if got := quantFitsF16(c.t, data); got != c.fits {
			t.Errorf("%v d=%g dmin=%g: quantFitsF16 = %v, want %v", c.t, c.d, c.min, got, c.fits)
		}
	}
}

// TestQuantCoopmatFallback gives a device with cooperative matrices a Q8_0
// weight with a value beyond f16's range: it must take the portable tiled
// shader and still multiply correctly.
func TestQuantCoopmatFallback(t *testing.T) {
	b := newCoopmatBackend(t)
	defer b.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	const n, rows, cols = 9, 16, 64
	data := randomBlocks(rng, compute.Q8_0, rows, cols)
	binary.LittleEndian.PutUint16(data[5*34:], half.F32ToF16(1000)) // block 5: |values| up to 128000
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	got := coopmatProduct(t, t.Context(), b, "Q8_0 beyond f16", compute.Q8_0, data, x, n, rows, cols, false)
	wv := make([]float32, rows*cols)
	if err := quant.DequantizeRow(quant.Q8_0, wv, data); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		for r := 0; r < rows; r++ {
			var want, mag float64
			for c := 0; c < cols; c++ {
				p := float64(x[i*cols+c]) * float64(wv[r*cols+c])
				want, mag = want+p, mag+math.Abs(p)
			}
			if d := math.Abs(float64(got[i*rows+r]) - want); d > 8*(math.Sqrt(cols)+4)*mag/(1<<24) {
				t.Fatalf("dst[%d, %d] = %g, want %g", i, r, got[i*rows+r], want)
			}
		}
	}
}
