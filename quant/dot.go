package quant

import "fmt"

// The float-activation dot products below are the Go twins of the assembly
// kernels: a weight row in a block format times a float32 activation vector.
//
// Semantics, which a kernel must reproduce to within float32 reassociation:
//
//   - Each weight is dequantized to exactly the float32 DequantizeRow gives.
//   - Its product with the activation is rounded to float32 (no FMA).
//   - The products go to 8 float32 partial sums: element i of the row (counted
//     from the row's start, across blocks) is added to lane i mod 8, the lanes
//     receiving their elements in increasing i. That is one 8-wide float
//     register accumulating the row in order, as an AVX2 kernel does.
//   - The lanes are reduced as a 256-bit register is: s = ((l0+l4)+(l2+l6)) +
//     ((l1+l5)+(l3+l7)).
//
// A kernel that uses FMA, more registers, or another reduction order gives a
// different rounding; the tests bound how far that can be: the twins are
// checked against a float64 dot of the dequantized row.

// lanes is the 8-lane float32 accumulator of the dot twins.
type lanes [8]float32

// add accumulates w[i]·x[i] for a run of elements that starts at a multiple
// of 8 in the row (every block does).
func (a *lanes) add(w, x []float32) {
	x = x[:len(w)]
	for i := 0; i+8 <= len(w); i += 8 {
		a[0] += float32(w[i] * x[i])
		a[1] += float32(w[i+1] * x[i+1])
		a[2] += float32(w[i+2] * x[i+2])
		a[3] += float32(w[i+3] * x[i+3])
		a[4] += float32(w[i+4] * x[i+4])
		a[5] += float32(w[i+5] * x[i+5])
		a[6] += float32(w[i+6] * x[i+6])
		a[7] += float32(w[i+7] * x[i+7])
	}
}

func (a *lanes) sum() float32 {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// DotQ8_0 returns the dot product of a row of Q8_0 blocks w with x, where
// len(w) is Q8_0.RowBytes(len(x)); it panics otherwise. Accumulation order:
// see the package's dot-product semantics above (8 lanes, element i in lane
// i mod 8).
func DotQ8_0(w []byte, x []float32) float32 {
	checkDot(Q8_0, w, len(x))
	var acc lanes
	var buf [q80Block]float32
	for b := 0; b < len(x)/q80Block; b++ {
		dequantQ8_0(&buf, w[b*q80Bytes:])
		acc.add(buf[:], x[b*q80Block:])
	}
	return acc.sum()
}

// DotQ4K returns the dot product of a row of Q4_K blocks w with x, where
// len(w) is Q4_K.RowBytes(len(x)); it panics otherwise. Each weight is
// (d·sc)·q − dmin·m as DequantizeRow computes it; accumulation as DotQ8_0.
func DotQ4K(w []byte, x []float32) float32 {
	checkDot(Q4_K, w, len(x))
	var acc lanes
	var buf [qkK]float32
	for b := 0; b < len(x)/qkK; b++ {
		dequantQ4K(&buf, w[b*q4KBytes:])
		acc.add(buf[:], x[b*qkK:])
	}
	return acc.sum()
}

// DotQ6K returns the dot product of a row of Q6_K blocks w with x, where
// len(w) is Q6_K.RowBytes(len(x)); it panics otherwise. Each weight is
// (d·sc)·(q−32) as DequantizeRow computes it; accumulation as DotQ8_0.
func DotQ6K(w []byte, x []float32) float32 {
	checkDot(Q6_K, w, len(x))
	var acc lanes
	var buf [qkK]float32
	for b := 0; b < len(x)/qkK; b++ {
		dequantQ6K(&buf, w[b*q6KBytes:])
		acc.add(buf[:], x[b*qkK:])
	}
	return acc.sum()
}

// Dot returns the dot product of a row of t blocks w with x (DotQ8_0,
// DotQ4K or DotQ6K; Q5_K by the same rules). It panics when t is not a
// block format or len(w) is not t.RowBytes(len(x)).
func Dot(t Type, w []byte, x []float32) float32 {
	switch t {
	case Q8_0:
		return DotQ8_0(w, x)
	case Q4_K:
		return DotQ4K(w, x)
	case Q6_K:
		return DotQ6K(w, x)
	case Q5_K:
		checkDot(Q5_K, w, len(x))
		var acc lanes
		var buf [qkK]float32
		for b := 0; b < len(x)/qkK; b++ {
			dequantQ5K(&buf, w[b*q5KBytes:])
			acc.add(buf[:], x[b*qkK:])
		}
		return acc.sum()
	}
	panic(fmt.Sprintf("quant: Dot: no block format %v", t))
}

// MatVec computes dst = W·x for a rows×cols weight matrix W stored as rows
// consecutive rows of t blocks (rows·t.RowBytes(cols) bytes): dst[r] is
// Dot(t, row r, x). len(dst) must be rows and len(x) cols; it panics
// otherwise.
func MatVec(t Type, dst []float32, w []byte, rows, cols int, x []float32) {
	if !t.Fits(cols) || len(dst) != rows || len(x) != cols || len(w) != rows*t.RowBytes(cols) {
		panic(fmt.Sprintf("quant: MatVec %v: %d×%d matrix in %d bytes, dst %d, x %d", t, rows, cols, len(w), len(dst), len(x)))
	}
	rb := t.RowBytes(cols)
	for r := range dst {
		dst[r] = Dot(t, w[r*rb:(r+1)*rb], x)
	}
}

func checkDot(t Type, w []byte, n int) {
	if !t.Fits(n) || len(w) != t.RowBytes(n) {
		panic(fmt.Sprintf("quant: %v dot of %d weight bytes with %d values", t, len(w), n))
	}
}
