package cpu

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

var _ compute.Packer = (*Backend)(nil)

// packCase is a weight of the Packer tests: its dtype and shape, and its
// stored bytes.
type packCase struct {
	dt         compute.DType
	rows, cols int
	data       []byte
}

// packCases returns bf16 weights (small ones keeping a float32 copy, a
// group of rows short, many groups) and Q8_0, Q4_K and Q6_K ones.
func packCases(t *testing.T) []packCase {
	t.Helper()
	var cs []packCase
	for _, s := range []struct{ rows, cols int }{{3, 64}, {21, 96}, {700, 128}, {1000, 2048}} {
		data := make([]byte, 2*s.rows*s.cols)
		for i := range s.rows * s.cols {
			binary.LittleEndian.PutUint16(data[2*i:], half.F32ToBF16(float32(i%389)/97-2))
		}
		cs = append(cs, packCase{compute.BF16, s.rows, s.cols, data})
	}
	for _, q := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		const rows, cols = 37, 512
		dt, _ := compute.QuantDType(q)
		data := make([]byte, rows*q.RowBytes(cols))
		row := make([]float32, cols)
		for r := range rows {
			for c := range row {
				row[c] = float32((r*cols+c)%211)/53 - 2
			}
			if err := quant.QuantizeRow(q, data[r*q.RowBytes(cols):(r+1)*q.RowBytes(cols)], row); err != nil {
				t.Fatal(err)
			}
		}
		cs = append(cs, packCase{dt, rows, cols, data})
	}
	return cs
}

// product returns MatMul of n inputs by w and the rows Embed reads of it.
func product(t *testing.T, b *Backend, w compute.Weight, n int) []float32 {
	t.Helper()
	x := make([]float32, n*w.Cols())
	for i := range x {
		x[i] = float32(i%97)/31 - 1.5
	}
	xb, _ := b.NewBuffer(len(x))
	if err := b.Upload(xb, 0, x); err != nil {
		t.Fatal(err)
	}
	dst, _ := b.NewBuffer(n * w.Rows())
	b.MatMul(dst, xb, w, n)
	ids := []int32{0, int32(w.Rows() - 1)}
	rows, _ := b.NewBuffer(2 * w.Cols())
	b.Embed(rows, w, ids)
	return append(Data(dst), Data(rows)...)
}

// TestPackerMatchesLoadWeight checks that a weight packed by Pack into
// bytes that held anything, and loaded by LoadPacked, multiplies and reads
// bit for bit as LoadWeight's, from stored bytes on a 2-byte boundary and
// off it; and that weights the kernels read as stored are not packed.
func TestPackerMatchesLoadWeight(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	plain := New(Options{Threads: 2, NoAMXTiles: true, NoFMATiles: true, NoPackedQuant: true})
	defer plain.Close()
	for _, c := range packCases(t) {
		layout, size := b.Packing(c.dt, c.rows, c.cols)
		if layout == "" {
			t.Logf("%v %d×%d: not packed with the %s kernels", c.dt, c.rows, c.cols, b.Kernels().Name())
			continue
		}
		if l, _ := plain.Packing(c.dt, c.rows, c.cols); l != "" {
			t.Fatalf("%v: packed (%s) with the tiles and the packed blocks off", c.dt, l)
		}
		want, err := b.LoadWeight("w", c.dt, c.rows, c.cols, c.data)
		if err != nil {
			t.Fatal(err)
		}
		wantOut := product(t, b, want, 5)
		for _, off := range []int{0, 1} {
			data := append(make([]byte, off, off+len(c.data)), c.data...)[off:]
			packed := make([]byte, size)
			for i := range packed {
				packed[i] = 0xA5
			}
			if err := b.Pack(context.Background(), packed, c.dt, c.rows, c.cols, data); err != nil {
				t.Fatal(err)
			}
			got, err := b.LoadPacked("w", c.dt, c.rows, c.cols, packed)
			if err != nil {
				t.Fatal(err)
			}
			gotOut := product(t, b, got, 5)
			for i := range wantOut {
				if math.Float32bits(gotOut[i]) != math.Float32bits(wantOut[i]) {
					t.Fatalf("%v %d×%d (%s), data %d bytes off: value %d is %v, LoadWeight's %v", c.dt, c.rows, c.cols, layout, off, i, gotOut[i], wantOut[i])
				}
			}
		}
		if _, err := b.LoadPacked("w", c.dt, c.rows, c.cols, make([]byte, size-1)); err == nil {
			t.Fatalf("%v: a short packed weight was loaded", c.dt)
		}
	}
}

// TestPackCancelled checks that Pack stops with the context's error.
func TestPackCancelled(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	c := packCases(t)[3]
	layout, size := b.Packing(c.dt, c.rows, c.cols)
	if layout == "" {
		t.Skip("bf16 weights are not packed on this CPU")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Pack(ctx, make([]byte, size), c.dt, c.rows, c.cols, c.data); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pack with a cancelled context: %v", err)
	}
}

// TestLoadTableQuantized checks that a quantized table (a weight only
// Embed reads) stays in GGML's layout, where a matrix would be packed.
func TestLoadTableQuantized(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	c := packCases(t)[4] // Q8_0
	if l, _ := b.Packing(c.dt, c.rows, c.cols); l == "" {
		t.Skip("Q8_0 weights are not packed with these kernels")
	}
	wt, err := b.LoadTable("table", c.dt, c.rows, c.cols, c.data)
	if err != nil {
		t.Fatal(err)
	}
	if w := wt.(*weight); w.packed != nil || w.q == nil {
		t.Fatal("the table was packed")
	}
	mat, err := b.LoadWeight("table", c.dt, c.rows, c.cols, c.data)
	if err != nil {
		t.Fatal(err)
	}
	got, want := product(t, b, wt, 1), product(t, b, mat, 1)
	for i := c.rows; i < len(got); i++ { // the rows Embed read
		if got[i] != want[i] {
			t.Fatalf("embedded value %d is %v, the packed matrix's %v", i-c.rows, got[i], want[i])
		}
	}
}
