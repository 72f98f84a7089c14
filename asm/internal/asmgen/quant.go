package main

import "fmt"

// The AVX2 quantized products (GGML block formats, see package quant and
// asm/quant.go). Each kernel takes four weight rows and nb (1 or 2)
// quantized input rows and walks their blocks in order: the integer part of
// each block pair is exact in int32 (any summation order gives the same
// integer), then the block's float epilogue is the Go twin's, lane by lane
// (one lane per weight row): d = fp16(d_w)·d_a with VMULPS, then
// float32(d·float32(S)) with VCVTDQ2PS and VMULPS, added to the row's
// running sum with VADDPS (Q4_K also subtracts float32(dmin·float32(M))).
// No FMA, so every lane rounds as the twin's scalar code does.
//
// The kernels add to dst: the running sums start at dst's values, which the
// driver clears first, so that 0 + t is the twin's first term exactly.

// qSig is the Go signature of every quantized kernel.
func qSig(name string) string {
	return fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)", name)
}

// qDoc documents a quantized kernel.
func qDoc(name, what string, nb int) string {
	return qSig(name) + "\n" + fmt.Sprintf("For r < 4 and j < %d, continues the running sum dst[j*ldd+r] of the %s\n"+
		"product of weight row r (w + r*ldw bytes) and quantized input j (x + j*ldx bytes)\n"+
		"over blocks blocks, block by block as the Go twin sums it. Requires blocks >= 1.", nb, what)
}

// qProlog loads the arguments: dst in DI, ldd in bytes in DX, the weight
// rows in SI, R10, R11, R12, the inputs in R13 (and R14), blocks in CX, and
// the running sums into X14 (and X15).
func qProlog(g *gen, nb int) {
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ ldd+8(FP), DX")
	g.l("SHLQ $2, DX")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ ldw+24(FP), R8")
	g.l("LEAQ (SI)(R8*1), R10")
	g.l("LEAQ (R10)(R8*1), R11")
	g.l("LEAQ (R11)(R8*1), R12")
	g.l("MOVQ x+32(FP), R13")
	g.l("MOVQ ldx+40(FP), R9")
	g.l("LEAQ (R13)(R9*1), R14")
	g.l("MOVQ blocks+48(FP), CX")
	g.l("VMOVUPS (DI), X14")
	if nb == 2 {
		g.l("VMOVUPS (DI)(DX*1), X15")
	}
	// DX = 4*ldw: the kernels prefetch the next four rows' blocks, which
	// the driver passes next, one whole group ahead.
	g.l("LEAQ (R8*4), DX")
}

// qPrefetch emits the prefetch of the next group's copy of the current
// block of each weight row (bytes of a block).
func qPrefetch(g *gen, bytes int) {
	for _, p := range qWRows {
		for off := 0; off < bytes; off += 64 {
			g.l("PREFETCHT0 %d(%s)(DX*1)", off, p)
		}
	}
}

