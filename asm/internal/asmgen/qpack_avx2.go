package main

import "fmt"

// The AVX2 products of packed quantized weights, on the layouts of the
// AVX512_VNNI kernels (asm/qpack.go), which hold four consecutive columns
// of each of 16 rows in 64 bytes: a 16-byte quarter is four rows × four
// columns, and its bytes spread to words fill one ymm register.
//
// Without VPDPBUSD the products of bytes take VPMADDUBSW (unsigned × signed
// bytes, adjacent pairs summed to int16 with saturation), then VPMADDWD
// (words, pairs summed to int32). The K-quants' weights are small and
// unsigned; Q8_0's are signed, and its kernel multiplies their magnitudes
// by the inputs carrying their signs (x86QPackQ8_0AVX2), exact for inputs
// without −128 (MatMulQPacked gives the others to the Go twin).
//
// The K-quant kernels take eight rows at a time (one half of a group), with
// up to four inputs; the Q8_0 kernel both halves.

// qp2InputRegs hold the addresses of the inputs of an AVX2 packed kernel.
var qp2InputRegs = []string{"R13", "R9", "R11", "R14"}

// qp2MaxInputs is the most inputs of one AVX2 packed kernel.
const qp2MaxInputs = 4

// qp2Head loads an AVX2 packed kernel's arguments for one half: dst in DI,
// 4*ldd in DX, the weights in SI, the inputs in qp2InputRegs and blocks in
// CX.
func qp2Head(g *gen, nb int) {
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ ldd+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ x+24(FP), %s", qp2InputRegs[0])
	g.l("MOVQ ldx+32(FP), AX")
	for j := 1; j < nb; j++ {
		g.l("LEAQ (%s)(AX*1), %s", qp2InputRegs[j-1], qp2InputRegs[j])
	}
	g.l("MOVQ blocks+40(FP), CX")
}

// qp2Out returns the address operand of input j's outputs at byte offset
// off (AX holds 3*DX where j is 3).
func qp2Out(j, off int) string {
	return fmt.Sprintf("%d%s", off, []string{"(DI)", "(DI)(DX*1)", "(DI)(DX*2)", "(DI)(AX*1)"}[j])
}

// qp2Fused reports whether the AVX2 K-quant kernels of nb inputs take both
// halves of a group in one pass over its blocks: each 64-byte line of
// weights is then used whole while it is in L1, where two passes (one
// per half) stream each line from DRAM for half of it and take the other
// half from L2 later (rates with one input at qp2PrefetchQ4K). The
// running sums and int32 sums of both halves need 4·nb registers, which
// leaves the loop's working registers for nb up to 2.
func qp2Fused(nb int) bool { return nb <= 2 }

// The distances, in bytes, at which the AVX2 packed kernels prefetch the
// weights of a later block into L1 in their first pass (the only pass of
// the fused kernels): with few inputs the loop is too short for the
// hardware prefetchers alone to keep the loads from waiting on DRAM, and
// the explicit prefetch keeps about a page in flight ahead of them. The
// rates of one input with and without are in the commit that added them;
// the two-pass kernels gain too (one thread, 12288×4096, GB/s of weights
// without → with: Q8_0 13.0 → 14.2 at 3 inputs and 10.4 → 13.2 at 4,
// Q4_K 9.1 → 11.0 and 8.0 → 11.8, Q6_K 9.0 → 10.6 and 8.3 → 10.0; 64
// inputs unchanged). Prefetching the side parts too (scales, mins) gained
// nothing measurable.
const (
	qp2PrefetchQ8_0 = 4096
	qp2PrefetchQ4K  = 4096
	qp2PrefetchQ6K  = 6144 // about as many super-blocks ahead as Q4_K's (1.8 and 1.7)
)

