package main

import "fmt"

// The GemmF32 tiles: C (+)= A·B on float32 as outer products. A tile holds
// gemmRows rows of C by a few vectors of columns in registers; each step p
// loads one row of B (the tile's columns) and, per row of the tile, one
// element of A broadcast to every lane, and adds their product to the row's
// accumulators with a fused multiply-add. Every element of C is therefore one
// chain of fused multiply-adds in increasing p, started from C (or zero):
// the same chain, bit for bit, in every kernel set and in the Go twin
// (gemmF32Go in package asm), whatever the tile and the blocking.
//
// A is read through two strides (element (i, p) at a + i·rsa + p·csa), so
// the same tile multiplies by A or by Aᵀ held row-major: attention uses it
// for K·Qᵀ (A the key rows in the cache) and for P·V (A the transposed
// softmax numerators), with no copy of the caches.

// gemmRows is the most rows of a tile; a kernel is emitted for each row
// count 1..gemmRows.
const gemmRows = 6

// gemmPrefetchRows is the most rows of an AVX-512 tile that prefetches B
// eight steps ahead. Tiles of few rows do too little arithmetic per row of
// B to hide its latency: decode attention sums the value rows of one KV
// head's 4 query heads on them (BenchmarkCausalAttention pos=4096 N=1, 9B
// widths, 2 threads, alternating: 5.2-5.6 -> 4.5-4.6 ms). In 6-row tiles, fed from the
// L1 cache, the prefetches only take issue slots (BenchmarkGemmF32, one
// thread: 5-15% slower).
const gemmPrefetchRows = 4

// gemmDoc is the shared contract of the tile kernels.
func gemmDoc(name string, cols int, masked bool) string {
	s := fmt.Sprintf("func %s(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)\n"+
		"For i < mr (the kernel's row count) and j < %d: c[i*ldc+j] = c0 + sum_{p<k} a[i*rsa+p*csa]*b[p*ldb+j],\n"+
		"one chain of fused multiply-adds in increasing p from c0 = acc != 0 ? c[i*ldc+j] : 0.\n"+
		"Requires k >= 1.", name, cols)
	if masked {
		s += " Vector v of the columns (16 lanes) reads and writes only the lanes set\n" +
			"in bits 16v..16v+15 of masks."
	} else {
		s += " masks is unused."
	}
	return s
}

// x86GemmRow returns the memory operand of row r (< gemmRows) of a tile whose
// rows 0-2 start at base0 and rows 3-5 at base3, stride in the register st.
func x86GemmRow(r int, base0, base3, st string) string {
	base := base0
	if r >= 3 {
		base, r = base3, r-3
	}
	if r == 0 {
		return fmt.Sprintf("(%s)", base)
	}
	return fmt.Sprintf("(%s)(%s*%d)", base, st, r)
}