// qEpilog advances the pointers by one block, loops, and stores the sums.
func qEpilog(g *gen, nb, wBytes, xBytes int) {
	for _, p := range qWRows {
		g.l("ADDQ $%d, %s", wBytes, p)
	}
	for _, p := range qXRows[:nb] {
		g.l("ADDQ $%d, %s", xBytes, p)
	}
	g.l("DECQ CX")
	g.l("JNZ block")
	g.l("VMOVUPS X14, (DI)")
	if nb == 2 {
		g.l("MOVQ ldd+8(FP), DX")
		g.l("SHLQ $2, DX")
		g.l("VMOVUPS X15, (DI)(DX*1)")
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

var (
	qWRows = []string{"SI", "R10", "R11", "R12"}
	qXRows = []string{"R13", "R14"}
)

// qReduce4 leaves in X<a[0]> the four int32 sums of the vectors Y<a[0..3]>,
// in that order; t is a scratch register. a[1..3] are clobbered.
func qReduce4(g *gen, a [4]int, t int) {
	g.l("VPHADDD Y%d, Y%d, Y%d", a[1], a[0], a[0])
	g.l("VPHADDD Y%d, Y%d, Y%d", a[3], a[2], a[2])
	g.l("VPHADDD Y%d, Y%d, Y%d", a[2], a[0], a[0])
	g.l("VEXTRACTI128 $1, Y%d, X%d", a[0], t)
	g.l("VPADDD X%d, X%d, X%d", t, a[0], a[0])
}

// qHalves loads the binary16 values at off in each weight row into the four
// lanes of X<dst> as float32.
func qHalves(g *gen, off, dst int) {
	g.l("MOVWLZX %d(SI), AX", off)
	g.l("VMOVD AX, X%d", dst)
	for r, p := range qWRows[1:] {
		g.l("VPINSRW $%d, %d(%s), X%d, X%d", r+1, off, p, dst, dst)
	}
	g.l("VCVTPH2PS X%d, X%d", dst, dst)
}

// qSum adds float32(d·float32(S)) to the running sum of input j, with the
// int32 sums S in X<s> and d in X<d>; sub subtracts instead.
func qSum(g *gen, j, s, d int, sub bool) {
	g.l("VCVTDQ2PS X%d, X%d", s, s)
	g.l("VMULPS X%d, X%d, X%d", d, s, s)
	op := "VADDPS"
	if sub {
		op = "VSUBPS"
	}
	g.l("%s X%d, X%d, X%d", op, s, 14+j, 14+j)
}

// x86QDotQ8_0 emits the Q8_0×Q8_0 kernel. Blocks are 34 bytes on both
// sides (fp16 d, 32 int8). The int8 values are sign-extended to int16 and
// multiplied with VPMADDWD, exact for every byte value (ggml's VPSIGNB and
// VPMADDUBSW trick is not when both values are -128).
//
// Registers: inputs j widened in Y10+2j, Y11+2j; a weight row in Y8, Y9;
// the products of rows 0, 1 for input j in Y4j, Y4j+1 (then their VPHADDD
// in Y4j), rows 2, 3 in Y4j+1, Y4j+2, scratch Y4j+2 or Y4j+3.
func x86QDotQ8_0(g *gen, nb int) {
	name := fmt.Sprintf("qdotQ8_0AVX2x%d", nb)
	g.text(name, "$0-56", qDoc(name, "Q8_0×Q8_0", nb))
	qProlog(g, nb)
	g.label("block")
	qPrefetch(g, 34)
	for j := range nb {
		g.l("VPMOVSXBW 2(%s), Y%d", qXRows[j], 10+2*j)
		g.l("VPMOVSXBW 18(%s), Y%d", qXRows[j], 11+2*j)
	}
	for r, p := range qWRows {
		g.l("VPMOVSXBW 2(%s), Y8", p)
		g.l("VPMOVSXBW 18(%s), Y9", p)
		for j := range nb {
			acc, tmp := 4*j+r, 4*j+2
			if r >= 2 {
				acc, tmp = 4*j+r-1, 4*j+3
			}
			g.l("VPMADDWD Y%d, Y8, Y%d", 10+2*j, acc)
			g.l("VPMADDWD Y%d, Y9, Y%d", 11+2*j, tmp)
			g.l("VPADDD Y%d, Y%d, Y%d", tmp, acc, acc)
		}
		if r == 1 {
			for j := range nb {
				g.l("VPHADDD Y%d, Y%d, Y%d", 4*j+1, 4*j, 4*j)
			}
		}
	}
	qHalves(g, 0, 8)
	for j := range nb {
		h := 4 * j
		g.l("VPHADDD Y%d, Y%d, Y%d", h+2, h+1, h+1)
		g.l("VPHADDD Y%d, Y%d, Y%d", h+1, h, h)
		g.l("VEXTRACTI128 $1, Y%d, X%d", h, h+1)
		g.l("VPADDD X%d, X%d, X%d", h+1, h, h)
		g.l("VPBROADCASTW (%s), X9", qXRows[j])
		g.l("VCVTPH2PS X9, X9")
		g.l("VMULPS X9, X8, X9")
		qSum(g, j, h, 9, false)
	}
	qEpilog(g, nb, 34, 34)
}

// Frame of the Q4_K kernels: per weight row r the eight mins, each twice,
// as int16 at qMins+32r; the unpacked scales and mins of rows 2p and 2p+1
// at qUnpacked+32p.
const (
	qMins     = 0
	qUnpacked = 128
	qFrame    = 192
)

// x86QDotQ4K emits the Q4_K×Q8_K kernel. A Q4_K block is 144 bytes (fp16 d,
// fp16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles); a
// Q8_K block is 292 bytes (float32 d, 256 int8, 16 int16 Bsums). Per block:
//
//	S = Σ_j sc_j·Σ_{32 values of sub-block j} q·a   (VPMADDUBSW, then VPMADDWD by sc_j)
//	M = Σ_{k<16} m_{k/2}·Bsums[k]                  (VPMADDWD)
//
// The scales and mins are unpacked with ggml's 32-bit masks, two rows per
// vector; a row's eight scales, in every other quadword of Y12, are each
// spread to all words by VPSHUFB (q4kbcast), and its mins kept in the frame
// until the block's S is done.
//
// Registers: accumulator of row r, input j in Y(r+4j); nibbles in Y8, Y9;
// products in Y10; a spread scale in Y11; the row's scales in Y12; 0x0f
// bytes in Y13.
//
// With five set it emits the Q5_K×Q8_K kernel instead: a Q5_K block is 176
// bytes, Q4_K's with 32 bytes of fifth bits (qh) between the scales and the
// nibbles. Value 64g+l (l < 32) takes bit 2g of qh[l] and value 64g+32+l
// bit 2g+1 as its bit 4: a word shift brings that bit to bit 4 of each byte
// (it never crosses a byte for bits 0..7 shifted to 4), a mask of 0x10 bytes
// keeps it and VPOR adds it to the nibbles. The values are then 0..31, so
// VPMADDUBSW's pair sums (≤ 2·31·127) stay exact in int16 as for Q4_K.
func x86QDotQ4K(g *gen, nb int, five bool) {
	name, what, wBytes, qsOff := fmt.Sprintf("qdotQ4KAVX2x%d", nb), "Q4_K×Q8_K", 144, 16
	if five {
		name, what, wBytes, qsOff = fmt.Sprintf("qdotQ5KAVX2x%d", nb), "Q5_K×Q8_K", 176, 48
	}
	g.text(name, fmt.Sprintf("$%d-56", qFrame), qDoc(name, what, nb))
	qProlog(g, nb)
	g.l("MOVL $0x0f0f0f0f, AX")
	g.l("VMOVD AX, X13")
	g.l("VPBROADCASTD X13, Y13")
	g.label("block")
	qPrefetch(g, wBytes)
	// ggml's unpacking of the 12 bytes u0, u1, u2 of scales and mins, two
	// rows per vector (a row per 128-bit lane):
	//	scales 0..3 = u0&0x3f3f3f3f, mins 0..3 = u1&0x3f3f3f3f
	//	scales 4..7 = (u2&0x0f0f0f0f) | ((u0>>2)&0x30303030)
	//	mins 4..7 = ((u2>>4)&0x0f0f0f0f) | ((u1>>2)&0x30303030)
	// leaves in each lane the scales in its low and the mins in its high
	// quadword, kept in the frame at qUnpacked.
	for pair := range 2 {
		g.l("VMOVDQU 4(%s), X0", qWRows[2*pair])
		g.l("VINSERTI128 $1, 4(%s), Y0, Y0", qWRows[2*pair+1])
		g.l("VPAND q4kc<>+64(SB), Y0, Y1")
		g.l("VPSRLD $2, Y0, Y2")
		g.l("VPAND q4kc<>+96(SB), Y2, Y2")
		g.l("VPSHUFD $0xaa, Y0, Y3")
		g.l("VPSRLVD q4kc<>+32(SB), Y3, Y3")
		g.l("VPAND Y13, Y3, Y3")
		g.l("VPOR Y3, Y2, Y2")
		g.l("VPUNPCKLDQ Y2, Y1, Y1")
		g.l("VMOVDQU Y1, %d(SP)", qUnpacked+32*pair)
	}
	for r, p := range qWRows {
		// Y12 = the row's scales and mins in both lanes; its mins, each
		// twice, as words, to the frame.
		g.l("VPERMQ $0x%02x, %d(SP), Y12", []int{0x44, 0xee}[r%2], qUnpacked+32*(r/2))
		g.l("VPSHUFB q4kc<>+0(SB), Y12, Y11")
		g.l("VMOVDQU Y11, %d(SP)", qMins+32*r)
		for gi := range 4 {
			g.l("VMOVDQU %d(%s), Y9", qsOff+32*gi, p)
			g.l("VPAND Y13, Y9, Y8")
			g.l("VPSRLW $4, Y9, Y9")
			g.l("VPAND Y13, Y9, Y9")
			for h, q := range []int{8, 9} {
				if !five {
					break
				}
				g.l("VMOVDQU 16(%s), Y10", p)
				switch bit := 2*gi + h; {
				case bit < 4:
					g.l("VPSLLW $%d, Y10, Y10", 4-bit)
				case bit > 4:
					g.l("VPSRLW $%d, Y10, Y10", bit-4)
				}
				g.l("VPAND q4kc<>+128(SB), Y10, Y10")
				g.l("VPOR Y10, Y%d, Y%d", q, q)
			}
			for h, q := range []int{8, 9} {
				sub := 2*gi + h
				g.l("VPSHUFB q4kbcast<>+%d(SB), Y12, Y11", 32*sub)
				for j := range nb {
					acc := r + 4*j
					g.l("VPMADDUBSW %d(%s), Y%d, Y10", 4+32*sub, qXRows[j], q)
					g.l("VPMADDWD Y11, Y10, Y10")
					if gi == 0 && h == 0 {
						g.l("VMOVDQA Y10, Y%d", acc)
					} else {
						g.l("VPADDD Y10, Y%d, Y%d", acc, acc)
					}
				}
			}
		}
	}
	// S of input j in X(4j).
	for j := range nb {
		qReduce4(g, [4]int{4 * j, 4*j + 1, 4*j + 2, 4*j + 3}, 8)
	}
	// d in X1, dmin in X2 (lanes = rows).
	g.l("VMOVD (SI), X1")
	for r, p := range qWRows[1:] {
		g.l("VPINSRD $%d, (%s), X1, X1", r+1, p)
	}
	g.l("VCVTPH2PS X1, Y1")
	g.l("VEXTRACTF128 $1, Y1, X3")
	g.l("VSHUFPS $0xdd, X3, X1, X2")
	g.l("VSHUFPS $0x88, X3, X1, X1")
	for j := range nb {
		x := qXRows[j]
		for r := range 4 {
			g.l("VMOVDQU %d(SP), Y8", qMins+32*r)
			g.l("VPMADDWD 260(%s), Y8, Y%d", x, 9+r)
		}
		qReduce4(g, [4]int{9, 10, 11, 12}, 8)
		g.l("VBROADCASTSS (%s), X10", x)
		g.l("VMULPS X10, X1, X11")
		qSum(g, j, 4*j, 11, false)
		g.l("VMULPS X10, X2, X11")
		qSum(g, j, 9, 11, true)
	}
	qEpilog(g, nb, wBytes, 292)
}

// x86QDotQ6K emits the Q6_K×Q8_K kernel. A Q6_K block is 210 bytes (128
// bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, fp16 d). Per
// block, with q the unsigned 6-bit values,
//
//	S = Σ_k sc_k·Σ_{16 values of sub-block k} q·a − 32·Σ_k sc_k·Bsums[k]
//
// the first part with VPMADDUBSW and VPMADDWD by a vector holding sc_k in
// its low 128 bits and sc_k+1 in its high 128 bits (VPSHUFB from q6kshuf,
// then VPMOVSXBW), the second with one VPMADDWD against Bsums.
//
// Registers: accumulator of row r, input j in Y(r+4j); the 6-bit values in
// Y8, scratch and products in Y9; scales in Y10; the row's 16 scales in
// X11; 0x30 bytes in Y12, 0x0f bytes in Y13.
func x86QDotQ6K(g *gen, nb int) {
	name := fmt.Sprintf("qdotQ6KAVX2x%d", nb)
	g.text(name, "$0-56", qDoc(name, "Q6_K×Q8_K", nb))
	qProlog(g, nb)
	g.l("MOVL $0x0f0f0f0f, AX")
	g.l("VMOVD AX, X13")
	g.l("VPBROADCASTD X13, Y13")
	g.l("MOVL $0x30303030, AX")
	g.l("VMOVD AX, X12")
	g.l("VPBROADCASTD X12, Y12")
	g.label("block")
	qPrefetch(g, 210)
	for r, p := range qWRows {
		g.l("VMOVDQU 192(%s), X11", p)
		g.l("VPMOVSXBW X11, Y10")
		for j := range nb {
			acc := r + 4*j
			g.l("VPMADDWD 260(%s), Y10, Y9", qXRows[j])
			g.l("VPSLLD $5, Y9, Y9")
			g.l("VPXOR Y%d, Y%d, Y%d", acc, acc, acc)
			g.l("VPSUBD Y9, Y%d, Y%d", acc, acc)
		}
		for h := range 2 {
			ql, qh := 64*h, 128+32*h
			for k := range 4 {
				// low four bits
				g.l("VMOVDQU %d(%s), Y8", ql+32*(k%2), p)
				if k >= 2 {
					g.l("VPSRLW $4, Y8, Y8")
				}
				g.l("VPAND Y13, Y8, Y8")
				// high two bits, moved to bits 4 and 5
				g.l("VMOVDQU %d(%s), Y9", qh, p)
				switch k {
				case 0:
					g.l("VPSLLW $4, Y9, Y9")
				case 1:
					g.l("VPSLLW $2, Y9, Y9")
				case 3:
					g.l("VPSRLW $2, Y9, Y9")
				}
				g.l("VPAND Y12, Y9, Y9")
				g.l("VPOR Y9, Y8, Y8")
				g.l("VPSHUFB q6kshuf<>+%d(SB), X11, X10", 16*(4*h+k))
				g.l("VPMOVSXBW X10, Y10")
				for j := range nb {
					acc := r + 4*j
					g.l("VPMADDUBSW %d(%s), Y8, Y9", 4+128*h+32*k, qXRows[j])
					g.l("VPMADDWD Y10, Y9, Y9")
					g.l("VPADDD Y9, Y%d, Y%d", acc, acc)
				}
			}
		}
	}
	qHalves(g, 208, 8)
	for j := range nb {
		qReduce4(g, [4]int{4 * j, 4*j + 1, 4*j + 2, 4*j + 3}, 9)
		g.l("VBROADCASTSS (%s), X10", qXRows[j])
		g.l("VMULPS X10, X8, X10")
		qSum(g, j, 4*j, 10, false)
	}
	qEpilog(g, nb, 210, 292)
}

// q6kTable emits q6kshuf: for k < 8, 16 bytes selecting byte 2k eight
// times, then byte 2k+1 eight times.
func q6kTable(g *gen) {
	for k := range 8 {
		lo := uint64(0x0101010101010101) * uint64(2*k)
		hi := uint64(0x0101010101010101) * uint64(2*k+1)
		fmt.Fprintf(&g.b, "DATA q6kshuf<>+%d(SB)/8, $0x%016x\n", 16*k, lo)
		fmt.Fprintf(&g.b, "DATA q6kshuf<>+%d(SB)/8, $0x%016x\n", 16*k+8, hi)
	}
	fmt.Fprintf(&g.b, "GLOBL q6kshuf<>(SB), RODATA|NOPTR, $128\n\n")
}

// q4kConst emits q4kc: at 0 the VPSHUFB mask that spreads a lane's mins
// (its high quadword) to words m0, m0, m1, m1, ... (lane 0: m0..m3, lane 1:
// m4..m7), at 32 the shift counts 0, 4, 0, 0 per lane, at 64 0x3f bytes,
// at 96 0x30 bytes, at 128 0x10 bytes (Q5_K's fifth bit).
func q4kConst(g *gen) {
	var b [160]byte
	for lane := range 2 {
		for w := range 8 {
			b[16*lane+2*w] = byte(8 + 4*lane + w/2)
			b[16*lane+2*w+1] = 0x80
		}
		b[32+16*lane+4] = 4
	}
	for i := range 32 {
		b[64+i], b[96+i], b[128+i] = 0x3f, 0x30, 0x10
	}
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for k := 7; k >= 0; k-- {
			v = v<<8 | uint64(b[i+k])
		}
		fmt.Fprintf(&g.b, "DATA q4kc<>+%d(SB)/8, $0x%016x\n", i, v)
	}
	fmt.Fprintf(&g.b, "GLOBL q4kc<>(SB), RODATA|NOPTR, $%d\n\n", len(b))
}

// q4kTable emits q4kbcast: for k < 8, 32 bytes whose words select byte k
// zero-extended (VPSHUFB of the eight scales broadcast to every quadword).
func q4kTable(g *gen) {
	for k := range 8 {
		v := uint64(0x8000800080008000) | uint64(0x0001000100010001)*uint64(k)
		for i := range 4 {
			fmt.Fprintf(&g.b, "DATA q4kbcast<>+%d(SB)/8, $0x%016x\n", 32*k+8*i, v)
		}
	}
	fmt.Fprintf(&g.b, "GLOBL q4kbcast<>(SB), RODATA|NOPTR, $256\n\n")
}

// x86Quant emits the file of AVX2 quantized kernels and activation quantizers.
func x86Quant(g *gen) {
	q4kConst(g)
	q4kTable(g)
	q6kTable(g)
	x86QuantQ8K(g)
	x86QuantQ8_0(g)
	for _, nb := range []int{1, 2} {
		x86QDotQ8_0(g, nb)
		x86QDotQ4K(g, nb, false)
		x86QDotQ4K(g, nb, true)
		x86QDotQ6K(g, nb)
	}
}

// q8kConst is the constant table of quantQ8KAVX2, each dword value eight
// times (32 bytes), except perm, the VPERMD index.
var q8kConst = []struct {
	name string
	vals [8]uint32
}{
	{"abs", splat(0x7fffffff)},
	{"magic", splat(f32bits(12582912))}, // 1.5·2^23: nearest_int's addend
	{"mant", splat(0x007fffff)},
	{"half", splat(0x00400000)},
	{"i127", splat(127)},
	{"byte", splat(0xff)},
	{"ones8", splat(0x01010101)},
	{"ones16", splat(0x00010001)},
	{"perm", [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}},
}

func splat(v uint32) [8]uint32 { return [8]uint32{v, v, v, v, v, v, v, v} }

func q8kRef(name string) string {
	for i, c := range q8kConst {
		if c.name == name {
			return fmt.Sprintf("q8kc<>+%d(SB)", 32*i)
		}
	}
	panic("asmgen: no Q8_K constant " + name)
}

// x86QuantQ8K emits the AVX2 Q8_K activation quantizer, ggml's
// quantize_row_q8_K_ref as package quant's QuantizeQ8K computes it, byte
// for byte: per block of 256, amax = max|x| (VMAXPS with the running
// maximum as the operand returned for NaN, so NaN is skipped as the Go
// loop's a > amax skips it), mx the first value with |x| = amax, iscale =
// -127/mx (VDIVSS), q = min(127, nearest_int(iscale·x)) by the same magic
// addend as the twin (VMULPS, VADDPS, mantissa bits − 2^22, VPMINSD), kept
// to its low byte, D = 1/iscale, and Bsums from the stored bytes
// (VPMADDUBSW and VPMADDWD by ones, VPHADDD). An all-zero block (amax = 0)
// is stored as zeros.
func x86QuantQ8K(g *gen) {
	for i, c := range q8kConst {
		for j, v := range c.vals {
			fmt.Fprintf(&g.b, "DATA q8kc<>+%d(SB)/4, $0x%08x\n", 32*i+4*j, v)
		}
	}
	fmt.Fprintf(&g.b, "GLOBL q8kc<>(SB), RODATA|NOPTR, $%d\n\n", 32*len(q8kConst))
	name := "quantQ8KAVX2"
	g.text(name, "$0-24", "func "+name+"(dst *byte, x *float32, blocks int)\n"+
		"Quantizes blocks blocks of 256 values at x into Q8_K blocks (292 bytes) at dst.\n"+
		"Requires blocks >= 1.")
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ blocks+16(FP), CX")
	g.l("VMOVDQU %s, Y15", q8kRef("abs"))
	g.l("VMOVDQU %s, Y14", q8kRef("magic"))
	g.l("VMOVDQU %s, Y13", q8kRef("mant"))
	g.l("VMOVDQU %s, Y12", q8kRef("half"))
	g.l("VMOVDQU %s, Y11", q8kRef("i127"))
	g.l("VMOVDQU %s, Y10", q8kRef("byte"))
	g.l("VMOVDQU %s, Y9", q8kRef("perm"))
	g.label("block")
	// amax in four running maxima; a NaN |x| returns the running one.
	for u := range 4 {
		g.l("VXORPS Y%d, Y%d, Y%d", u, u, u)
	}
	for i := range 32 {
		g.l("VANDPS %d(SI), Y15, Y4", 32*i)
		g.l("VMAXPS Y%d, Y4, Y%d", i%4, i%4)
	}
	g.l("VMAXPS Y1, Y0, Y0")
	g.l("VMAXPS Y3, Y2, Y2")
	g.l("VMAXPS Y2, Y0, Y0")
	g.l("VEXTRACTF128 $1, Y0, X1")
	g.l("VMAXPS X1, X0, X0")
	g.l("VPERMILPS $0x4e, X0, X1")
	g.l("VMAXPS X1, X0, X0")
	g.l("VPERMILPS $0xb1, X0, X1")
	g.l("VMAXPS X1, X0, X0")
	g.l("VXORPS X1, X1, X1")
	g.l("VUCOMISS X1, X0")
	g.l("JEQ zero")
	g.l("VBROADCASTSS X0, Y5")
	// mx: the first value whose magnitude is amax.
	g.l("XORQ AX, AX")
	g.label("find")
	g.l("VANDPS (SI)(AX*1), Y15, Y4")
	g.l("VCMPPS $0, Y5, Y4, Y4")
	g.l("VMOVMSKPS Y4, BX")
	g.l("TESTL BX, BX")
	g.l("JNZ found")
	g.l("ADDQ $32, AX")
	g.l("JMP find")
	g.label("found")
	g.l("BSFL BX, BX")
	g.l("LEAQ (AX)(BX*4), AX")
	g.l("VMOVSS (SI)(AX*1), X7")
	g.l("MOVL $0x%08x, AX", f32bits(-127))
	g.l("VMOVD AX, X8")
	g.l("VDIVSS X7, X8, X8") // iscale = -127/mx
	g.l("MOVL $0x%08x, AX", f32bits(1))
	g.l("VMOVD AX, X6")
	g.l("VDIVSS X8, X6, X6") // D = 1/iscale
	g.l("VMOVSS X6, (DI)")
	g.l("VBROADCASTSS X8, Y8")
	for k := range 8 {
		for u := range 4 {
			y := fmt.Sprintf("Y%d", u)
			g.l("VMULPS %d(SI), Y8, %s", 128*k+32*u, y)
			g.l("VADDPS Y14, %s, %s", y, y)
			g.l("VPAND Y13, %s, %s", y, y)
			g.l("VPSUBD Y12, %s, %s", y, y)
			g.l("VPMINSD Y11, %s, %s", y, y)
			g.l("VPAND Y10, %s, %s", y, y)
		}
		g.l("VPACKUSDW Y1, Y0, Y0")
		g.l("VPACKUSDW Y3, Y2, Y2")
		g.l("VPACKUSWB Y2, Y0, Y0")
		g.l("VPERMD Y0, Y9, Y0")
		g.l("VMOVDQU Y0, %d(DI)", 4+32*k)
	}
	// Bsums: per 32 bytes, lane sums of the bytes; R = [B0 B2 B4 B6 | B1 B3 B5 B7].
	g.l("VMOVDQU %s, Y6", q8kRef("ones8"))
	for half := range 2 {
		for k := range 4 {
			y := fmt.Sprintf("Y%d", k)
			g.l("VMOVDQU %d(DI), %s", 4+32*(4*half+k), y)
			g.l("VPMADDUBSW %s, Y6, %s", y, y)
			g.l("VPMADDWD %s, %s, %s", q8kRef("ones16"), y, y)
		}
		g.l("VPHADDD Y1, Y0, Y0")
		g.l("VPHADDD Y3, Y2, Y2")
		g.l("VPHADDD Y2, Y0, Y%d", 4+half)
	}
	g.l("VPACKSSDW Y5, Y4, Y4") // [B0 B2 .. B14 | B1 B3 .. B15]
	g.l("VEXTRACTI128 $1, Y4, X5")
	g.l("VPUNPCKLWD X5, X4, X6")
	g.l("VPUNPCKHWD X5, X4, X7")
	g.l("VMOVDQU X6, 260(DI)")
	g.l("VMOVDQU X7, 276(DI)")
	g.label("next")
	g.l("ADDQ $1024, SI")
	g.l("ADDQ $292, DI")
	g.l("DECQ CX")
	g.l("JNZ block")
	g.l("VZEROUPPER")
	g.l("RET")
	g.label("zero")
	g.l("VPXOR Y0, Y0, Y0")
	for i := range 9 {
		g.l("VMOVDQU Y0, %d(DI)", 32*i)
	}
	g.l("MOVL $0, 288(DI)")
	g.l("JMP next")
}

// x86QuantQ8_0 emits the AVX2 Q8_0 activation quantizer, ggml's
// quantize_row_q8_0_ref as package quant's QuantizeQ8_0 computes it, byte
// for byte on rows without NaN: per block of 32, amax = max|x|, d =
// amax/127 and id = 1/d (0 when d is 0) by VDIVSS, q = roundf(x·id) (half
// away from zero: truncate, then add ±1 where the exact remainder is at
// least 0.5), the low byte of the int32 conversion (VCVTTPS2DQ, whose
// 0x80000000 for values out of range or NaN has low byte 0, as the twin
// has), and D = fp16(d) by VCVTPS2PH rounding to nearest even. The result
// reports whether some value was NaN: the twin's NaN rule (!(amax > a))
// is not reproduced, and the caller quantizes such a row again in Go.
func x86QuantQ8_0(g *gen) {
	name := "quantQ8_0AVX2"
	g.text(name, "$0-25", "func "+name+"(dst *byte, x *float32, blocks int) (nan bool)\n"+
		"Quantizes blocks blocks of 32 values at x into Q8_0 blocks (34 bytes) at dst.\n"+
		"Requires blocks >= 1.")
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ blocks+16(FP), CX")
	g.l("VMOVDQU %s, Y15", q8kRef("abs"))
	g.l("VMOVDQU %s, Y10", q8kRef("byte"))
	g.l("VMOVDQU %s, Y9", q8kRef("perm"))
	g.l("MOVL $0x%08x, AX", f32bits(0.5))
	g.l("VMOVD AX, X14")
	g.l("VPBROADCASTD X14, Y14")
	g.l("MOVL $0x%08x, AX", f32bits(1))
	g.l("VMOVD AX, X13")
	g.l("VPBROADCASTD X13, Y13")
	g.l("MOVL $0x%08x, AX", f32bits(127))
	g.l("VMOVD AX, X12")
	g.l("VXORPS Y11, Y11, Y11") // NaN flags
	g.label("block")
	for u := range 4 {
		g.l("VMOVUPS %d(SI), Y%d", 32*u, u)
		g.l("VCMPPS $3, Y%d, Y%d, Y8", u, u) // unordered: NaN
		g.l("VORPS Y8, Y11, Y11")
		g.l("VANDPS Y15, Y%d, Y%d", u, 4+u)
	}
	g.l("VMAXPS Y5, Y4, Y4")
	g.l("VMAXPS Y7, Y6, Y6")
	g.l("VMAXPS Y6, Y4, Y4")
	g.l("VEXTRACTF128 $1, Y4, X5")
	g.l("VMAXPS X5, X4, X4")
	g.l("VPERMILPS $0x4e, X4, X5")
	g.l("VMAXPS X5, X4, X4")
	g.l("VPERMILPS $0xb1, X4, X5")
	g.l("VMAXPS X5, X4, X4")
	g.l("VDIVSS X12, X4, X4") // d = amax/127
	g.l("VCVTPS2PH $0, X4, X5")
	g.l("VPEXTRW $0, X5, AX")
	g.l("MOVW AX, (DI)")
	g.l("VXORPS X5, X5, X5")
	g.l("VUCOMISS X5, X4")
	g.l("JEQ idzero")
	g.l("VDIVSS X4, X13, X5") // id = 1/d
	g.label("idzero")
	g.l("VBROADCASTSS X5, Y8")
	for u := range 4 {
		y, t := fmt.Sprintf("Y%d", u), "Y4"
		g.l("VMULPS Y8, %s, %s", y, y)   // v = x·id
		g.l("VROUNDPS $3, %s, %s", y, t) // t = trunc(v)
		g.l("VSUBPS %s, %s, Y5", t, y)   // v - t, exact
		g.l("VANDPS Y15, Y5, Y5")
		g.l("VCMPPS $0x1d, Y14, Y5, Y5") // |v - t| >= 0.5
		g.l("VANDNPS %s, Y15, Y6", y)    // sign of v
		g.l("VORPS Y13, Y6, Y6")         // ±1
		g.l("VANDPS Y6, Y5, Y5")
		g.l("VADDPS Y5, %s, %s", t, t)
		g.l("VCVTTPS2DQ %s, %s", t, y)
		g.l("VPAND Y10, %s, %s", y, y)
	}
	g.l("VPACKUSDW Y1, Y0, Y0")
	g.l("VPACKUSDW Y3, Y2, Y2")
	g.l("VPACKUSWB Y2, Y0, Y0")
	g.l("VPERMD Y0, Y9, Y0")
	g.l("VMOVDQU Y0, 2(DI)")
	g.l("ADDQ $128, SI")
	g.l("ADDQ $34, DI")
	g.l("DECQ CX")
	g.l("JNZ block")
	g.l("VMOVMSKPS Y11, AX")
	g.l("TESTL AX, AX")
	g.l("SETNE nan+24(FP)")
	g.l("VZEROUPPER")
	g.l("RET")
}
