package main

import "fmt"

// The Go arm64 assembler lacks a few NEON instructions; these helpers emit
// their encodings as WORDs (all on four single-precision lanes).

// faddv emits FADD Vd.4S, Vn.4S, Vm.4S.
func faddv(g *gen, d, n, m int) {
	g.l("WORD $0x%08x // FADD V%d.4S, V%d.4S, V%d.4S", 0x4E20D400|m<<16|n<<5|d, d, n, m)
}

// faddp emits FADDP Vd.4S, Vn.4S, Vm.4S: [n0+n1, n2+n3, m0+m1, m2+m3].
func faddp(g *gen, d, n, m int) {
	g.l("WORD $0x%08x // FADDP V%d.4S, V%d.4S, V%d.4S", 0x6E20D400|m<<16|n<<5|d, d, n, m)
}

// fmulv emits FMUL Vd.4S, Vn.4S, Vm.4S.
func fmulv(g *gen, d, n, m int) {
	g.l("WORD $0x%08x // FMUL V%d.4S, V%d.4S, V%d.4S", 0x6E20DC00|m<<16|n<<5|d, d, n, m)
}

// fcvtl emits FCVTL Vd.4S, Vn.4H (upper: FCVTL2 Vd.4S, Vn.8H).
func fcvtl(g *gen, d, n int, upper bool) {
	if upper {
		g.l("WORD $0x%08x // FCVTL2 V%d.4S, V%d.8H", 0x4E217800|n<<5|d, d, n)
		return
	}
	g.l("WORD $0x%08x // FCVTL V%d.4S, V%d.4H", 0x0E217800|n<<5|d, d, n)
}

// armLoad8 emits the load of 8 elements of type e from (p), post-incremented,
// widened to float32 into V<d0> (first 4) and V<d1> (next 4). V31 must be zero
// and V16 is scratch.
func armLoad8(g *gen, e elem, p string, d0, d1 int) {
	switch e {
	case bf16:
		g.l("VLD1.P 16(%s), [V16.H8]", p)
		g.l("VZIP1 V16.H8, V31.H8, V%d.H8", d0)
		g.l("VZIP2 V16.H8, V31.H8, V%d.H8", d1)
	case f16:
		g.l("VLD1.P 16(%s), [V16.H8]", p)
		fcvtl(g, d0, 16, false)
		fcvtl(g, d1, 16, true)
	default:
		g.l("VLD1.P 32(%s), [V%d.S4, V%d.S4]", p, d0, d1)
	}
}

func armZero(g *gen, regs ...int) {
	for _, r := range regs {
		g.l("VEOR V%d.B16, V%d.B16, V%d.B16", r, r, r)
	}
}

func armDot(g *gen, e elem) {
	name := "dot" + e.name + "NEON"
	g.text(name, "$0-28", fmt.Sprintf("func %s(w *%s, x *float32, n int) float32\n"+
		"Requires n to be a positive multiple of 8.", name, goType(e)))
	g.l("MOVD w+0(FP), R0")
	g.l("MOVD x+8(FP), R1")
	g.l("MOVD n+16(FP), R2")
	armZero(g, 0, 1, 2, 3, 31)
	g.l("LSR $4, R2, R3")
	g.l("CBZ R3, tail")
	g.label("loop")
	g.l("VLD1.P 64(R1), [V24.S4, V25.S4, V26.S4, V27.S4]")
	armLoad8(g, e, "R0", 20, 21)
	armLoad8(g, e, "R0", 22, 23)
	for u := range 4 {
		g.l("VFMLA V%d.S4, V%d.S4, V%d.S4", 20+u, 24+u, u)
	}
	g.l("SUB $1, R3, R3")
	g.l("CBNZ R3, loop")
	g.label("tail")
	g.l("TBZ $3, R2, reduce")
	g.l("VLD1.P 32(R1), [V24.S4, V25.S4]")
	armLoad8(g, e, "R0", 20, 21)
	g.l("VFMLA V20.S4, V24.S4, V0.S4")
	g.l("VFMLA V21.S4, V25.S4, V1.S4")
	g.label("reduce")
	faddv(g, 0, 0, 1)
	faddv(g, 2, 2, 3)
	faddv(g, 0, 0, 2)
	faddp(g, 0, 0, 0)
	faddp(g, 0, 0, 0)
	g.l("FMOVS F0, ret+24(FP)")
	g.l("RET")
}

