package main

import "fmt"

// The AVX512_VNNI products of packed quantized weights (asm/qpack.go): the
// weights of 16 rows are interleaved four bytes at a time, so that one
// 64-byte vector holds bytes 4s..4s+3 of a block in every row, and
// VPDPBUSD with the input's four bytes broadcast adds their products to
// one int32 lane per row. After a block's eight steps each lane holds the
// row's exact block sum: no horizontal reduction, and the float epilogue is
// the Go twin's, lane by lane.
//
// A packed Q8_0 block of 16 rows is 544 bytes: the rows' 16 fp16 scales,
// then eight steps of 16 rows × 4 bytes, each byte the weight plus 128
// (VPDPBUSD multiplies unsigned by signed bytes). A packed Q8_0 input block
// is 40 bytes: the 32 int8 values, d as float32, and −128·Σq as int32,
// which starts the block's integer sum and so takes the 128 back out.

// qpInputs is the addressing of up to eight inputs from three bases: R13
// (input 0), R14 (input 3) and BX (input 6), with the input stride in R9.
var qpInputs = []string{"(R13)", "(R13)(R9*1)", "(R13)(R9*2)", "(R14)", "(R13)(R9*4)", "(R14)(R9*2)", "(BX)", "(BX)(R9*1)"}

// x86QPackQ8_0 emits the packed Q8_0×Q8_0 kernel for nb inputs.
//
// Registers: running sums of input j in Zj, its block sum in Z(8+j), its
// block scales in Z(16+j); the rows' scales in Z30, the weight steps in
// Z28 and Z29 in turn.
func x86QPackQ8_0(g *gen, nb int) {
	name := fmt.Sprintf("qpQ8_0VNNIx%d", nb)
	g.text(name, "$0-48", fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q8_0×Q8_0 product of packed\n", nb)+
		"row r (w: blocks packed blocks of 544 bytes) and packed input j (x + j*ldx\n"+
		"bytes, blocks of 40), block by block as the Go twin sums it. Requires blocks >= 1.")
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ ldd+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ x+24(FP), R13")
	g.l("MOVQ ldx+32(FP), R9")
	g.l("LEAQ (R13)(R9*2), R14")
	g.l("ADDQ R9, R14")
	g.l("LEAQ (R14)(R9*2), BX")
	g.l("ADDQ R9, BX")
	g.l("MOVQ blocks+40(FP), CX")
	for j := range nb {
		g.l("VPXORD Z%d, Z%d, Z%d", j, j, j)
	}
	g.label("block")
	g.l("VCVTPH2PS (SI), Z30")
	for j := range nb {
		g.l("VPBROADCASTD 36%s, Z%d", qpInputs[j], 8+j)
	}
	for s := range 8 {
		w := 28 + s%2
		g.l("VMOVDQU32 %d(SI), Z%d", 32+64*s, w)
		for j := range nb {
			g.l("VPDPBUSD.BCST %d%s, Z%d, Z%d", 4*s, qpInputs[j], w, 8+j)
		}
	}
	for j := range nb {
		g.l("VMULPS.BCST 32%s, Z30, Z%d", qpInputs[j], 16+j)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+j, 8+j)
		g.l("VMULPS Z%d, Z%d, Z%d", 16+j, 8+j, 8+j)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+j, j, j)
	}
	g.l("ADDQ $544, SI")
	for _, r := range []string{"R13", "R14", "BX"} {
		g.l("ADDQ $40, %s", r)
	}
	g.l("DECQ CX")
	g.l("JNZ block")
	qpStore(g, nb)
}

// qpStore stores the sums Z0..Z(nb-1) at dst + j*ldd (DI, DX = 4*ldd).
func qpStore(g *gen, nb int) {
	g.l("LEAQ (DI)(DX*2), R8")
	g.l("ADDQ DX, R8")
	g.l("LEAQ (R8)(DX*2), AX")
	g.l("ADDQ DX, AX")
	out := []string{"(DI)", "(DI)(DX*1)", "(DI)(DX*2)", "(R8)", "(DI)(DX*4)", "(R8)(DX*2)", "(AX)", "(AX)(DX*1)"}
	for j := range nb {
		g.l("VMOVUPS Z%d, %s", j, out[j])
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86QPack emits the packed kernels.
func x86QPack(g *gen) {
	for nb := 1; nb <= 8; nb++ {
		x86QPackQ8_0(g, nb)
	}
}