// qp2Scale emits y op= float(S) · (Y[scale] · d): the int32 sums S in
// register s, converted and scaled by the super-block scales in register
// scale times input x's scale d, added to (op VADDPS) or subtracted from
// (VSUBPS) the running sums in register y. It uses Y13 and Y15.
func qp2Scale(g *gen, op string, s, y, scale int, x string) {
	g.l("VBROADCASTSS %d(%s), Y13", qKInputD, x)
	g.l("VMULPS Y%d, Y13, Y15", scale)
	g.l("VCVTDQ2PS Y%d, Y%d", s, s)
	g.l("VMULPS Y15, Y%d, Y%d", s, s)
	g.l("%s Y%d, Y%d, Y%d", op, s, y, y)
}

// qp2Passes returns the halves each pass of a kernel of nb inputs takes:
// both in one pass (qp2Fused), or one per pass.
func qp2Passes(nb int) [][]int {
	if qp2Fused(nb) {
		return [][]int{{0, 1}}
	}
	return [][]int{{0}, {1}}
}

// qp2Sum returns the register of the running float32 sums of input i and
// half h in a kernel of nb inputs.
func qp2Sum(nb, i, h int) int {
	if qp2Fused(nb) {
		return 2*i + h
	}
	return i
}

// qp2S returns the register of the K-quant kernels' int32 sums S of input
// i and half h in a kernel of nb inputs.
func qp2S(nb, i, h int) int {
	if qp2Fused(nb) {
		return 4 + 2*i + h
	}
	return 4 + i
}

// x86QPackQ8_0AVX2 emits the AVX2 packed Q8_0×Q8_0 kernel for nb inputs
// (up to four), both halves of a group in one pass.
//
// Products of signed bytes by signed bytes take VPMADDUBSW with the
// weight's magnitude as the unsigned operand and the input carrying the
// weight's sign (VPSIGNB), as ggml's AVX2 code does: |w|·(x·sgn w) = w·x,
// and an adjacent pair sums to at most 2·128·127 = 32512, which int16
// holds for inputs without −128 (QuantizeQ8_0 writes one only in a block
// holding a NaN, and MatMulQPacked gives such an input to the Go twin);
// VPMADDWD with ones then adds a row's two pairs. The packed
// weights are stored +128 (for VPDPBUSD): one VPXOR with 0x80 per step
// gives them back, and VPABSB their magnitude (−128 becomes 0x80, which as
// an unsigned byte is 128), both shared by all inputs. A step's 32 bytes of
// a half are eight rows × four columns, so after VPMADDWD every int32 lane
// holds its row's sum of the step's four products, and after eight steps
// its exact block sum: no horizontal additions, and no −128·Σq, as the
// weights are signed again.
//
// Registers: input j's block sums of rows 0..7 and 8..15 in Y(2j) and
// Y(2j+1); per step the signed weights of the halves in Y8 and Y9 (the
// rows' scales in the epilogue), their magnitudes in Y10 and Y11, the
// ones in Y12, the broadcast input quad in Y13 (d_x in the epilogue), the
// products in Y14 and Y15. The running float sums live in the frame (64
// bytes per input); the epilogue is the Go twin's lane by lane:
// sum += (d_w·d_x)·float(S).
func x86QPackQ8_0AVX2(g *gen, nb int) {
	q8YmmPrologue(g, fmt.Sprintf("qpQ8_0AVX2x%d", nb), nb, "packed input j (x + j*ldx\nbytes, blocks of 40, no value −128)", "", qp2Head)
	g.l("VMOVDQU qp2ones<>(SB), Y12")
	g.label("block")
	for s := range 8 {
		g.l("PREFETCHT0 %d(SI)", 32+64*s+qp2PrefetchQ8_0)
		for h := range 2 {
			g.l("VMOVDQU %d(SI), Y%d", 32+64*s+32*h, 8+h)
			g.l("VPXOR qp2x80<>(SB), Y%d, Y%d", 8+h, 8+h)
			g.l("VPABSB Y%d, Y%d", 8+h, 10+h)
		}
		for j, x := range qp2InputRegs[:nb] {
			g.l("VPBROADCASTD %d(%s), Y13", 4*s, x)
			for h := range 2 {
				t := 14 + h
				g.l("VPSIGNB Y%d, Y13, Y%d", 8+h, t)
				g.l("VPMADDUBSW Y%d, Y%d, Y%d", t, 10+h, t)
				if s == 0 { // the step starts the block's sums
					g.l("VPMADDWD Y12, Y%d, Y%d", t, 2*j+h)
					continue
				}
				g.l("VPMADDWD Y12, Y%d, Y%d", t, t)
				g.l("VPADDD Y%d, Y%d, Y%d", t, 2*j+h, 2*j+h)
			}
		}
	}
	q8YmmBlockEnd(g, qp2InputRegs[:nb], 8, 13, func(h int) int { return 14 + h }, 40, 32)
}

