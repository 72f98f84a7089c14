package main

import "fmt"

// tileOPSegSteps is the steps of 32 columns of one segment of tileBF16OP
// (asm's tileOPSegSteps), and tileOPMaxInputs the most groups × inputs of
// one of its bodies (asm's tileOPInputs).
const (
	tileOPSegSteps  = 8
	tileOPMaxInputs = 6
	// tileOPPrefetch is how far ahead, in bytes, the kernel prefetches
	// each weight stream (one thread, 4096×4096, 8 inputs: see asm).
	tileOPPrefetch = 8192
)

// x86TileOP writes tileBF16OP, the AVX2 outer-product kernel over weights
// in the tile layout: line p of a tile holds columns 2p and 2p+1 of 16
// rows (64 bytes, two ymm), so the even column's bf16 shifted left by 16
// bits and the odd one's masked are the column's 16 float32 weights in
// two ymm registers, each used by every input of the body, whose value is
// broadcast once per column: per line and input 4 FMAs, per line and
// group 4 conversions (2 loads, 2 shifts, 2 loads-and-masks), against the
// dot-product kernels' conversion of each weight line per 3 inputs.
// Each element is summed in its own accumulator column by column in
// order, so its sum does not depend on the others in the body.
// Registers: per (group h, input j) pair a = h*nb+j, Y<2a> and Y<2a+1>
// the sums of rows 0-7 and 8-15 (12 at most); Y12 and Y13 a column's
// weights, Y14 a broadcast input, Y15 the mask 0xFFFF0000.
func x86TileOP(g *gen) {
	g.text("tileBF16OP", "$0-80", fmt.Sprintf(`func tileBF16OP(dst *float32, ldd int, w *uint16, groupBytes, steps int, x *float32, ldx, nb, ng, resume int)

Sets dst[j*ldd+16*h+r] = sum_c w_h[r,c]*x[j*ldx+c] for the 16 rows r of
each of the ng groups h at w + h*groupBytes (steps tiles of 1 KiB in the
tile layout) and the nb inputs j (strides count elements; ng 1, 2, 3 or 6,
nb*ng <= %d). Per segment of %d steps, the columns are summed in order
with FMA, from zero; each segment's sum is stored at dst (the first
segment with resume == 0) or added to the sum there (a product cut into
runs of whole segments of columns then sums as one call does).`, tileOPMaxInputs, tileOPSegSteps))
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ groupBytes+24(FP), R9")
	g.l("MOVQ x+40(FP), DX")
	g.l("MOVQ ldx+48(FP), R8")
	g.l("SHLQ $2, R8")
	g.l("MOVL $0xFFFF0000, AX")
	g.l("MOVQ AX, X15")
	g.l("VPBROADCASTD X15, Y15")
	// The inputs' rows: DX, R10-R14; with several groups at most three
	// inputs, and R15, BX, R12-R14 hold groups 1-5.
	xr := []string{"DX", "R10", "R11", "R12", "R13", "R14"}
	wr := []string{"SI", "R15", "BX", "R12", "R13", "R14"}
	g.l("MOVQ nb+56(FP), AX")
	g.l("MOVQ ng+64(FP), CX")
	type body struct{ ng, nb int }
	var bodies []body
	for _, ng := range []int{1, 2, 3, 6} {
		for nb := 1; nb*ng <= tileOPMaxInputs; nb++ {
			bodies = append(bodies, body{ng, nb})
		}
	}
	for _, b := range bodies {
		g.l("CMPQ CX, $%d", b.ng)
		g.l("JNE not%dx%d", b.ng, b.nb)
		g.l("CMPQ AX, $%d", b.nb)
		g.l("JEQ body%dx%d", b.ng, b.nb)
		g.label(fmt.Sprintf("not%dx%d", b.ng, b.nb))
	}
	g.l("RET")
	for _, b := range bodies {
		ng, nb := b.ng, b.nb
		tag := fmt.Sprintf("%dx%d", ng, nb)
		g.label("body" + tag)
		for j := 1; j < nb; j++ {
			g.l("LEAQ (%s)(R8*1), %s", xr[j-1], xr[j])
		}
		for h := 1; h < ng; h++ {
			g.l("LEAQ (%s)(R9*1), %s", wr[h-1], wr[h])
		}
		g.l("MOVQ ldd+8(FP), AX")
		g.l("SHLQ $2, AX")
		g.l("MOVQ resume+72(FP), R9")
		g.l("MOVQ steps+32(FP), CX")
		g.label("segment" + tag)
		g.l("MOVQ $%d, R8", tileOPSegSteps)
		g.l("CMPQ CX, R8")
		g.l("CMOVQLT CX, R8")
		g.l("SUBQ R8, CX")
		for a := range 2 * ng * nb {
			g.l("VXORPS Y%d, Y%d, Y%d", a, a, a)
		}
		g.label("step" + tag)
		for p := range 16 {
			for h := range ng {
				// The even column, then the odd one.
				g.l("PREFETCHT0 %d(%s)", tileOPPrefetch+64*p, wr[h])
				g.l("VMOVDQU %d(%s), Y12", 64*p, wr[h])
				g.l("VMOVDQU %d(%s), Y13", 64*p+32, wr[h])
				g.l("VPSLLD $16, Y12, Y12")
				g.l("VPSLLD $16, Y13, Y13")
				for j := range nb {
					a := h*nb + j
					g.l("VBROADCASTSS %d(%s), Y14", 8*p, xr[j])
					g.l("VFMADD231PS Y14, Y12, Y%d", 2*a)
					g.l("VFMADD231PS Y14, Y13, Y%d", 2*a+1)
				}
				g.l("VPAND %d(%s), Y15, Y12", 64*p, wr[h])
				g.l("VPAND %d(%s), Y15, Y13", 64*p+32, wr[h])
				for j := range nb {
					a := h*nb + j
					g.l("VBROADCASTSS %d(%s), Y14", 8*p+4, xr[j])
					g.l("VFMADD231PS Y14, Y12, Y%d", 2*a)
					g.l("VFMADD231PS Y14, Y13, Y%d", 2*a+1)
				}
			}
		}
		for h := range ng {
			g.l("ADDQ $1024, %s", wr[h])
		}
		for j := range nb {
			g.l("ADDQ $128, %s", xr[j])
		}
		g.l("DECQ R8")
		g.l("JNZ step" + tag)
		// The segment's sums: stored, or added to those at dst.
		store := func(add bool) {
			g.l("MOVQ DI, R8")
			for j := range nb {
				for h := range ng {
					a := h*nb + j
					for half := range 2 {
						off := 64*h + 32*half
						if add {
							g.l("VADDPS %d(R8), Y%d, Y%d", off, 2*a+half, 2*a+half)
						}
						g.l("VMOVUPS Y%d, %d(R8)", 2*a+half, off)
					}
				}
				if j+1 < nb {
					g.l("ADDQ AX, R8")
				}
			}
		}
		g.l("TESTQ R9, R9")
		g.l("JZ first" + tag)
		store(true)
		g.l("JMP stored" + tag)
		g.label("first" + tag)
		store(false)
		g.label("stored" + tag)
		g.l("MOVQ $1, R9")
		g.l("TESTQ CX, CX")
		g.l("JNZ segment" + tag)
		g.l("VZEROUPPER")
		g.l("RET")
	}
}
