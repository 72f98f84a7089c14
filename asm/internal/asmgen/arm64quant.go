package main

import "fmt"

// The NEON quantized products, in two variants: with SDOT (FEAT_DotProd)
// and with SMULL/SMULL2 and SADDLP/SADALP on base ASIMD. Like the AVX2
// kernels (quant.go) each takes four weight rows, walks the blocks in
// order, keeps the integer part of each block exact in int32 and runs the
// twin's float epilogue per lane (FMUL d_w·d_a, SCVTF, FMUL, FADD or FSUB;
// no fused multiply-add). One input per call.

// word emits one hand-encoded instruction.
func word(g *gen, enc uint32, text string, args ...any) {
	g.l("WORD $0x%08x // %s", enc, fmt.Sprintf(text, args...))
}

func rrr(base uint32, d, n, m int) uint32 { return base | uint32(m)<<16 | uint32(n)<<5 | uint32(d) }

// armDot16 adds to the four int32 lanes of V<acc> the products of the 16
// int8 pairs of V<q> and V<a> (each lane gets some of them; only the lanes'
// total matters). first starts the sum instead. The plain variant uses
// V28 and V29 as scratch.
func armDot16(g *gen, dp bool, acc, q, a int, first bool) {
	if dp {
		if first {
			armZero(g, acc)
		}
		word(g, rrr(0x4E809400, acc, q, a), "SDOT V%d.4S, V%d.16B, V%d.16B", acc, q, a)
		return
	}
	word(g, rrr(0x0E20C000, 28, q, a), "SMULL V28.8H, V%d.8B, V%d.8B", q, a)
	word(g, rrr(0x4E20C000, 29, q, a), "SMULL2 V29.8H, V%d.16B, V%d.16B", q, a)
	if first {
		word(g, rrr(0x4E602800, acc, 28, 0), "SADDLP V%d.4S, V28.8H", acc)
	} else {
		word(g, rrr(0x4E606800, acc, 28, 0), "SADALP V%d.4S, V28.8H", acc)
	}
	word(g, rrr(0x4E606800, acc, 29, 0), "SADALP V%d.4S, V29.8H", acc)
}

// armAddp4 emits ADDP Vd.4S, Vn.4S, Vm.4S (integer).
func armAddp4(g *gen, d, n, m int) {
	word(g, rrr(0x4EA0BC00, d, n, m), "ADDP V%d.4S, V%d.4S, V%d.4S", d, n, m)
}

// armReduce4 leaves in V<a[0]> the four int32 lane totals of V<a[0..3]>.
func armReduce4(g *gen, a [4]int) {
	armAddp4(g, a[0], a[0], a[1])
	armAddp4(g, a[2], a[2], a[3])
	armAddp4(g, a[0], a[0], a[2])
}

// armMlaElem emits MLA Vd.4S, Vn.4S, Vm.S[i].
func armMlaElem(g *gen, d, n, m, i int) {
	enc := uint32(0x6F800000) | uint32(i&1)<<21 | uint32(m)<<16 | uint32(i>>1)<<11 | uint32(n)<<5 | uint32(d)
	word(g, enc, "MLA V%d.4S, V%d.4S, V%d.S[%d]", d, n, m, i)
}

// armQSum adds (sub: subtracts) float32(d·float32(S)) to V30, with S in
// V<s> (int32) and d in V<d>.
func armQSum(g *gen, s, d int, sub bool) {
	word(g, rrr(0x4E21D800, s, s, 0), "SCVTF V%d.4S, V%d.4S", s, s)
	fmulv(g, s, s, d)
	if sub {
		word(g, rrr(0x4EA0D400, 30, 30, s), "FSUB V30.4S, V30.4S, V%d.4S", s)
	} else {
		faddv(g, 30, 30, s)
	}
}

var armQRows = []string{"R1", "R2", "R3", "R4"}

// armQProlog loads the arguments: dst in R0, the weight rows in R1..R4, the
// input in R5, blocks in R6, the running sums in V30.
func armQProlog(g *gen, name, what string, dp bool) {
	g.text(name, "$0-56", qDoc(name, what, 1)+map[bool]string{true: "\nUses SDOT (FEAT_DotProd).", false: ""}[dp])
	g.l("MOVD dst+0(FP), R0")
	g.l("MOVD w+16(FP), R1")
	g.l("MOVD ldw+24(FP), R7")
	g.l("ADD R7, R1, R2")
	g.l("ADD R7, R2, R3")
	g.l("ADD R7, R3, R4")
	g.l("MOVD x+32(FP), R5")
	g.l("MOVD blocks+48(FP), R6")
	g.l("VLD1 (R0), [V30.S4]")
}

