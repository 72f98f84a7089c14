package main

import "fmt"

// The AVX-VNNI products of packed quantized weights (asm/qpack.go), for
// CPUs with AVX2 and AVX-VNNI but no AVX-512 (Intel from Alder Lake, AMD
// Zen 5 client parts): VPDPBUSD on ymm, VEX-encoded. Go's assembler knows
// VPDPBUSD only in its EVEX form (AVX512_VNNI, prefix 0x62), which raises
// SIGILL on a CPU without AVX-512, so the kernels emit the VEX form's bytes
// (vpdpbusd below; checked against the GNU assembler's in asmgen_test.go).
// The VEX form has no embedded broadcast, and its memory operand is the
// signed one, which here is the broadcast input: both operands are
// registers.
//
// A packed Q8_0 group is 16 rows × 4 bytes per step, two ymm registers
// (rows 0..7 and 8..15); each step of a block adds the products of both
// with an input's four bytes broadcast to that input's two int32
// accumulators, which start the block at the input's −128·Σq. After eight
// steps every lane holds its row's exact block sum, and the float epilogue
// is the Go twin's lane by lane: sum += (d_w·d_x)·float(S). The running
// sums live in the frame (64 bytes per input), so that the 16 registers
// hold up to six inputs' accumulators: per step two weight loads and one
// broadcast per input feed two VPDPBUSD per input.

// qvInputRegs hold the addresses of the inputs of an AVX-VNNI kernel.
var qvInputRegs = []string{"R13", "R9", "R11", "R14", "R12", "R15"}

// qvMaxInputs is the most inputs of one AVX-VNNI packed kernel.
const qvMaxInputs = 6

// vpdpbusd returns the bytes of VEX VPDPBUSD ymm<src2>, ymm<src1>,
// ymm<dst> in Go operand order (Intel: VPDPBUSD ymm_dst, ymm_src1,
// ymm_src2): each int32 lane of dst adds the four products of src1's
// unsigned bytes and src2's signed bytes, without saturation.
func vpdpbusd(dst, src1, src2 int) []byte {
	inv := func(v, bit int) byte { return byte(^v>>bit) & 1 }
	p0 := inv(dst, 3)<<7 | 1<<6 | inv(src2, 3)<<5 | 0b00010 // R̄ X̄ B̄, map 0F38
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0b01                  // W0, vvvv, L=256, pp=66
	modrm := byte(0xC0) | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0xC4, p0, p1, 0x50, modrm}
}

// emitVPDPBUSD emits VEX VPDPBUSD Y<src2>, Y<src1>, Y<dst> as bytes.
func emitVPDPBUSD(g *gen, dst, src1, src2 int) {
	emitBytes(g, vpdpbusd(dst, src1, src2), fmt.Sprintf("VPDPBUSD Y%d, Y%d, Y%d (VEX)", src2, src1, dst))
}

// qvHead loads an AVX-VNNI packed kernel's arguments: dst in DI, 4*ldd in
// DX, the weights in SI, the inputs in qvInputRegs and blocks in CX.
func qvHead(g *gen, nb int) {
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ ldd+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ x+24(FP), %s", qvInputRegs[0])
	g.l("MOVQ ldx+32(FP), AX")
	for j := 1; j < nb; j++ {
		g.l("LEAQ (%s)(AX*1), %s", qvInputRegs[j-1], qvInputRegs[j])
	}
	g.l("MOVQ blocks+40(FP), CX")
}