// x86QPackQ8_0AVX2W emits the AVX2 packed Q8_0×Q8_0 kernel of nb inputs
// (up to four) widened to words (WidenQ8_0Inputs: per block the 32 values
// as int16, d at byte 64, −128·Σq at 68, 72 bytes), both halves of a
// group in one pass.
//
// The products run on VPMADDWD alone, the one instruction of the three of
// the sign kernel (VPSIGNB, VPMADDUBSW, VPMADDWD) that does useful work
// per 16 products: all three share the same two pipes on the cores
// measured (Zen 5 class: eight independent of any of them, or four and
// four of two, take four cycles; VPSHUFB, VPADDD, shifts and broadcast
// loads do not compete), so the sign kernel spends 1.5 cycles on 32
// products and this one 1. A step's 32 bytes of a half (eight rows × four
// columns, +128) become two vectors of words by VPSHUFB, shared by all
// inputs: A holds each row's columns 0 and 1 zero-extended in its dword,
// B columns 2 and 3; VPMADDWD with the input's words 0,1 (and 2,3)
// broadcast adds a row's two products in its dword, so both land in the
// row's lane: 8 steps later each lane holds Σ(w+128)·x, started at
// −128·Σq, which is the exact block sum Σw·x for any input (−128
// included: words do not saturate). The epilogue is the sign kernel's.
//
// Registers: input j's block sums of rows 0..7 and 8..15 in Y(2j) and
// Y(2j+1); per step the halves' word vectors A, B in Y8, Y9 and Y10, Y11
// (the rows' scales in the epilogue), the broadcast input words in Y12
// and Y13 (d_x in Y13 in the epilogue), the products in Y14 and Y15 (the
// raw weights in Y14 before them).
func x86QPackQ8_0AVX2W(g *gen, nb int) {
	q8YmmPrologue(g, fmt.Sprintf("qpQ8_0AVX2Wx%d", nb), nb, "widened input j (x + j*ldx\nbytes, blocks of 72)", "", qp2Head)
	g.label("block")
	q8YmmStartSums(g, qp2InputRegs[:nb], 68)
	for s := range 8 {
		g.l("PREFETCHT0 %d(SI)", 32+64*s+qp2PrefetchQ8_0)
		for h := range 2 {
			g.l("VMOVDQU %d(SI), Y14", 32+64*s+32*h)
			g.l("VPSHUFB qpwA<>(SB), Y14, Y%d", 8+2*h)
			g.l("VPSHUFB qpwB<>(SB), Y14, Y%d", 9+2*h)
		}
		for j, x := range qp2InputRegs[:nb] {
			g.l("VPBROADCASTD %d(%s), Y12", 8*s, x)
			g.l("VPBROADCASTD %d(%s), Y13", 8*s+4, x)
			for h := range 2 {
				g.l("VPMADDWD Y12, Y%d, Y14", 8+2*h)
				g.l("VPMADDWD Y13, Y%d, Y15", 9+2*h)
				g.l("VPADDD Y14, Y%d, Y%d", 2*j+h, 2*j+h)
				g.l("VPADDD Y15, Y%d, Y%d", 2*j+h, 2*j+h)
			}
		}
	}
	q8YmmBlockEnd(g, qp2InputRegs[:nb], 8, 13, func(h int) int { return 14 + h }, 72, 64)
}