// armMatVec4 emits the decode product over groups of four weight rows,
// summing each row in the order armTile sums one (row, input) pair: per
// segment of kblock columns, one float32x4 accumulator takes the low then
// the high four columns of every step of eight, and the segment's FADDP
// reduction is added to the row's running sum.
func armMatVec4(g *gen, e elem) {
	name := "matVec4" + e.name + "NEON"
	g.text(name, "$0-56", fmt.Sprintf("func %s(dst *float32, w *%s, x *float32, groups, cols, n, kblock int)\n"+
		"Sets dst[r] = sum_{c<n} w[r*cols+c]*x[c] for r < 4*groups, summed per segment of kblock columns.\n"+
		"Requires groups > 0 and n and kblock positive multiples of 8.", name, goType(e)))
	g.l("MOVD dst+0(FP), R0")
	g.l("MOVD w+8(FP), R1")
	g.l("MOVD x+16(FP), R2")
	g.l("MOVD groups+24(FP), R3")
	g.l("MOVD cols+32(FP), R4")
	g.l("MOVD n+40(FP), R5")
	g.l("MOVD kblock+48(FP), R13")
	g.l("LSL $%d, R4, R4", e.shift)
	g.l("LSR $3, R13, R13")
	armZero(g, 31)
	g.label("group")
	g.l("MOVD R1, R6")
	g.l("ADD R4, R6, R7")
	g.l("ADD R4, R7, R8")
	g.l("ADD R4, R8, R9")
	g.l("MOVD R2, R10")
	g.l("LSR $3, R5, R11")
	armZero(g, 5)
	g.label("segment")
	// R14 = min(kblock/8, steps left) steps in this segment.
	g.l("MOVD R13, R14")
	g.l("CMP R11, R14")
	g.l("CSEL GT, R11, R14, R14")
	g.l("SUB R14, R11, R11")
	armZero(g, 0, 1, 2, 3)
	g.label("loop")
	g.l("VLD1.P 32(R10), [V24.S4, V25.S4]")
	for r, p := range []string{"R6", "R7", "R8", "R9"} {
		armLoad8(g, e, p, 20, 21)
		g.l("VFMLA V20.S4, V24.S4, V%d.S4", r)
		g.l("VFMLA V21.S4, V25.S4, V%d.S4", r)
	}
	g.l("SUB $1, R14, R14")
	g.l("CBNZ R14, loop")
	faddp(g, 6, 0, 1)
	faddp(g, 7, 2, 3)
	faddp(g, 6, 6, 7)
	faddv(g, 5, 5, 6)
	g.l("CBNZ R11, segment")
	g.l("VST1.P [V5.S4], 16(R0)")
	g.l("ADD R4<<2, R1, R1")
	g.l("SUB $1, R3, R3")
	g.l("CBNZ R3, group")
	g.l("RET")
}

func armAxpy(g *gen) {
	g.text("axpyNEON", "$0-32", "func axpyNEON(a float32, x, y *float32, n int)\n"+
		"Sets y[i] += a*x[i] for i < n (fused). Requires n a positive multiple of 8.")
	g.l("FMOVS a+0(FP), F0")
	g.l("VDUP V0.S[0], V0.S4")
	g.l("MOVD x+8(FP), R0")
	g.l("MOVD y+16(FP), R1")
	g.l("MOVD n+24(FP), R2")
	g.l("LSR $3, R2, R3")
	g.label("loop")
	g.l("VLD1.P 32(R0), [V1.S4, V2.S4]")
	g.l("VLD1 (R1), [V3.S4, V4.S4]")
	g.l("VFMLA V0.S4, V1.S4, V3.S4")
	g.l("VFMLA V0.S4, V2.S4, V4.S4")
	g.l("VST1.P [V3.S4, V4.S4], 32(R1)")
	g.l("SUB $1, R3, R3")
	g.l("CBNZ R3, loop")
	g.l("RET")
}

func armScale(g *gen) {
	g.text("scaleNEON", "$0-24", "func scaleNEON(a float32, x *float32, n int)\n"+
		"Sets x[i] *= a for i < n. Requires n a positive multiple of 8.")
	g.l("FMOVS a+0(FP), F0")
	g.l("VDUP V0.S[0], V0.S4")
	g.l("MOVD x+8(FP), R0")
	g.l("MOVD n+16(FP), R2")
	g.l("LSR $3, R2, R3")
	g.label("loop")
	g.l("VLD1 (R0), [V1.S4, V2.S4]")
	fmulv(g, 1, 1, 0)
	fmulv(g, 2, 2, 0)
	g.l("VST1.P [V1.S4, V2.S4], 32(R0)")
	g.l("SUB $1, R3, R3")
	g.l("CBNZ R3, loop")
	g.l("RET")
}

