package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
)

// TestWeightReads checks that weights read back (through Embed) exactly as
// stored, for each dtype, below and above the size that keeps a float32 copy.
func TestWeightReads(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	readBack(t, b, 4)
	// bf16 weights in the AMX tile layout where the CPU has it.
	tiles := New(Options{Threads: 2, AMXTiles: true})
	defer tiles.Close()
	readBack(t, tiles, 64)
}

// readBack loads weights of cols columns, below and above the size that
// keeps a float32 copy, and checks that Embed and element reads read them
// as stored.
func readBack(t *testing.T, b *Backend, cols int) {
	t.Helper()
	for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
		for _, rows := range []int{3, smallWeight/cols + 5} {
			want := make([]float32, rows*cols)
			data := make([]byte, rows*cols*dt.Size())
			for i := range want {
				v := float32(i%977)/64 - 7
				switch dt {
				case compute.BF16:
					u := half.F32ToBF16(v)
					want[i] = half.BF16ToF32(u)
					binary.LittleEndian.PutUint16(data[2*i:], u)
				case compute.F16:
					u := half.F32ToF16(v)
					want[i] = half.F16ToF32(u)
					binary.LittleEndian.PutUint16(data[2*i:], u)
				default:
					want[i] = v
					binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
				}
			}
			w, err := b.LoadWeight("w", dt, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]int32, rows)
			for i := range ids {
				ids[i] = int32(i)
			}
			dst, _ := b.NewBuffer(rows * cols)
			b.Embed(dst, w, ids)
			got := make([]float32, rows*cols)
			if err := b.Download(context.Background(), got, dst, 0); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%v %d×%d: element %d = %v, stored %v", dt, rows, cols, i, got[i], want[i])
				}
			}
			// Element reads (conv taps, gate parameters) read the same.
			for i := 0; i < len(want); i += 1 + len(want)/97 {
				if got := w.(*weight).at(i); got != want[i] {
					t.Fatalf("%v %d×%d: at(%d) = %v, stored %v", dt, rows, cols, i, got, want[i])
				}
			}
		}
	}
}