// qvStore copies the frame's running sums of nb inputs (64 bytes each) to
// dst + j*ldd (DI, DX = 4*ldd).
func qvStore(g *gen, nb int) {
	g.l("LEAQ (DI)(DX*2), R8")
	g.l("ADDQ DX, R8")
	out := []string{"(DI)", "(DI)(DX*1)", "(DI)(DX*2)", "(R8)", "(DI)(DX*4)", "(R8)(DX*2)"}
	for j := range nb {
		for h := range 2 {
			g.l("VMOVUPS %d(SP), Y%d", 64*j+32*h, h)
			g.l("VMOVUPS Y%d, %d%s", h, 32*h, out[j])
		}
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86QPackQ8_0AVXVNNI emits the AVX-VNNI packed Q8_0×Q8_0 kernel for nb
// inputs.
//
// Registers: input j's accumulators of rows 0..7 and 8..15 in Y(2j) and
// Y(2j+1); the weight steps in Y12 and Y13 (the rows' scales in the
// epilogue), the broadcast input quad in Y14 (d_x in the epilogue),
// d_w·d_x in Y15.
func x86QPackQ8_0AVXVNNI(g *gen, nb int) {
	q8YmmPrologue(g, fmt.Sprintf("qpQ8_0AVXVNNIx%d", nb), nb, "packed input j (x + j*ldx\nbytes, blocks of 40)", "\nand AVX-VNNI", qvHead)
	g.label("block")
	q8YmmStartSums(g, qvInputRegs[:nb], 36)
	for s := range 8 {
		g.l("VMOVDQU %d(SI), Y12", 32+64*s)
		g.l("VMOVDQU %d(SI), Y13", 32+64*s+32)
		for j, x := range qvInputRegs[:nb] {
			g.l("VPBROADCASTD %d(%s), Y14", 4*s, x)
			emitVPDPBUSD(g, 2*j, 12, 14)
			emitVPDPBUSD(g, 2*j+1, 13, 14)
		}
	}
	q8YmmBlockEnd(g, qvInputRegs[:nb], 12, 14, func(int) int { return 15 }, 40, 32)
}

// q8YmmPrologue emits the start of a ymm Q8_0 kernel of nb inputs (AVX2
// and AVX-VNNI): its text with a doc naming its input blocks (input) and
// requirements beyond blocks >= 1 (extra), its arguments (head) and its
// running sums in the frame (64 bytes per input) set to zero.
func q8YmmPrologue(g *gen, name string, nb int, input, extra string, head func(*gen, int)) {
	g.text(name, fmt.Sprintf("$%d-48", 64*nb), fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q8_0×Q8_0 product of packed\n", nb)+
		fmt.Sprintf("row r (w: blocks packed blocks of 544 bytes) and %s, block by block as the\n", input)+
		"Go twin sums it. Requires blocks >= 1"+extra+".")
	head(g, nb)
	g.l("VPXOR Y15, Y15, Y15")
	for j := range nb {
		g.l("VMOVDQU Y15, %d(SP)", 64*j)
		g.l("VMOVDQU Y15, %d(SP)", 64*j+32)
	}
}

// q8YmmStartSums starts a block's integer sums of both halves of each
// input (in Y(2j) and Y(2j+1)) at the input block's −128·Σq, at byte off.
func q8YmmStartSums(g *gen, inputs []string, off int) {
	for j, x := range inputs {
		g.l("VPBROADCASTD %d(%s), Y%d", off, x, 2*j)
		g.l("VMOVDQA Y%d, Y%d", 2*j, 2*j+1)
	}
}

// q8YmmBlockEnd emits the end of a block of the ymm Q8_0 kernels (AVX2 and
// AVX-VNNI), whose block sums of input j's rows 0..7 and 8..15 are in
// Y(2j) and Y(2j+1) and whose running sums live in the frame (64 bytes per
// input): the rows' scales into Y(scales) and Y(scales+1), each input's d
// broadcast into Y(dx), and the Go twin's float step lane by lane,
// sum += (d_w·d_x)·float(S), with d_w·d_x of half h in Y(tmp(h)); then
// the next block, and the sums stored after the last (qvStore). An input
// block is inBlock bytes with d at byte dOff.
func q8YmmBlockEnd(g *gen, inputs []string, scales, dx int, tmp func(h int) int, inBlock, dOff int) {
	g.l("VCVTPH2PS (SI), Y%d", scales)
	g.l("VCVTPH2PS 16(SI), Y%d", scales+1)
	for j, x := range inputs {
		g.l("VBROADCASTSS %d(%s), Y%d", dOff, x, dx)
		for h := range 2 {
			a, t := 2*j+h, tmp(h)
			g.l("VMULPS Y%d, Y%d, Y%d", scales+h, dx, t)
			g.l("VCVTDQ2PS Y%d, Y%d", a, a)
			g.l("VMULPS Y%d, Y%d, Y%d", t, a, a)
			g.l("VADDPS %d(SP), Y%d, Y%d", 64*j+32*h, a, a)
			g.l("VMOVUPS Y%d, %d(SP)", a, 64*j+32*h)
		}
	}
	g.l("ADDQ $544, SI")
	for _, x := range inputs {
		g.l("ADDQ $%d, %s", inBlock, x)
	}
	g.l("DECQ CX")
	g.l("JNZ block")
	qvStore(g, len(inputs))
}

// x86QPackAVXVNNI emits the AVX-VNNI packed kernels.
func x86QPackAVXVNNI(g *gen) {
	qp2Consts(g) // file-local: the K-quants' masks
	for nb := 1; nb <= qvMaxInputs; nb++ {
		x86QPackQ8_0AVXVNNI(g, nb)
	}
	// The K-quants: the AVX2 kernels' shapes (eight rows, up to four
	// inputs) with VPDPBUSD (see x86QPackQ4K256, x86QPackQ6K256).
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ4K256(g, nb, true)
	}
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ6K256(g, nb, true)
	}
}
