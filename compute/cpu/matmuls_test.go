package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// TestMatMuls checks that a batch of products (MatMuls) gives every
// element of each part bit for bit as MatMulDecode of that part alone, and
// touches nothing else of the output buffers: quantized weights packed and
// in GGML's layout, float weights, parts that share their inputs (a
// mixture's gate and up projections) and parts at offsets, on each kernel
// set and thread count.
func TestMatMuls(t *testing.T) {
	sets := map[string]*asm.Kernels{"generic": asm.Generic(), "avx2": asm.New(asm.Features{AVX2: true}), "best": asm.Detect()}
	for name, k := range sets {
		for _, threads := range []int{1, 2, 3} {
			for _, noPack := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/threads=%d/nopack=%v", name, threads, noPack), func(t *testing.T) {
					be := New(Options{Threads: threads, Kernels: k, NoPackedQuant: noPack})
					defer be.Close()
					checkMatMuls(t, be, rand.New(rand.NewPCG(uint64(threads), 7)))
				})
			}
		}
	}
}

func checkMatMuls(t *testing.T, be *Backend, r *rand.Rand) {
	t.Helper()
	const cols, width, odd = 512, 256, 40
	// Eight "experts" of varied formats, each a gate and an up [width, cols]
	// and a down [cols, width].
	types := []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q6_K, compute.Q5_K, compute.BF16, compute.F32, compute.Q8_0, compute.Q4_K}
	weight := func(dt compute.DType, rows, cols int) compute.Weight {
		var data []byte
		if dt.Quant() != quant.Keep {
			data = benchQuantWeight(t, r, dt, rows, cols)
		} else {
			data = make([]byte, rows*cols*dt.Size())
			for i := range rows * cols {
				v := float32(r.NormFloat64())
				if dt == compute.BF16 {
					b := math.Float32bits(v) >> 16
					data[2*i], data[2*i+1] = byte(b), byte(b>>8)
				} else {
					b := math.Float32bits(v)
					data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
				}
			}
		}
		w, err := be.LoadWeight("w", dt, rows, cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// And a [40, cols] of each, whose last group of 16 rows is partial.
	gates, ups, downs, odds := make([]compute.Weight, len(types)), make([]compute.Weight, len(types)), make([]compute.Weight, len(types)), make([]compute.Weight, len(types))
	for i, dt := range types {
		gates[i], ups[i], downs[i], odds[i] = weight(dt, width, cols), weight(dt, width, cols), weight(dt, cols, width), weight(dt, odd, cols)
	}
	buf := func(n int) compute.Buffer {
		b, err := be.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range Data(b) {
			Data(b)[i] = float32(r.NormFloat64())
		}
		return b
	}
	for _, ns := range [][]int{{1, 1, 1, 1, 1, 1, 1, 1}, {3, 1, 2, 9, 1, 4, 2, 1}, {1}, {17, 5}} {
		total := 0
		for _, n := range ns {
			total += n
		}
		x := buf((total + 3) * cols)
		gate, up := buf((total+2)*width), buf((total+2)*width)
		down := buf((total + 2) * cols)
		extra := buf((total + 2) * odd)
		// First, one row where the second product's rows start: an
		// input of other rows from the same place.
		first := buf(odd)
		parts := []compute.MatMulPart{{Dst: first, X: x, XOff: 2 * cols, W: odds[0], N: 1}}
		var partsDown []compute.MatMulPart
		at := 0
		for i, n := range ns {
			// Lone rows read one shared row of x, as a decode step's
			// experts do; the others rows of their own.
			xoff := (at + 2) * cols
			if n == 1 {
				xoff = cols
			}
			decode := min(n, i%3)
			parts = append(parts,
				compute.MatMulPart{Dst: gate, DstOff: (at + 1) * width, X: x, XOff: xoff, W: gates[i], N: n, Decode: decode},
				compute.MatMulPart{Dst: up, DstOff: (at + 1) * width, X: x, XOff: xoff, W: ups[i], N: n, Decode: decode})
			parts = append(parts, compute.MatMulPart{Dst: extra, DstOff: (at + 1) * odd, X: x, XOff: xoff, W: odds[i], N: n, Decode: decode})
			partsDown = append(partsDown, compute.MatMulPart{Dst: down, DstOff: (at + 1) * cols, X: gate, XOff: (at + 1) * width, W: downs[i], N: n, Decode: decode})
			at += n
		}
		for _, batch := range [][]compute.MatMulPart{parts, partsDown} {
			// The reference: each part alone into a buffer of its own,
			// copied over a snapshot of the destination.
			want := map[compute.Buffer][]float32{}
			for _, p := range batch {
				if want[p.Dst] == nil {
					want[p.Dst] = append([]float32(nil), Data(p.Dst)...)
				}
			}
			for _, p := range batch {
				rows := p.W.Rows()
				in, _ := be.NewBuffer(p.N * p.W.Cols())
				copy(Data(in), Data(p.X)[p.XOff:])
				out, _ := be.NewBuffer(p.N * rows)
				be.MatMulDecode(out, in, p.W, p.N, p.Decode)
				copy(want[p.Dst][p.DstOff:], Data(out))
			}
			be.MatMuls(batch)
			for dst, w := range want {
				for i, v := range Data(dst) {
					if math.Float32bits(v) != math.Float32bits(w[i]) {
						t.Fatalf("rows %v: element %d is %v, alone %v", ns, i, v, w[i])
					}
				}
			}
		}
	}
}
