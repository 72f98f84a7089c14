package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
)

// TestWeightReads checks that weights read back (through Embed) exactly as
// stored, for each dtype, below and above the size that keeps a float32 copy.
func TestWeightReads(t *testing.T) {
	b := New(Options{Threads: 2, NoAMXTiles: true})
	defer b.Close()
	readBack(t, b, 4)
	// bf16 weights in the AMX tile layout where the CPU has it.
	tiles := New(Options{Threads: 2})
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

// TestMatMulDecode checks the products of decode rows on a bf16 weight in
// the tile layout: the decode rows are the tile layout's FMA products and,
// with AMX, the others its tile products, bit for bit, whatever their
// number (without AMX, on the FMA tiles of AVX-512, every row is an FMA
// product); other weights multiply every row as MatMul does.
func TestMatMulDecode(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	if !b.tiles {
		t.Skip("bf16 weights are not in the tile layout on this CPU (no AVX-512)")
	}
	const rows, cols, n = 70, 96, 9
	data := make([]byte, rows*cols*2)
	w16 := make([]uint16, rows*cols)
	for i := range w16 {
		w16[i] = half.F32ToBF16(float32(i%389)/97 - 2)
		binary.LittleEndian.PutUint16(data[2*i:], w16[i])
	}
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(i%211)/53 - 1.5
	}
	wt, err := b.LoadWeight("w", compute.BF16, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	plain := New(Options{Threads: 2, NoAMXTiles: true})
	defer plain.Close()
	pw, err := plain.LoadWeight("w", compute.BF16, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	xb, _ := b.NewBuffer(n * cols)
	if err := b.Upload(xb, 0, x); err != nil {
		t.Fatal(err)
	}
	run := func(be *Backend, w compute.Weight, decode int) []float32 {
		dst, _ := be.NewBuffer(n * rows)
		be.MatMulDecode(dst, xb, w, n, decode)
		return Data(dst)
	}
	k := b.Kernels()
	wp := wt.(*weight).tiles
	fma := make([]float32, n*rows)
	if err := k.MatMulBF16TilesFMA(fma, rows, wp, rows, cols, x, n); err != nil {
		t.Fatal(err)
	}
	tiles := make([]float32, n*rows)
	xp := make([]uint16, asm.TileBF16InputLen(n, cols, asm.MaxTileParts))
	if err := k.PackTileBF16(xp, x, n, cols, asm.MaxTileParts, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := k.MatMulBF16Tiles(tiles, rows, wp, rows, cols, xp, n, asm.MaxTileParts); err != nil {
		t.Fatal(err)
	}
	for _, decode := range []int{0, 1, 4, n} {
		got := run(b, wt, decode)
		for i := range got {
			want := tiles[i]
			if i/rows < decode || !b.amx {
				want = fma[i]
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%d decode rows: element %d is %v, want %v", decode, i, got[i], want)
			}
		}
	}
	want := run(plain, pw, 0)
	for _, decode := range []int{1, n} {
		got := run(plain, pw, decode)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("row-major weight, %d decode rows: element %d is %v, MatMul's %v", decode, i, got[i], want[i])
			}
		}
	}
}

// TestLoadTable checks that a table (a weight only Embed reads) stays in
// the row-major layout on a backend that packs bf16 matrices for AMX
// tiles, and reads back as stored.
func TestLoadTable(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	const rows, cols = 40, 64
	data := make([]byte, rows*cols*2)
	for i := range rows * cols {
		binary.LittleEndian.PutUint16(data[2*i:], half.F32ToBF16(float32(i%301)/16-9))
	}
	wt, err := b.LoadTable("table", compute.BF16, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	if w := wt.(*weight); w.tiles != nil || w.u16 == nil {
		t.Fatal("the table was packed in the tile layout")
	}
	dst, _ := b.NewBuffer(2 * cols)
	b.Embed(dst, wt, []int32{rows - 1, 3})
	for j, r := range []int{rows - 1, 3} {
		for c := range cols {
			i := r*cols + c
			if got, want := Data(dst)[j*cols+c], half.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:])); got != want {
				t.Fatalf("row %d col %d: %v, stored %v", r, c, got, want)
			}
		}
	}
}

// TestNameSaysTilesOff checks that the backend's name says when a kernel
// set with AMX tiles runs without them.
func TestNameSaysTilesOff(t *testing.T) {
	for _, no := range []bool{false, true} {
		b := New(Options{Threads: 1, NoAMXTiles: no})
		off := strings.Contains(b.Name(), "AMX tiles off")
		if want := no && b.Kernels().TilesBF16(); off != want {
			t.Errorf("NoAMXTiles %v: name %q", no, b.Name())
		}
		b.Close()
	}
}

// TestAVX2OuterProductTiles checks that the AVX2 set repacks bf16
// weights for its outer-product tile kernel unless NoFMATiles says not
// to, and that the AVX-512 sets keep theirs.
func TestAVX2OuterProductTiles(t *testing.T) {
	k := asm.New(asm.Features{AVX2: true})
	for _, no := range []bool{false, true} {
		b := New(Options{Threads: 1, Kernels: k, NoFMATiles: no})
		if got, want := b.op, !no && k.TilesOP(); got != want || b.tiles != want {
			t.Errorf("%s, NoFMATiles %v: outer product %v, tiles %v, want %v", k.Name(), no, got, b.tiles, want)
		}
		b.Close()
	}
	if best := asm.Detect(); best.TilesFMA() {
		b := New(Options{Threads: 1, Kernels: best, NoAMXTiles: true})
		if b.op {
			t.Errorf("%s: the AVX-512 set runs the AVX2 outer-product kernel", best.Name())
		}
		b.Close()
	}
}