// x86Gemm emits the tile of mr rows: on AVX-512 four vectors (64 columns)
// under the opmasks K1-K4 (with mr <= gemmPrefetchRows prefetching B eight
// rows ahead), accumulators Z0-Z23 (row r, vector v in Z(4r+v)),
// B in Z24-Z27, broadcasts in Z28-Z29; on AVX2 two vectors (16 columns),
// accumulators Y0-Y11, B in Y12-Y13, broadcasts in Y14-Y15. Registers: DI
// and R12 point at C rows 0 and 3 (stride DX), SI and R10 at A rows 0 and 3
// (stride R8, step R9), BX at the row of B (step R11), CX counts the steps.
func x86Gemm(g *gen, a x86, mr int) {
	z := a.reg == "Z"
	nv := 2
	if z {
		nv = 4
	}
	name := fmt.Sprintf("gemmF32%sx%d", a.name, mr)
	g.text(name, "$0-80", gemmDoc(name, nv*a.lanes, z))
	g.l("MOVQ c+0(FP), DI")
	g.l("MOVQ ldc+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ a+16(FP), SI")
	g.l("MOVQ rsa+24(FP), R8")
	g.l("SHLQ $2, R8")
	g.l("MOVQ csa+32(FP), R9")
	g.l("SHLQ $2, R9")
	g.l("MOVQ b+40(FP), BX")
	g.l("MOVQ ldb+48(FP), R11")
	g.l("SHLQ $2, R11")
	g.l("MOVQ k+56(FP), CX")
	if mr > 3 {
		g.l("LEAQ (SI)(R8*2), R10")
		g.l("ADDQ R8, R10")
		g.l("LEAQ (DI)(DX*2), R12")
		g.l("ADDQ DX, R12")
	}
	mask := func(v int) string {
		if z {
			return fmt.Sprintf("K%d, ", v+1)
		}
		return ""
	}
	if z {
		g.l("MOVQ masks+64(FP), AX")
		for v := range nv {
			if v > 0 {
				g.l("SHRQ $16, AX")
			}
			g.l("KMOVW AX, K%d", v+1)
		}
	}
	acc := func(r, v int) string { return a.r(nv*r + v) }
	load := "VMOVUPS"
	if z {
		load = "VMOVUPS.Z"
	}
	g.l("CMPQ acc+72(FP), $0")
	g.l("JEQ zero")
	for r := range mr {
		row := x86GemmRow(r, "DI", "R12", "DX")
		for v := range nv {
			g.l("%s %d%s, %s%s", load, v*4*a.lanes, row, mask(v), acc(r, v))
		}
	}
	g.l("JMP loop")
	g.label("zero")
	for r := range mr {
		for v := range nv {
			a.zero(g, acc(r, v))
		}
	}
	bReg := func(v int) string { return a.r(nv*gemmRows + v) }
	bcast := func(r int) string { return a.r(nv*gemmRows + nv + r%2) }
	g.label("loop")
	for v := range nv {
		g.l("%s %d(BX), %s%s", load, v*4*a.lanes, mask(v), bReg(v))
		if z && mr <= gemmPrefetchRows {
			g.l("PREFETCHT0 %d(BX)(R11*8)", v*4*a.lanes)
		}
	}
	for r := range mr {
		g.l("VBROADCASTSS %s, %s", x86GemmRow(r, "SI", "R10", "R8"), bcast(r))
		for v := range nv {
			g.l("VFMADD231PS %s, %s, %s", bReg(v), bcast(r), acc(r, v))
		}
	}
	g.l("ADDQ R9, SI")
	if mr > 3 {
		g.l("ADDQ R9, R10")
	}
	g.l("ADDQ R11, BX")
	g.l("DECQ CX")
	g.l("JNZ loop")
	for r := range mr {
		row := x86GemmRow(r, "DI", "R12", "DX")
		for v := range nv {
			g.l("VMOVUPS %s, %s%d%s", acc(r, v), mask(v), v*4*a.lanes, row)
		}
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86GemmFile emits the AVX2 or AVX-512 tiles of 1..gemmRows rows.
func x86GemmFile(a x86) func(g *gen) {
	return func(g *gen) {
		for mr := 1; mr <= gemmRows; mr++ {
			x86Gemm(g, a, mr)
		}
	}
}

// armGemm emits the NEON tile of mr rows by 16 columns: accumulators V0-V23
// (row r in V(4r)..V(4r+3)), B in V24-V27, broadcasts in V28-V29. Registers:
// R0 C (stride R1), R8-R13 the A rows (step R4), R5 B (step R6), R7 counts
// the steps.
func armGemm(g *gen, mr int) {
	name := fmt.Sprintf("gemmF32NEONx%d", mr)
	g.text(name, "$0-80", gemmDoc(name, 16, false))
	g.l("MOVD c+0(FP), R0")
	g.l("MOVD ldc+8(FP), R1")
	g.l("LSL $2, R1, R1")
	g.l("MOVD a+16(FP), R8")
	g.l("MOVD rsa+24(FP), R3")
	g.l("LSL $2, R3, R3")
	g.l("MOVD csa+32(FP), R4")
	g.l("LSL $2, R4, R4")
	g.l("MOVD b+40(FP), R5")
	g.l("MOVD ldb+48(FP), R6")
	g.l("LSL $2, R6, R6")
	g.l("MOVD k+56(FP), R7")
	for r := 1; r < mr; r++ {
		g.l("ADD R3, R%d, R%d", 7+r, 8+r)
	}
	quad := func(r int) string {
		return fmt.Sprintf("[V%d.S4, V%d.S4, V%d.S4, V%d.S4]", 4*r, 4*r+1, 4*r+2, 4*r+3)
	}
	g.l("MOVD acc+72(FP), R2")
	g.l("CBZ R2, zero")
	g.l("MOVD R0, R2")
	for r := range mr {
		if r > 0 {
			g.l("ADD R1, R2, R2")
		}
		g.l("VLD1 (R2), %s", quad(r))
	}
	g.l("B loop")
	g.label("zero")
	for r := range 4 * mr {
		armZero(g, r)
	}
	g.label("loop")
	g.l("VLD1 (R5), [V24.S4, V25.S4, V26.S4, V27.S4]")
	g.l("ADD R6, R5, R5")
	for r := range mr {
		bc := 28 + r%2
		g.l("VLD1R (R%d), [V%d.S4]", 8+r, bc)
		g.l("ADD R4, R%d, R%d", 8+r, 8+r)
		for v := range 4 {
			g.l("VFMLA V%d.S4, V%d.S4, V%d.S4", 24+v, bc, 4*r+v)
		}
	}
	g.l("SUB $1, R7, R7")
	g.l("CBNZ R7, loop")
	for r := range mr {
		if r > 0 {
			g.l("ADD R1, R0, R0")
		}
		g.l("VST1 %s, (R0)", quad(r))
	}
	g.l("RET")
}

// armGemmFile emits the NEON tiles of 1..gemmRows rows.
func armGemmFile(g *gen) {
	for mr := 1; mr <= gemmRows; mr++ {
		armGemm(g, mr)
	}
}

// x86MaxF32 emits maxF32AVX2: dst[i] = x[i] > dst[i] ? x[i] : dst[i], which
// is VMAXPS with x first (a NaN in either keeps dst).
func x86MaxF32(g *gen) {
	g.text("maxF32AVX2", "$0-24", "func maxF32AVX2(dst, x *float32, n int)\n"+
		"Sets dst[i] = x[i] > dst[i] ? x[i] : dst[i] for i < n. Requires n a positive multiple of 8.")
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ n+16(FP), CX")
	g.l("XORQ AX, AX")
	g.label("loop")
	g.l("VMOVUPS (SI)(AX*4), Y0")
	g.l("VMAXPS (DI)(AX*4), Y0, Y0")
	g.l("VMOVUPS Y0, (DI)(AX*4)")
	g.l("ADDQ $8, AX")
	g.l("CMPQ AX, CX")
	g.l("JB loop")
	g.l("VZEROUPPER")
	g.l("RET")
}