func armQEpilog(g *gen) {
	g.l("SUB $1, R6, R6")
	g.l("CBNZ R6, block")
	g.l("VST1 [V30.S4], (R0)")
	g.l("RET")
}

// armHalves loads the binary16 value at each weight row's pointer
// (post-incremented by 2) into lane r of V<d> as float32.
func armHalves(g *gen, d int) {
	for r, p := range armQRows {
		g.l("MOVHU.P 2(%s), R9", p)
		g.l("VMOV R9, V%d.H[%d]", d, r)
	}
	fcvtl(g, d, d, false)
}

// armQDotQ8_0 emits the Q8_0×Q8_0 kernel. Accumulators V0..V3; the input's
// values in V16, V17; a row's in V18, V19.
func armQDotQ8_0(g *gen, dp bool) {
	name := "qdotQ8_0NEON"
	if dp {
		name += "DP"
	}
	armQProlog(g, name, "Q8_0×Q8_0", dp)
	g.label("block")
	g.l("MOVHU.P 2(R5), R9")
	g.l("VDUP R9, V7.H8")
	fcvtl(g, 7, 7, false)
	g.l("VLD1.P 32(R5), [V16.B16, V17.B16]")
	armHalves(g, 6)
	for r, p := range armQRows {
		g.l("VLD1.P 32(%s), [V18.B16, V19.B16]", p)
		armDot16(g, dp, r, 18, 16, true)
		armDot16(g, dp, r, 19, 17, false)
	}
	armReduce4(g, [4]int{0, 1, 2, 3})
	fmulv(g, 6, 6, 7)
	armQSum(g, 0, 6, false)
	armQEpilog(g)
}

