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

// qpInputRegs hold the addresses of up to eight inputs, each advanced a
// block at a time, and qpInput addresses one: by base register alone, as
// on Intel cores an EVEX instruction with an indexed memory operand
// splits into two micro-ops. Three bases and an index ran one thread's
// 4096×4096 products 1.17-1.63 times as long (8 and 64 inputs, Q8_0,
// Q4_K, Q6_K; medians of three alternating runs on a Xeon).
var qpInputRegs = []string{"R13", "R9", "R11", "R14", "R12", "R15", "BX", "R8"}

// qpInput returns the address operand of input j.
func qpInput(j int) string { return "(" + qpInputRegs[j] + ")" }

// qpAdvance adds bytes to the addresses of the first nb inputs.
func qpAdvance(g *gen, nb, bytes int) {
	for _, r := range qpInputRegs[:nb] {
		g.l("ADDQ $%d, %s", bytes, r)
	}
}

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
	qpHead(g, 0)
	for j := range nb {
		g.l("VPXORD Z%d, Z%d, Z%d", j, j, j)
	}
	g.label("block")
	g.l("VCVTPH2PS (SI), Z30")
	for j := range nb {
		g.l("VPBROADCASTD 36%s, Z%d", qpInput(j), 8+j)
	}
	for s := range 8 {
		w := 28 + s%2
		g.l("VMOVDQU32 %d(SI), Z%d", 32+64*s, w)
		for j := range nb {
			g.l("VPDPBUSD.BCST %d%s, Z%d, Z%d", 4*s, qpInput(j), w, 8+j)
		}
	}
	for j := range nb {
		g.l("VMULPS.BCST 32%s, Z30, Z%d", qpInput(j), 16+j)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+j, 8+j)
		g.l("VMULPS Z%d, Z%d, Z%d", 16+j, 8+j, 8+j)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+j, j, j)
	}
	g.l("ADDQ $544, SI")
	qpAdvance(g, nb, 40)
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

// qpHead loads the arguments of a packed kernel: dst in DI, 4*ldd in DX,
// the weights in SI, the addresses of the eight inputs in qpInputRegs
// (those past the kernel's inputs are never read) and blocks in CX; with
// quants > 0, the side part of the first super-block (after its quant
// part of quants bytes) in R10.
func qpHead(g *gen, quants int) {
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ ldd+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ x+24(FP), %s", qpInputRegs[0])
	g.l("MOVQ ldx+32(FP), AX")
	for j := 1; j < len(qpInputRegs); j++ {
		g.l("LEAQ (%s)(AX*1), %s", qpInputRegs[j-1], qpInputRegs[j])
	}
	g.l("MOVQ blocks+40(FP), CX")
	if quants > 0 {
		g.l("LEAQ %d(SI), R10", quants)
	}
}

// qpBroadcast sets every byte of Z(z) to b.
func qpBroadcast(g *gen, b byte, z int) {
	g.l("MOVL $0x%02x%02x%02x%02x, AX", b, b, b, b)
	g.l("VPBROADCASTD AX, Z%d", z)
}

// The K-quant kernels (see asm/qpack.go for the layouts). A packed input
// super-block is 340 bytes: 256 int8 values, d as float32 at 256, the 16
// int32 −32·Σq of the sub-blocks of 16 at 260, the 8 int16 sums of 32
// values at 324.
const (
	qKInput     = 340
	qKInputD    = 256
	qKInputCorr = 260
	qKInputBs32 = 324
)

// The bytes of a packed K-quant super-block of 16 rows: its quant part,
// then its side part, so one stream of memory carries both (see
// asm/qpack.go).
const (
	q6KQuants = 3072
	q6KSuper  = q6KQuants + 288
	q4KQuants = 2048
	q4KSuper  = q4KQuants + 320
)