// armTile emits the 4x4 register tile of the arm64 matrix-matrix products:
// four weight rows times four inputs, sixteen float32x4 accumulators V0-V15
// (input j, row r in V(4j+r)). Each step of 8 columns loads 8 weights per row
// into V16-V23 (row r in V(16+2r), V(17+2r)), widened in place, and streams the
// inputs through V24-V27 two at a time: 4+4 loads, 8 widenings (none for f32)
// and 32 FMLAs per step. For nb < 4 the missing inputs alias the last real one,
// so the loop has no branches; only nb results are stored.
func armTile(g *gen, e elem) {
	name := "tile" + e.name + "NEON"
	g.text(name, "$0-64", fmt.Sprintf("func %s(dst *float32, ldd int, w *%s, ldw int, x *float32, ldx int, k, nb int)\n"+
		"Adds to dst[j*ldd+r], for r < 4 and j < nb, sum_{p<k} w[r*ldw+p]*x[j*ldx+p].\n"+
		"Requires k a positive multiple of 8 and 1 <= nb <= 4.", name, goType(e)))
	g.l("MOVD dst+0(FP), R0")
	g.l("MOVD ldd+8(FP), R1")
	g.l("LSL $2, R1, R1")
	g.l("MOVD w+16(FP), R8")
	g.l("MOVD ldw+24(FP), R3")
	g.l("LSL $%d, R3, R3", e.shift)
	g.l("MOVD x+32(FP), R12")
	g.l("MOVD ldx+40(FP), R5")
	g.l("LSL $2, R5, R5")
	g.l("MOVD k+48(FP), R6")
	g.l("LSR $3, R6, R6")
	g.l("MOVD nb+56(FP), R7")
	for r := 1; r < 4; r++ {
		g.l("ADD R3, R%d, R%d", 7+r, 8+r)
	}
	for j := 1; j < 4; j++ {
		// x_j = nb > j ? x_{j-1}+ldx : x_{j-1}
		g.l("ADD R5, R%d, R%d", 11+j, 12+j)
		g.l("CMP $%d, R7", j+1)
		g.l("CSEL LT, R%d, R%d, R%d", 11+j, 12+j, 12+j)
	}
	armZero(g, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 31)
	g.label("loop")
	for r := range 4 {
		lo, hi := 16+2*r, 17+2*r
		p := fmt.Sprintf("R%d", 8+r)
		switch e {
		case bf16:
			g.l("VLD1.P 16(%s), [V%d.H8]", p, hi)
			g.l("VZIP1 V%d.H8, V31.H8, V%d.H8", hi, lo)
			g.l("VZIP2 V%d.H8, V31.H8, V%d.H8", hi, hi)
		case f16:
			g.l("VLD1.P 16(%s), [V%d.H8]", p, hi)
			fcvtl(g, lo, hi, false)
			fcvtl(g, hi, hi, true)
		default:
			g.l("VLD1.P 32(%s), [V%d.S4, V%d.S4]", p, lo, hi)
		}
	}
	for j := range 4 {
		x := 24 + 2*(j%2)
		g.l("VLD1.P 32(R%d), [V%d.S4, V%d.S4]", 12+j, x, x+1)
		for h := range 2 {
			for r := range 4 {
				g.l("VFMLA V%d.S4, V%d.S4, V%d.S4", 16+2*r+h, x+h, 4*j+r)
			}
		}
	}
	g.l("SUB $1, R6, R6")
	g.l("CBNZ R6, loop")
	for j := range 4 {
		if j > 0 {
			g.l("CMP $%d, R7", j+1)
			g.l("BLT done")
			g.l("ADD R1, R0, R0")
		}
		faddp(g, 28, 4*j, 4*j+1)
		faddp(g, 29, 4*j+2, 4*j+3)
		faddp(g, 28, 28, 29)
		g.l("VLD1 (R0), [V29.S4]")
		faddv(g, 28, 28, 29)
		g.l("VST1 [V28.S4], (R0)")
	}
	g.label("done")
	g.l("RET")
}