// armQDotQ4K emits the Q4_K×Q8_K kernel. Per row: the scales unpacked by
// ggml's masks into general registers, widened to int32 in V20, V21 and the
// mins in V22, V23; per sub-block j the dot product in V4, added times
// sc_j (MLA by element) to the row's accumulator V<r>, and the row's
// Σ m·(Bsums pairs) in V5, V6, V18, V19. The input's d is in V7, its Bsums
// pair sums in V24, V25; the rows' d and dmin in V26, V27; the nibbles in
// V8..V11, split into V12..V15; input values in V16, V17; 0x0f bytes in V31.
//
// With five set it emits the Q5_K×Q8_K kernel: the row's 32 bytes of fifth
// bits (qh, between the scales and the nibbles) go to V22, V23 once the
// mins are used, and before each sub-block's dot product its bit (bit j of
// qh[l] for sub-block j) is moved to bit 4 of each byte in V4 (USHR by j,
// SHL by 7, USHR by 3: byte lanes, so nothing crosses a byte) and ORed into
// the nibbles.
func armQDotQ4K(g *gen, dp, five bool) {
	name, what := "qdotQ4KNEON", "Q4_K×Q8_K"
	if five {
		name, what = "qdotQ5KNEON", "Q5_K×Q8_K"
	}
	if dp {
		name += "DP"
	}
	armQProlog(g, name, what, dp)
	mreg := [4]int{5, 6, 18, 19}
	g.l("VMOVI $15, V31.B16")
	g.label("block")
	// The input: d broadcast in V7, Bsums pair sums in V24, V25.
	g.l("MOVWU (R5), R9")
	g.l("VDUP R9, V7.S4")
	g.l("ADD $260, R5, R10")
	g.l("VLD1 (R10), [V26.H8, V27.H8]")
	word(g, rrr(0x4E602800, 24, 26, 0), "SADDLP V24.4S, V26.8H")
	word(g, rrr(0x4E602800, 25, 27, 0), "SADDLP V25.4S, V27.8H")
	// d and dmin of the four rows in V5, V6.
	for r, p := range armQRows {
		g.l("MOVWU.P 4(%s), R9", p)
		g.l("VMOV R9, V5.S[%d]", r)
	}
	fcvtl(g, 6, 5, true)
	fcvtl(g, 5, 5, false)
	g.l("VUZP1 V6.S4, V5.S4, V26.S4")
	g.l("VUZP2 V6.S4, V5.S4, V27.S4")
	for r, p := range armQRows {
		g.l("MOVWU.P 4(%s), R9", p)  // u0
		g.l("MOVWU.P 4(%s), R10", p) // u1
		g.l("MOVWU.P 4(%s), R11", p) // u2
		// R12 = mins 4..7 = ((u2>>4)&0x0f0f0f0f) | (((u1>>6)&0x03030303)<<4)
		g.l("LSRW $4, R11, R12")
		g.l("ANDW $0x0f0f0f0f, R12, R12")
		g.l("LSRW $6, R10, R13")
		g.l("ANDW $0x03030303, R13, R13")
		g.l("ORRW R13<<4, R12, R12")
		// R10 = mins 0..3
		g.l("ANDW $0x3f3f3f3f, R10, R10")
		// R11 = scales 4..7 = (u2&0x0f0f0f0f) | (((u0>>6)&0x03030303)<<4)
		g.l("ANDW $0x0f0f0f0f, R11, R11")
		g.l("LSRW $6, R9, R13")
		g.l("ANDW $0x03030303, R13, R13")
		g.l("ORRW R13<<4, R11, R11")
		// R9 = scales 0..3
		g.l("ANDW $0x3f3f3f3f, R9, R9")
		g.l("ORR R11<<32, R9, R9")
		g.l("ORR R12<<32, R10, R10")
		g.l("VMOV R9, V20.D[0]")
		g.l("VMOV R10, V22.D[0]")
		word(g, rrr(0x2F08A400, 20, 20, 0), "UXTL V20.8H, V20.8B")
		word(g, rrr(0x6F10A400, 21, 20, 0), "UXTL2 V21.4S, V20.8H")
		word(g, rrr(0x2F10A400, 20, 20, 0), "UXTL V20.4S, V20.4H")
		word(g, rrr(0x2F08A400, 22, 22, 0), "UXTL V22.8H, V22.8B")
		word(g, rrr(0x6F10A400, 23, 22, 0), "UXTL2 V23.4S, V22.8H")
		word(g, rrr(0x2F10A400, 22, 22, 0), "UXTL V22.4S, V22.4H")
		// M of the row: mins times the Bsums pair sums.
		word(g, rrr(0x4EA09C00, mreg[r], 22, 24), "MUL V%d.4S, V22.4S, V24.4S", mreg[r])
		word(g, rrr(0x4EA09400, mreg[r], 23, 25), "MLA V%d.4S, V23.4S, V25.4S", mreg[r])
		if five {
			g.l("VLD1.P 32(%s), [V22.B16, V23.B16]", p)
		}
		// S of the row.
		armZero(g, r)
		g.l("ADD $4, R5, R10")
		for gi := range 2 {
			g.l("VLD1.P 64(%s), [V8.B16, V9.B16, V10.B16, V11.B16]", p)
			for half := range 2 {
				lo, hi := 8+2*half, 9+2*half
				// nibbles of 32 bytes: low into V12, V13; high into V14, V15
				g.l("VAND V31.B16, V%d.B16, V12.B16", lo)
				g.l("VAND V31.B16, V%d.B16, V13.B16", hi)
				g.l("VUSHR $4, V%d.B16, V14.B16", lo)
				g.l("VUSHR $4, V%d.B16, V15.B16", hi)
				for h, q := range [][2]int{{12, 13}, {14, 15}} {
					sub := 4*gi + 2*half + h
					for k, qh := range []int{22, 23} {
						if !five {
							break
						}
						if sub > 0 {
							g.l("VUSHR $%d, V%d.B16, V4.B16", sub, qh)
							g.l("VSHL $7, V4.B16, V4.B16")
						} else {
							g.l("VSHL $7, V%d.B16, V4.B16", qh)
						}
						g.l("VUSHR $3, V4.B16, V4.B16")
						g.l("VORR V4.B16, V%d.B16, V%d.B16", q[k], q[k])
					}
					g.l("VLD1.P 32(R10), [V16.B16, V17.B16]")
					armDot16(g, dp, 4, q[0], 16, true)
					armDot16(g, dp, 4, q[1], 17, false)
					armMlaElem(g, r, 4, 20+sub/4, sub%4)
				}
			}
		}
	}
	armReduce4(g, [4]int{0, 1, 2, 3})
	armReduce4(g, [4]int{mreg[0], mreg[1], mreg[2], mreg[3]})
	fmulv(g, 26, 26, 7)
	fmulv(g, 27, 27, 7)
	armQSum(g, 0, 26, false)
	armQSum(g, mreg[0], 27, true)
	g.l("ADD $292, R5, R5")
	armQEpilog(g)
}

