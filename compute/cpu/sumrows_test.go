package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
)

// TestSumRows checks the backend's SumRows bit for bit against a plain loop
// over each row's terms in order (products rounded before their adds), on
// enough rows to be split among workers, with empty rows zeroed and rows
// after the result untouched.
func TestSumRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	be := New(Options{Threads: 3})
	defer be.Close()
	const rows, srcRows, dim = 300, 97, 67
	s := compute.RowSums{Start: []int32{0}}
	for range rows {
		for range rng.IntN(5) {
			s.Src = append(s.Src, int32(rng.IntN(srcRows)))
			s.Weight = append(s.Weight, float32(rng.NormFloat64()))
		}
		s.Start = append(s.Start, int32(len(s.Src)))
	}
	x := make([]float32, srcRows*dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	src, _ := be.NewBuffer(len(x))
	dst, _ := be.NewBuffer((rows + 1) * dim)
	d := Data(dst)
	for i := range d {
		d[i] = 7
	}
	copy(Data(src), x)
	be.SumRows(dst, src, dim, s)
	for r := range rows + 1 {
		for i := range dim {
			want := float32(7)
			if r < rows {
				want = 0
				for j := s.Start[r]; j < s.Start[r+1]; j++ {
					p := s.Weight[j] * x[int(s.Src[j])*dim+i]
					if j == s.Start[r] {
						want = p
					} else {
						want = want + p
					}
				}
			}
			if got := d[r*dim+i]; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("row %d element %d: %v, want %v", r, i, got, want)
			}
		}
	}
}

// TestSumRowsChecks checks that malformed term lists are refused.
func TestSumRowsChecks(t *testing.T) {
	for name, s := range map[string]compute.RowSums{
		"weights":   {Start: []int32{0, 1}, Src: []int32{0}},
		"start":     {Start: []int32{1, 1}, Src: []int32{0}, Weight: []float32{1}},
		"end":       {Start: []int32{0, 2}, Src: []int32{0}, Weight: []float32{1}},
		"order":     {Start: []int32{0, 2, 1, 2}, Src: []int32{0, 0}, Weight: []float32{1, 1}},
		"src range": {Start: []int32{0, 1}, Src: []int32{4}, Weight: []float32{1}},
		"negative":  {Start: []int32{0, 1}, Src: []int32{-1}, Weight: []float32{1}},
	} {
		if err := s.Check(4); err == nil {
			t.Errorf("%s: %+v accepted", name, s)
		}
	}
	if err := (compute.RowSums{Start: []int32{0, 0, 2}, Src: []int32{3, 0}, Weight: []float32{1, 2}}).Check(4); err != nil {
		t.Errorf("well-formed sums refused: %v", err)
	}
}

// TestSwiGLU checks SwiGLU bit for bit against SiLUMul of each row's two
// halves (the kernel asm tests against its pure-Go twin), on enough rows to
// be split among workers.
func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	be := New(Options{Threads: 3})
	defer be.Close()
	const n, width = 70, 96
	x, _ := be.NewBuffer(2 * n * width)
	for i := range Data(x) {
		Data(x)[i] = float32(rng.NormFloat64() * 3)
	}
	got, _ := be.NewBuffer(n * width)
	be.SwiGLU(got, x, n, width)
	gate, up, want := make([]float32, width), make([]float32, width), make([]float32, width)
	for r := range n {
		copy(gate, Data(x)[2*r*width:])
		copy(up, Data(x)[2*r*width+width:])
		be.k.SiLUMul(want, gate, up)
		for i := range width {
			if g := Data(got)[r*width+i]; math.Float32bits(g) != math.Float32bits(want[i]) {
				t.Fatalf("row %d element %d: %v, want %v", r, i, g, want[i])
			}
		}
	}
}