// x86QPackQ6K emits the packed Q6_K×Q8_K kernel for nb inputs. Per
// sub-block j of 16 columns, the four weight vectors (6-bit values as
// bytes) are put together from A, B, C once for all inputs; each input's
// int32 sum starts at −32·Σq (so the unsigned values need no −32), takes
// four VPDPBUSD, is multiplied by the rows' scales (VPMULLD) and added to
// the super-block's sum S, which the twin's epilogue scales lane by lane.
//
// Registers: running sums of input i in Zi, its S in Z(8+i), sub-block
// sums in Z16 and Z17 in turn; weights Z18..Z21 (Z22 a temporary), scales
// Z23, d in Z24 (Z25 the products), masks 0x3F, 0x0F and 0x03 in Z29..Z31.
func x86QPackQ6K(g *gen, nb int) {
	name := fmt.Sprintf("qpQ6KVNNIx%d", nb)
	g.text(name, "$0-48", fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q6_K×Q8_K product of packed\n", nb)+
		"row r (w: blocks super-blocks of 3360 bytes, a quant part of 3072 then a side\n"+
		"part of 288) and packed input j (x + j*ldx bytes, super-blocks of 340),\n"+
		"super-block by super-block as the Go twin sums it. Requires blocks >= 1.")
	qpHead(g, q6KQuants)
	pf := qpPrefetchFor(nb)
	qpBroadcast(g, 0x3f, 29)
	qpBroadcast(g, 0x0f, 30)
	qpBroadcast(g, 0x03, 31)
	for i := range nb {
		g.l("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	g.label("block")
	for j := range 16 {
		if pf > 0 {
			for c := range 3 {
				g.l("PREFETCHT0 %d(SI)", pf*q6KSuper+192*j+64*c)
			}
			if j < 5 {
				g.l("PREFETCHT0 %d(R10)", pf*q6KSuper+64*j)
			}
		}
		g.l("VMOVDQU32 %d(SI), Z18", 192*j)
		g.l("VMOVDQU32 %d(SI), Z19", 192*j+64)
		g.l("VMOVDQU32 %d(SI), Z20", 192*j+128)
		q6kUnpack(g)
		g.l("VPMOVSXBD %d(R10), Z23", 16*j)
		for i := range nb {
			q6kSubBlock(g, j, 16+i%2, 8+i, qpInput(i))
		}
	}
	g.l("VCVTPH2PS 256(R10), Z24")
	for i := range nb {
		g.l("VMULPS.BCST %d%s, Z24, Z25", qKInputD, qpInput(i))
		g.l("VCVTDQ2PS Z%d, Z%d", 8+i, 8+i)
		g.l("VMULPS Z25, Z%d, Z%d", 8+i, 8+i)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+i, i, i)
	}
	g.l("ADDQ $%d, SI", q6KSuper)
	g.l("ADDQ $%d, R10", q6KSuper)
	qpAdvance(g, nb, qKInput)
	g.l("DECQ CX")
	g.l("JNZ block")
	qpStore(g, nb)
}

// q6kUnpack makes the four weight vectors of a Q6_K sub-block, 6-bit
// values as bytes, in Z18..Z21 from the three loaded A, B, C in Z18..Z20
// (Z22 a temporary; masks 0x3F, 0x0F, 0x03 in Z29..Z31).
func q6kUnpack(g *gen) {
	// The last four columns: bits 0-1 from A's top, 2-3 from B's, 4-5
	// from C's (word shifts; the bits they drag across bytes are masked
	// off). VPTERNLOGD 0xE2: Z21 = mask ? Z21 : Z22.
	g.l("VPSRLW $6, Z18, Z21")
	g.l("VPSRLW $4, Z19, Z22")
	g.l("VPTERNLOGD $0xe2, Z22, Z31, Z21")
	g.l("VPSRLW $2, Z20, Z22")
	g.l("VPTERNLOGD $0xe2, Z22, Z30, Z21")
	g.l("VPANDD Z29, Z21, Z21")
	for w := 18; w < 21; w++ {
		g.l("VPANDD Z29, Z%d, Z%d", w, w)
	}
}

// q6kSubBlock adds sub-block j's integer sum of one input (at in) to S in
// Z(s): the sum starts at the input's −32·Σq in Z(acc), takes four
// VPDPBUSD with the weights Z18..Z21 and is multiplied by the rows'
// scales in Z23 (sub-block 0 sets S).
func q6kSubBlock(g *gen, j, acc, s int, in string) {
	g.l("VPBROADCASTD %d%s, Z%d", qKInputCorr+4*j, in, acc)
	for k := range 4 {
		g.l("VPDPBUSD.BCST %d%s, Z%d, Z%d", 16*j+4*k, in, 18+k, acc)
	}
	if j == 0 {
		g.l("VPMULLD Z23, Z%d, Z%d", acc, s)
		return
	}
	g.l("VPMULLD Z23, Z%d, Z%d", acc, acc)
	g.l("VPADDD Z%d, Z%d, Z%d", acc, s, s)
}

// x86QPackQ4K emits the packed Q4_K×Q8_K kernel for nb inputs. Sub-block
// j's weights are the nibbles of vectors 8(j/2)..8(j/2)+7 masked with 0x0F
// (even j) or 0xF0 (odd j: 16q); the even sub-blocks' scales are taken
// times 16 to match, and S, 16 times the twin's, is shifted back before
// the epilogue (exact: |16·S| < 2^29). Each input's sub-block sum takes
// eight VPDPBUSD, one per weight vector shared by the inputs, and VPMULLD
// by the scales; the mins' M is four VPDPWSSD of the rows' (m_2p, m_2p+1)
// word pairs with the input's broadcast pair of sums of 32.
//
// Registers: running sums of input i in Zi, its S (then M) in Z(8+i), its
// sub-block sum in Z(16+i); weights Z24, Z25 in turn, scales Z26, d and
// dmin Z27 (Z28 the products), masks 0x0F and 0xF0 in Z30, Z31; the mins'
// word pairs in Z16..Z19.
func x86QPackQ4K(g *gen, nb int) {
	name := fmt.Sprintf("qpQ4KVNNIx%d", nb)
	g.text(name, "$0-48", fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q4_K×Q8_K product of packed\n", nb)+
		"row r (w: blocks super-blocks of 2368 bytes, a quant part of 2048 then a side\n"+
		"part of 320) and packed input j (x + j*ldx bytes, super-blocks of 340),\n"+
		"super-block by super-block as the Go twin sums it. Requires blocks >= 1.")
	qpHead(g, q4KQuants)
	pf := qpPrefetchFor(nb)
	qpBroadcast(g, 0x0f, 30)
	qpBroadcast(g, 0xf0, 31)
	for i := range nb {
		g.l("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	g.label("block")
	for j := range 8 {
		g.l("VPMOVZXBD %d(R10), Z26", 16*j)
		if j%2 == 0 {
			g.l("VPSLLD $4, Z26, Z26")
		}
		for i := range nb {
			g.l("VPXORD Z%d, Z%d, Z%d", 16+i, 16+i, 16+i)
		}
		for s := range 8 {
			w := 24 + s%2
			if pf > 0 && j%2 == 0 {
				g.l("PREFETCHT0 %d(SI)", pf*q4KSuper+64*(8*(j/2)+s))
			}
			if pf > 0 && j%2 == 1 && s < 5 {
				g.l("PREFETCHT0 %d(R10)", pf*q4KSuper+64*s)
			}
			g.l("VPANDD %d(SI), Z%d, Z%d", 64*(8*(j/2)+s), 30+j%2, w)
			for i := range nb {
				g.l("VPDPBUSD.BCST %d%s, Z%d, Z%d", 32*j+4*s, qpInput(i), w, 16+i)
			}
		}
		for i := range nb {
			if j == 0 {
				g.l("VPMULLD Z26, Z%d, Z%d", 16+i, 8+i)
			} else {
				g.l("VPMULLD Z26, Z%d, Z%d", 16+i, 16+i)
				g.l("VPADDD Z%d, Z%d, Z%d", 16+i, 8+i, 8+i)
			}
		}
	}
	g.l("VCVTPH2PS 256(R10), Z27")
	for i := range nb {
		g.l("VMULPS.BCST %d%s, Z27, Z28", qKInputD, qpInput(i))
		g.l("VPSRAD $4, Z%d, Z%d", 8+i, 8+i)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+i, 8+i)
		g.l("VMULPS Z28, Z%d, Z%d", 8+i, 8+i)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+i, i, i)
	}
	for p := range 4 {
		g.l("VPMOVZXBW %d(R10), Z%d", 128+32*p, 16+p)
	}
	g.l("VCVTPH2PS 288(R10), Z27")
	for i := range nb {
		g.l("VPXORD Z%d, Z%d, Z%d", 8+i, 8+i, 8+i)
		for p := range 4 {
			g.l("VPDPWSSD.BCST %d%s, Z%d, Z%d", qKInputBs32+4*p, qpInput(i), 16+p, 8+i)
		}
		g.l("VMULPS.BCST %d%s, Z27, Z28", qKInputD, qpInput(i))
		g.l("VCVTDQ2PS Z%d, Z%d", 8+i, 8+i)
		g.l("VMULPS Z28, Z%d, Z%d", 8+i, 8+i)
		g.l("VSUBPS Z%d, Z%d, Z%d", 8+i, i, i)
	}
	g.l("ADDQ $%d, SI", q4KSuper)
	g.l("ADDQ $%d, R10", q4KSuper)
	qpAdvance(g, nb, qKInput)
	g.l("DECQ CX")
	g.l("JNZ block")
	qpStore(g, nb)
}

// qpPrefetch is how many super-blocks ahead the K-quant kernels of two
// inputs or more prefetch their weights (PREFETCHT0 of every line, the
// side parts' too). Measured one thread on Zen 4 (a noisy 2-core VM),
// n=8: Q4_K 12288x4096 6.2 -> 9.5 GB/s of weights, Q6_K 4096x4096 8.8 ->
// 13.2 (two ahead: about the same, four: less); n=64 and 512 unchanged.
// One input streams fast enough without (no gain measured).
const qpPrefetch = 1

// qpPrefetchFor returns the prefetch distance of a K-quant kernel for nb
// inputs.
func qpPrefetchFor(nb int) int {
	if nb < 2 {
		return 0
	}
	return qpPrefetch
}

// x86QPack emits the packed kernels.
func x86QPack(g *gen) {
	for nb := 1; nb <= 8; nb++ {
		x86QPackQ8_0(g, nb)
	}
	for nb := 1; nb <= 8; nb++ {
		x86QPackQ4K(g, nb)
	}
	for nb := 1; nb <= 8; nb++ {
		x86QPackQ6K(g, nb)
	}
	for _, ng := range []int{2, 4} {
		x86QPackQ4KGroups(g, ng)
		x86QPackQ6KGroups(g, ng)
	}
}