// armQDotQ6K emits the Q6_K×Q8_K kernel. Per row and sub-block of 16: the
// 6-bit values minus 32 as int8 in V14, the dot product with the input in
// V4, added times sc (MLA by element, scales widened to int32 in
// V20..V23) to the row's accumulator V<r>. ql in V10..V13 (one half at a
// time), qh in V8, V9, the high bits in V15; input values in V16; 0x0f
// bytes in V26, 0x30 in V27, 32 in V25 (the plain variant's scratch is
// V28, V29).
func armQDotQ6K(g *gen, dp bool) {
	name := "qdotQ6KNEON"
	if dp {
		name += "DP"
	}
	armQProlog(g, name, "Q6_K×Q8_K", dp)
	g.l("VMOVI $15, V26.B16")
	g.l("VMOVI $48, V27.B16")
	g.l("VMOVI $32, V25.B16")
	g.label("block")
	g.l("MOVWU (R5), R9")
	g.l("VDUP R9, V7.S4")
	for r, p := range armQRows {
		// scales (int8 at 192) widened to int32 in V20..V23
		g.l("ADD $192, %s, R10", p)
		g.l("VLD1 (R10), [V20.B16]")
		word(g, rrr(0x4F08A400, 22, 20, 0), "SXTL2 V22.8H, V20.16B")
		word(g, rrr(0x0F08A400, 20, 20, 0), "SXTL V20.8H, V20.8B")
		word(g, rrr(0x4F10A400, 21, 20, 0), "SXTL2 V21.4S, V20.8H")
		word(g, rrr(0x0F10A400, 20, 20, 0), "SXTL V20.4S, V20.4H")
		word(g, rrr(0x4F10A400, 23, 22, 0), "SXTL2 V23.4S, V22.8H")
		word(g, rrr(0x0F10A400, 22, 22, 0), "SXTL V22.4S, V22.4H")
		armZero(g, r)
		g.l("ADD $4, R5, R10")
		g.l("ADD $128, %s, R11", p)
		g.l("MOVD %s, R12", p)
		for h := range 2 {
			g.l("VLD1.P 64(R12), [V10.B16, V11.B16, V12.B16, V13.B16]")
			g.l("VLD1.P 32(R11), [V8.B16, V9.B16]")
			for k := range 4 {
				for l := range 2 {
					// sub-block 8h+2k+l: ql[32(k%2)+16l], qh[16l] bits 2k..2k+1
					sub := 8*h + 2*k + l
					ql, qh := 10+2*(k%2)+l, 8+l
					if k < 2 {
						g.l("VAND V26.B16, V%d.B16, V14.B16", ql)
					} else {
						g.l("VUSHR $4, V%d.B16, V14.B16", ql)
					}
					switch k {
					case 0:
						g.l("VSHL $4, V%d.B16, V15.B16", qh)
					case 1:
						g.l("VSHL $2, V%d.B16, V15.B16", qh)
					case 2:
						g.l("VORR V%d.B16, V%d.B16, V15.B16", qh, qh)
					case 3:
						g.l("VUSHR $2, V%d.B16, V15.B16", qh)
					}
					g.l("VAND V27.B16, V15.B16, V15.B16")
					g.l("VORR V15.B16, V14.B16, V14.B16")
					g.l("VSUB V25.B16, V14.B16, V14.B16")
					g.l("VLD1.P 16(R10), [V16.B16]")
					armDot16(g, dp, 4, 14, 16, true)
					armMlaElem(g, r, 4, 20+sub/4, sub%4)
				}
			}
		}
	}
	for _, p := range armQRows {
		g.l("ADD $208, %s, %s", p, p)
	}
	armHalves(g, 6)
	armReduce4(g, [4]int{0, 1, 2, 3})
	fmulv(g, 6, 6, 7)
	armQSum(g, 0, 6, false)
	g.l("ADD $292, R5, R5")
	armQEpilog(g)
}

// armQuant emits the file of NEON quantized kernels.
func armQuant(g *gen) {
	for _, dp := range []bool{false, true} {
		armQDotQ8_0(g, dp)
		armQDotQ4K(g, dp, false)
		armQDotQ4K(g, dp, true)
		armQDotQ6K(g, dp)
	}
}