// x86WidenQ8_0AVX2 emits widenQ8_0AVX2, the AVX2 twin of WidenQ8_0Inputs.
func x86WidenQ8_0AVX2(g *gen) {
	g.text("widenQ8_0AVX2", "$0-24", "func widenQ8_0AVX2(dst *byte, src *byte, blocks int)\n"+
		"Widens blocks packed Q8_0 input blocks (40 bytes) at src to blocks of 72\n"+
		"at dst: the 32 values as int16, then d and the correction as they are.\n"+
		"Requires blocks >= 1.")
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ src+8(FP), SI")
	g.l("MOVQ blocks+16(FP), CX")
	g.label("block")
	g.l("VPMOVSXBW (SI), Y0")
	g.l("VPMOVSXBW 16(SI), Y1")
	g.l("MOVQ 32(SI), AX")
	g.l("VMOVDQU Y0, (DI)")
	g.l("VMOVDQU Y1, 32(DI)")
	g.l("MOVQ AX, 64(DI)")
	g.l("ADDQ $40, SI")
	g.l("ADDQ $72, DI")
	g.l("DECQ CX")
	g.l("JNZ block")
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86QPackQ4KAVX2 emits the AVX2 packed Q4_K×Q8_K kernel for nb inputs.
//
// Per half h (rows 8h..8h+7), super-block and sub-block j of 32 columns:
// the eight weight vectors 8(j/2)+s (32 bytes at 64v+32h: the half's rows
// × four bytes) are masked to their low nibbles (even j) or shifted to
// their high ones (odd j), and VPMADDUBSW with input j's four bytes
// 32j+4s broadcast gives two pair sums per row, added over the eight
// steps in int16 (each at most 2·15·128, eight of them 30720: exact).
// VPMADDWD by the rows' scales, each in both words of its row's dword,
// then adds sc_j times the row's sub-block sum to S in int32. The mins'
// M is four VPMADDWD of the rows' (m_2p, m_2p+1) word pairs with the
// input's pair of sums of 32, and the epilogue is the Go twin's lane by
// lane: sum += (d·D)·S, sum −= (dmin·D)·M.
//
// Registers: running sums of input i in Yi, its S in Y(4+i), its int16
// sub-block sums in Y(8+i) (the mins' word pairs in Y8..Y11 in the
// epilogue); the weights Y12, an input's broadcast bytes Y13, the scales
// Y14, products Y15 (d and dmin in Y12 and Y14 in the epilogue).
func x86QPackQ4KAVX2(g *gen, nb int) { x86QPackQ4K256(g, nb, false) }

// x86QPackQ4K256 emits x86QPackQ4KAVX2's kernel or, with vnni, its
// AVX-VNNI twin qpQ4KAVXVNNIx<nb>: each sub-block's eight VPMADDUBSW and
// VPADDW per input become eight VEX VPDPBUSD into an int32 sum, which
// VPMULLD by the rows' scales (dwords) adds to S.
func x86QPackQ4K256(g *gen, nb int, vnni bool) {
	name := fmt.Sprintf("qpQ4KAVX2x%d", nb)
	if vnni {
		name = fmt.Sprintf("qpQ4KAVXVNNIx%d", nb)
	}
	g.text(name, "$0-48", fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q4_K×Q8_K product of packed\n", nb)+
		"row r (w: blocks super-blocks of 2368 bytes, a quant part of 2048 then a side\n"+
		"part of 320) and packed input j (x + j*ldx bytes, super-blocks of 340),\n"+
		"super-block by super-block as the Go twin sums it. Requires blocks >= 1.")
	mul := "VPMADDWD" // the sub-block scales times the 16-bit sums
	if vnni {
		mul = "VPMULLD" // times the int32 sums VPDPBUSD leaves
	}
	for p, hs := range qp2Passes(nb) {
		qp2Head(g, nb)
		g.l("LEAQ %d(SI), R10", q4KQuants)
		for i := range nb {
			for _, h := range hs {
				y := qp2Sum(nb, i, h)
				g.l("VPXOR Y%d, Y%d, Y%d", y, y, y)
			}
		}
		g.label(fmt.Sprintf("block%d", p))
		for j := range 8 {
			for _, h := range hs {
				g.l("VPMOVZXBD %d(R10), Y14", 16*j+8*h)
				if vnni {
					for i := range nb {
						g.l("VPXOR Y%d, Y%d, Y%d", 8+i, 8+i, 8+i)
					}
				} else {
					g.l("VPSLLD $16, Y14, Y15")
					g.l("VPOR Y15, Y14, Y14")
				}
				for s := range 8 {
					if p == 0 && j%2 == 0 && h == hs[0] {
						g.l("PREFETCHT0 %d(SI)", 64*(8*(j/2)+s)+qp2PrefetchQ4K)
					}
					addr := fmt.Sprintf("%d(SI)", 64*(8*(j/2)+s)+32*h)
					if j%2 == 0 {
						g.l("VMOVDQU %s, Y12", addr)
					} else {
						g.l("VPSRLW $4, %s, Y12", addr)
					}
					g.l("VPAND qp2nib<>(SB), Y12, Y12")
					for i, x := range qp2InputRegs[:nb] {
						g.l("VPBROADCASTD %d(%s), Y13", 32*j+4*s, x)
						if vnni {
							emitVPDPBUSD(g, 8+i, 12, 13)
							continue
						}
						if s == 0 {
							g.l("VPMADDUBSW Y13, Y12, Y%d", 8+i)
							continue
						}
						g.l("VPMADDUBSW Y13, Y12, Y15")
						g.l("VPADDW Y15, Y%d, Y%d", 8+i, 8+i)
					}
				}
				for i := range nb {
					acc := qp2S(nb, i, h)
					if j == 0 {
						g.l("%s Y14, Y%d, Y%d", mul, 8+i, acc)
						continue
					}
					g.l("%s Y14, Y%d, Y15", mul, 8+i)
					g.l("VPADDD Y15, Y%d, Y%d", acc, acc)
				}
			}
		}
		for _, h := range hs {
			g.l("VCVTPH2PS %d(R10), Y12", 256+16*h)
			g.l("VCVTPH2PS %d(R10), Y14", 288+16*h)
			for q := range 4 {
				g.l("VPMOVZXBW %d(R10), Y%d", 128+32*q+16*h, 8+q)
			}
			for i, x := range qp2InputRegs[:nb] {
				s, y := qp2S(nb, i, h), qp2Sum(nb, i, h)
				qp2Scale(g, "VADDPS", s, y, 12, x)
				for q := range 4 {
					g.l("VPBROADCASTD %d(%s), Y13", qKInputBs32+4*q, x)
					if q == 0 {
						g.l("VPMADDWD Y13, Y8, Y%d", s)
						continue
					}
					g.l("VPMADDWD Y13, Y%d, Y15", 8+q)
					g.l("VPADDD Y15, Y%d, Y%d", s, s)
				}
				qp2Scale(g, "VSUBPS", s, y, 14, x)
			}
		}
		g.l("ADDQ $%d, SI", q4KSuper)
		g.l("ADDQ $%d, R10", q4KSuper)
		for _, x := range qp2InputRegs[:nb] {
			g.l("ADDQ $%d, %s", qKInput, x)
		}
		g.l("DECQ CX")
		g.l("JNZ block%d", p)
		g.l("LEAQ (DX)(DX*2), AX")
		for i := range nb {
			for _, h := range hs {
				g.l("VMOVUPS Y%d, %s", qp2Sum(nb, i, h), qp2Out(i, 32*h))
			}
		}
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86QPackQ6KAVX2 emits the AVX2 packed Q6_K×Q8_K kernel for nb inputs.
//
// Per half h, super-block and sub-block j of 16 columns: the half's 32
// bytes of A, B and C (192j, +64, +128, each +32h) give the four weight
// vectors of 6-bit values as q6kUnpack does on AVX-512 (word shifts and
// masks); per input, VPMADDUBSW of each with its broadcast four input
// bytes, two of them added in int16 (at most 2·2·63·128 = 32256: exact),
// VPMADDWD with ones into int32, plus the input's −32·Σq, times the rows'
// signed scales (VPMULLD) added to S, which the twin's epilogue scales
// lane by lane.
//
// Registers: running sums of input i in Yi, its S in Y(4+i); the weight
// vectors Y8..Y11, the scales Y12 (d in the epilogue), an input's
// broadcast bytes Y13, products Y14 and Y15.
func x86QPackQ6KAVX2(g *gen, nb int) { x86QPackQ6K256(g, nb, false) }

// x86QPackQ6K256 emits x86QPackQ6KAVX2's kernel or, with vnni, its
// AVX-VNNI twin qpQ6KAVXVNNIx<nb>: each input's sub-block sum starts at
// its −32·Σq and takes four VEX VPDPBUSD, in place of four VPMADDUBSW,
// two VPADDW, two VPMADDWD and two VPADDD.
func x86QPackQ6K256(g *gen, nb int, vnni bool) {
	name := fmt.Sprintf("qpQ6KAVX2x%d", nb)
	if vnni {
		name = fmt.Sprintf("qpQ6KAVXVNNIx%d", nb)
	}
	g.text(name, "$0-48", fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name)+
		fmt.Sprintf("Sets dst[j*ldd+r] for r < 16 and j < %d to the Q6_K×Q8_K product of packed\n", nb)+
		"row r (w: blocks super-blocks of 3360 bytes, a quant part of 3072 then a side\n"+
		"part of 288) and packed input j (x + j*ldx bytes, super-blocks of 340),\n"+
		"super-block by super-block as the Go twin sums it. Requires blocks >= 1.")
	for p, hs := range qp2Passes(nb) {
		qp2Head(g, nb)
		g.l("LEAQ %d(SI), R10", q6KQuants)
		for i := range nb {
			for _, h := range hs {
				y := qp2Sum(nb, i, h)
				g.l("VPXOR Y%d, Y%d, Y%d", y, y, y)
			}
		}
		g.label(fmt.Sprintf("block%d", p))
		for j := range 16 {
			for _, h := range hs {
				for v := range 3 {
					if p == 0 && h == hs[0] {
						g.l("PREFETCHT0 %d(SI)", 192*j+64*v+qp2PrefetchQ6K)
					}
					g.l("VMOVDQU %d(SI), Y%d", 192*j+64*v+32*h, 8+v)
				}
				g.l("VPSRLW $6, Y8, Y11")
				g.l("VPAND qp2m6<>+32(SB), Y11, Y11")
				g.l("VPSRLW $4, Y9, Y14")
				g.l("VPAND qp2m6<>+64(SB), Y14, Y14")
				g.l("VPOR Y14, Y11, Y11")
				g.l("VPSRLW $2, Y10, Y14")
				g.l("VPAND qp2m6<>+96(SB), Y14, Y14")
				g.l("VPOR Y14, Y11, Y11")
				for v := range 3 {
					g.l("VPAND qp2m6<>+0(SB), Y%d, Y%d", 8+v, 8+v)
				}
				g.l("VPMOVSXBD %d(R10), Y12", 16*j+8*h)
				for i, x := range qp2InputRegs[:nb] {
					acc := qp2S(nb, i, h)
					if vnni {
						g.l("VPBROADCASTD %d(%s), Y14", qKInputCorr+4*j, x)
						for k := range 4 {
							g.l("VPBROADCASTD %d(%s), Y13", 16*j+4*k, x)
							emitVPDPBUSD(g, 14, 8+k, 13)
						}
					}
					for k := range 4 {
						if vnni {
							break
						}
						dst := []int{14, 15, 15, 13}[k]
						g.l("VPBROADCASTD %d(%s), Y13", 16*j+4*k, x)
						g.l("VPMADDUBSW Y13, Y%d, Y%d", 8+k, dst)
						if k%2 == 1 {
							g.l("VPADDW Y%d, Y%d, Y%d", dst, 14+k/2, 14+k/2)
						}
					}
					if !vnni {
						g.l("VPMADDWD qp2ones<>(SB), Y14, Y14")
						g.l("VPMADDWD qp2ones<>(SB), Y15, Y15")
						g.l("VPADDD Y15, Y14, Y14")
						g.l("VPBROADCASTD %d(%s), Y13", qKInputCorr+4*j, x)
						g.l("VPADDD Y13, Y14, Y14")
					}
					if j == 0 {
						g.l("VPMULLD Y12, Y14, Y%d", acc)
						continue
					}
					g.l("VPMULLD Y12, Y14, Y14")
					g.l("VPADDD Y14, Y%d, Y%d", acc, acc)
				}
			}
		}
		for _, h := range hs {
			g.l("VCVTPH2PS %d(R10), Y12", 256+16*h)
			for i, x := range qp2InputRegs[:nb] {
				s, y := qp2S(nb, i, h), qp2Sum(nb, i, h)
				qp2Scale(g, "VADDPS", s, y, 12, x)
			}
		}
		g.l("ADDQ $%d, SI", q6KSuper)
		g.l("ADDQ $%d, R10", q6KSuper)
		for _, x := range qp2InputRegs[:nb] {
			g.l("ADDQ $%d, %s", qKInput, x)
		}
		g.l("DECQ CX")
		g.l("JNZ block%d", p)
		g.l("LEAQ (DX)(DX*2), AX")
		for i := range nb {
			for _, h := range hs {
				g.l("VMOVUPS Y%d, %s", qp2Sum(nb, i, h), qp2Out(i, 32*h))
			}
		}
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

// qp2Consts emits the constants of the AVX2 packed kernels: 32 bytes of
// 0x0F (qp2nib); 32 bytes each of 0x3F, 0x03, 0x0C and 0x30 (qp2m6, the
// Q6_K masks); 16 words of 1 (qp2ones).
func qp2Consts(g *gen) {
	for i := 0; i < 32; i += 8 {
		fmt.Fprintf(&g.b, "DATA qp2nib<>+%d(SB)/8, $0x0f0f0f0f0f0f0f0f\n", i)
	}
	fmt.Fprintf(&g.b, "GLOBL qp2nib<>(SB), RODATA|NOPTR, $32\n\n")
	for k, b := range []uint64{0x3f, 0x03, 0x0c, 0x30} {
		for i := 0; i < 32; i += 8 {
			fmt.Fprintf(&g.b, "DATA qp2m6<>+%d(SB)/8, $0x%016x\n", 32*k+i, b*0x0101010101010101)
		}
	}
	fmt.Fprintf(&g.b, "GLOBL qp2m6<>(SB), RODATA|NOPTR, $128\n\n")
	for i := 0; i < 32; i += 8 {
		fmt.Fprintf(&g.b, "DATA qp2ones<>+%d(SB)/8, $0x0001000100010001\n", i)
	}
	fmt.Fprintf(&g.b, "GLOBL qp2ones<>(SB), RODATA|NOPTR, $32\n\n")
}

// x86QPackAVX2 emits the AVX2 packed kernels.
func x86QPackAVX2(g *gen) {
	qp2Consts(g)
	for i := 0; i < 32; i += 8 {
		fmt.Fprintf(&g.b, "DATA qp2x80<>+%d(SB)/8, $0x8080808080808080\n", i)
	}
	fmt.Fprintf(&g.b, "GLOBL qp2x80<>(SB), RODATA|NOPTR, $32\n\n")
	// Each dword of a step's half (a row's four bytes b0..b3) to the
	// words b0, b1 (qpwA) or b2, b3 (qpwB), zero-extended.
	for k, lo := range []uint64{0, 2} {
		var q uint64
		for r := range uint64(2) {
			q |= (4*r + lo | 0x80<<8 | (4*r+lo+1)<<16 | 0x80<<24) << (32 * r)
		}
		for i := 0; i < 32; i += 8 {
			v := q + uint64(i%16/8)*0x0008000800080008 // lane dwords 2, 3
			fmt.Fprintf(&g.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", []string{"qpwA", "qpwB"}[k], i, v)
		}
		fmt.Fprintf(&g.b, "GLOBL %s<>(SB), RODATA|NOPTR, $32\n\n", []string{"qpwA", "qpwB"}[k])
	}
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ8_0AVX2(g, nb)
	}
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ8_0AVX2W(g, nb)
	}
	x86WidenQ8_0AVX2(g)
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ4KAVX2(g, nb)
	}
	for nb := 1; nb <= qp2MaxInputs; nb++ {
		x86QPackQ6KAVX2(g, nb)
	}
}
