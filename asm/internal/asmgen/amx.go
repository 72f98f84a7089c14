package main

import (
	"fmt"
	"strings"
)

// AMX instructions, which the Go assembler lacks, written as the bytes
// the Intel SDM gives (VEX, map 0F38, W0, L0); only the registers AX, CX,
// DX, BX, SI and DI serve as tile load and store addresses.
var gpr = map[string]byte{"AX": 0, "CX": 1, "DX": 2, "BX": 3, "SI": 6, "DI": 7}

// vex writes the five or six bytes of a three-byte-VEX AMX instruction
// with prefix pp (0 none, 1 66, 2 F3, 3 F2), vvvv register v (-1: none),
// opcode op, ModRM and an optional SIB byte, and comment.
func (g *gen) vex(pp byte, v int, op, modrm byte, sib int, comment string) {
	vvvv := byte(15)
	if v >= 0 {
		vvvv = ^byte(v) & 15
	}
	b := []byte{0xC4, 0xE2, vvvv<<3 | pp, op, modrm}
	if sib >= 0 {
		b = append(b, byte(sib))
	}
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("BYTE $0x%02X", x)
	}
	g.l("%s // %s", strings.Join(parts, "; "), comment)
}

func (g *gen) ldtilecfg(base string) {
	g.vex(0, -1, 0x49, gpr[base], -1, fmt.Sprintf("LDTILECFG (%s)", base))
}

func (g *gen) tilerelease() { g.vex(0, -1, 0x49, 0xC0, -1, "TILERELEASE") }

func (g *gen) tilezero(t int) {
	g.vex(3, -1, 0x49, 0xC0|byte(t)<<3, -1, fmt.Sprintf("TILEZERO tmm%d", t))
}

// tileloadd loads tile t from (base)(index*1), index holding the stride.
func (g *gen) tileloadd(t int, base, index string) {
	g.vex(3, -1, 0x4B, byte(t)<<3|4, int(gpr[index]<<3|gpr[base]), fmt.Sprintf("TILELOADD tmm%d, (%s)(%s*1)", t, base, index))
}

// tilestored stores tile t to (base)(index*1), index holding the stride.
func (g *gen) tilestored(t int, base, index string) {
	g.vex(2, -1, 0x4B, byte(t)<<3|4, int(gpr[index]<<3|gpr[base]), fmt.Sprintf("TILESTORED (%s)(%s*1), tmm%d", base, index, t))
}

// tdpbf16ps adds the products of tiles a (rows × pairs) and b (pairs ×
// columns) to tile c.
func (g *gen) tdpbf16ps(c, a, b int) {
	g.vex(2, b, 0x5C, 0xC0|byte(c)<<3|byte(a), -1, fmt.Sprintf("TDPBF16PS tmm%d, tmm%d, tmm%d", c, a, b))
}

// tilePrefetch is how far ahead of its tile loads tileBF16AMX prefetches
// the weights, in bytes.
const tilePrefetch = 4096

// prefetchTile prefetches the 1 KiB tile tilePrefetch bytes after base.
func (g *gen) prefetchTile(base string) {
	for j := range 16 {
		g.l("PREFETCHT0 %d(%s)", tilePrefetch+64*j, base)
	}
}

// x86TileAMX writes tileBF16AMX: the tiles are C00 tmm0 (input tile 0,
// weight group 0), C01 tmm1 (inputs 0, group 1), C10 tmm2 (inputs 1,
// group 0), C11 tmm3; the inputs A0 tmm4 and A1 tmm5; the weights B0 tmm6
// and B1 tmm7 (16 lines of 64 bytes); the caller's configuration gives
// the input tiles and their sums as many rows as they have inputs.
func x86TileAMX(g *gen) {
	g.text("tileBF16AMX", "$0-96", `func tileBF16AMX(cfg *byte, x *uint16, stepBytes, tokBytes, partBytes, parts int, w *uint16, groupBytes, steps, flags int, c *float32, ldc int)

Sums, over steps steps of 32 columns, the products of one or two tiles
of inputs (x, 1 KiB tiles of rows 64 bytes apart, a step's stepBytes
after the one before; the second tile tokBytes after the first; parts
parts, each partBytes after the one before) and one or two
groups of 16 weight rows in the tile layout (w; the second group
groupBytes after the first), and stores them at c (rows ldc bytes apart:
input tile 0 and group 0 at c, group 1 64 bytes on, input tile 1 16 rows
down). flags bit 0: two input tiles; bit 1: two groups; bit 2: the sums
start from those at c (float32, so a product cut into runs of steps adds
in the same order as one call), else from zero. Each step adds the
parts' products in order. Loads the configuration cfg and releases the
tiles before it returns.`)
	g.l("MOVQ cfg+0(FP), AX")
	g.ldtilecfg("AX")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ stepBytes+16(FP), DX")
	g.l("MOVQ tokBytes+24(FP), R9")
	g.l("MOVQ partBytes+32(FP), R10")
	g.l("MOVQ parts+40(FP), R12")
	g.l("MOVQ w+48(FP), DI")
	g.l("MOVQ groupBytes+56(FP), R11")
	g.l("MOVQ steps+64(FP), R8")
	g.l("MOVQ flags+72(FP), BX")
	g.l("MOVQ $64, CX")
	g.l("TESTQ $4, BX")
	g.l("JNZ resume")
	g.tilezero(0)
	g.l("TESTQ $2, BX")
	g.l("JZ zero1")
	g.tilezero(1)
	g.label("zero1")
	g.l("TESTQ $1, BX")
	g.l("JZ step")
	g.tilezero(2)
	g.l("TESTQ $2, BX")
	g.l("JZ step")
	g.tilezero(3)
	g.l("JMP step")
	g.label("resume")
	g.l("MOVQ c+80(FP), AX")
	g.l("MOVQ ldc+88(FP), CX")
	g.tileloadd(0, "AX", "CX")
	g.l("TESTQ $2, BX")
	g.l("JZ resume1")
	g.l("ADDQ $64, AX")
	g.tileloadd(1, "AX", "CX")
	g.l("SUBQ $64, AX")
	g.label("resume1")
	g.l("TESTQ $1, BX")
	g.l("JZ resumed")
	g.l("SHLQ $4, CX")
	g.l("ADDQ CX, AX")
	g.l("SHRQ $4, CX")
	g.tileloadd(2, "AX", "CX")
	g.l("TESTQ $2, BX")
	g.l("JZ resumed")
	g.l("ADDQ $64, AX")
	g.tileloadd(3, "AX", "CX")
	g.label("resumed")
	g.l("MOVQ $64, CX")
	g.label("step")
	g.prefetchTile("DI")
	g.tileloadd(6, "DI", "CX")
	g.l("TESTQ $2, BX")
	g.l("JZ parts")
	g.l("LEAQ (DI)(R11*1), AX")
	g.prefetchTile("AX")
	g.tileloadd(7, "AX", "CX")
	g.label("parts")
	g.l("MOVQ SI, AX")
	g.l("MOVQ R12, R13")
	// products loads input tile a (this part, at AX) and adds its
	// products with weight group 0 to c0 and, with two groups, with
	// group 1 to c1.
	products := func(a, c0, c1 int, done string) {
		g.tileloadd(a, "AX", "CX")
		g.tdpbf16ps(c0, a, 6)
		g.l("TESTQ $2, BX")
		g.l("JZ %s", done)
		g.tdpbf16ps(c1, a, 7)
		g.label(done)
	}
	g.label("part")
	products(4, 0, 1, "second")
	g.l("TESTQ $1, BX")
	g.l("JZ partDone")
	g.l("ADDQ R9, AX")
	products(5, 2, 3, "secondDone")
	g.l("SUBQ R9, AX")
	g.label("partDone")
	g.l("ADDQ R10, AX")
	g.l("DECQ R13")
	g.l("JNZ part")
	g.l("ADDQ DX, SI")
	g.l("ADDQ $1024, DI")
	g.l("DECQ R8")
	g.l("JNZ step")
	g.l("MOVQ c+80(FP), AX")
	g.l("MOVQ ldc+88(FP), CX")
	g.tilestored(0, "AX", "CX")
	g.l("TESTQ $2, BX")
	g.l("JZ store1")
	g.l("LEAQ 64(AX), DX")
	g.tilestored(1, "DX", "CX")
	g.label("store1")
	g.l("TESTQ $1, BX")
	g.l("JZ done")
	g.l("MOVQ CX, DX")
	g.l("SHLQ $4, DX")
	g.l("ADDQ AX, DX")
	g.tilestored(2, "DX", "CX")
	g.l("TESTQ $2, BX")
	g.l("JZ done")
	g.l("ADDQ $64, DX")
	g.tilestored(3, "DX", "CX")
	g.label("done")
	g.tilerelease()
	g.l("RET")
}

// cvtne2ps2bf16 returns the bytes of VCVTNE2PS2BF16 zmm<src2>, zmm<src1>,
// zmm<dst> in Go operand order (Intel: VCVTNE2PS2BF16 zmm_dst, zmm_src1,
// zmm_src2), which the Go assembler does not know: dst.bf16[i] is
// src2.f32[i] and dst.bf16[16+i] is src1.f32[i], rounded to nearest even.
func cvtne2ps2bf16(dst, src1, src2 int) []byte {
	b := dpbf16ps(dst, src1, src2)
	b[2] |= 0b11 // pp=F2
	b[4] = 0x72
	return b
}

// x86PackTileBF16 writes packTileBF16AVX512, the packing of one input for
// the tile products.
func x86PackTileBF16(g *gen) {
	g.text("packTileBF16AVX512", "$0-32", `func packTileBF16AVX512(dst *uint16, x *float32, steps, parts int)

Writes the steps×32 values at x in parts bf16 parts, rounded to nearest
even (VCVTNE2PS2BF16, hand-encoded; AVX512_BF16), each part the rounding
of what the parts before it leave of the value (the residuals exact in
float32): step t's part p at dst + (t·parts + p)·1 KiB, 64 bytes.`)
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ steps+16(FP), CX")
	g.l("MOVQ parts+24(FP), DX")
	g.l("MOVQ DX, R8")
	g.l("SHLQ $10, R8")
	g.label("step")
	g.l("VMOVUPS (SI), Z0")
	g.l("VMOVUPS 64(SI), Z1")
	g.l("MOVQ DI, AX")
	g.l("MOVQ DX, BX")
	g.label("part")
	emitBytes(g, cvtne2ps2bf16(2, 1, 0), "VCVTNE2PS2BF16 Z0, Z1, Z2")
	g.l("VMOVDQU64 Z2, (AX)")
	g.l("DECQ BX")
	g.l("JZ partsDone")
	g.l("VPMOVZXWD Y2, Z3")
	g.l("VPSLLD $16, Z3, Z3")
	g.l("VSUBPS Z3, Z0, Z0")
	g.l("VEXTRACTI64X4 $1, Z2, Y4")
	g.l("VPMOVZXWD Y4, Z4")
	g.l("VPSLLD $16, Z4, Z4")
	g.l("VSUBPS Z4, Z1, Z1")
	g.l("ADDQ $1024, AX")
	g.l("JMP part")
	g.label("partsDone")
	g.l("ADDQ $128, SI")
	g.l("ADDQ R8, DI")
	g.l("DECQ CX")
	g.l("JNZ step")
	g.l("VZEROUPPER")
	g.l("RET")
}

// x86TileAMX3 writes tileBF16AMX3, the one-tile variant of tileBF16AMX
// over three weight groups at once, for products of at most 16 inputs,
// which stream their weights: three streams keep more reads in flight
// than two. Tiles: sums C0-C2 tmm0-2 (groups 0-2), inputs tmm3 and tmm7
// (parts alternate, so a load need not wait for the multiplies reading
// the other), weights tmm4-6.
func x86TileAMX3(g *gen) {
	g.text("tileBF16AMX3", "$0-88", `func tileBF16AMX3(cfg *byte, x *uint16, stepBytes, partBytes, parts int, w *uint16, groupBytes, steps, flags int, c *float32, ldc int)

tileBF16AMX for one tile of inputs and three groups of weights (the
second groupBytes after the first, the third as far again), the sums of
group j stored 64·j bytes after c. flags bit 2: the sums start from
those at c, else from zero.`)
	g.l("MOVQ cfg+0(FP), AX")
	g.ldtilecfg("AX")
	g.l("MOVQ x+8(FP), SI")
	g.l("MOVQ stepBytes+16(FP), DX")
	g.l("MOVQ partBytes+24(FP), R10")
	g.l("MOVQ parts+32(FP), R12")
	g.l("MOVQ w+40(FP), DI")
	g.l("MOVQ groupBytes+48(FP), R11")
	g.l("MOVQ steps+56(FP), R8")
	g.l("MOVQ flags+64(FP), BX")
	g.l("TESTQ $4, BX")
	g.l("JNZ resume")
	for t := range 3 {
		g.tilezero(t)
	}
	g.l("JMP start")
	// sums loads (or stores) the three sums at c, 64 bytes apart.
	sums := func(move func(t int, base, index string)) {
		g.l("MOVQ c+72(FP), AX")
		g.l("MOVQ ldc+80(FP), CX")
		for t := range 3 {
			if t > 0 {
				g.l("ADDQ $64, AX")
			}
			move(t, "AX", "CX")
		}
	}
	// multiply loads input tile a (this part, at AX) and adds its products
	// with the three groups.
	multiply := func(a int) {
		g.tileloadd(a, "AX", "CX")
		for j := range 3 {
			g.tdpbf16ps(j, a, 4+j)
		}
	}
	g.label("resume")
	sums(g.tileloadd)
	g.label("start")
	g.l("MOVQ $64, CX")
	g.label("step")
	g.l("MOVQ DI, AX")
	for j := range 3 {
		if j > 0 {
			g.l("ADDQ R11, AX")
		}
		g.prefetchTile("AX")
		g.tileloadd(4+j, "AX", "CX")
	}
	g.l("MOVQ SI, AX")
	g.l("MOVQ R12, R13")
	g.label("part")
	multiply(3)
	g.l("DECQ R13")
	g.l("JZ stepDone")
	g.l("ADDQ R10, AX")
	multiply(7)
	g.l("ADDQ R10, AX")
	g.l("DECQ R13")
	g.l("JNZ part")
	g.label("stepDone")
	g.l("ADDQ DX, SI")
	g.l("ADDQ $1024, DI")
	g.l("DECQ R8")
	g.l("JNZ step")
	sums(g.tilestored)
	g.tilerelease()
	g.l("RET")
}

// Tile-layout products on f32 FMA: the columns of a segment of
// tileFMASegSteps steps (256 columns) are summed apart, in an even and an
// odd column sum, and the segments' sums added in order, which keeps the
// float32 sums short enough to stay within the other kernels' accuracy;
// tileFMAMaxInputs inputs share one pass over a group's weights.
const (
	tileFMASegSteps  = 8
	tileFMAMaxInputs = 8
	// tileFMAPrefetch is how far ahead, in bytes, the kernel prefetches
	// its one weight stream.
	tileFMAPrefetch = 8192
)

// x86TileFMA writes tileBF16FMA, the product of one to four groups of
// 16 weight rows in the tile layout with 1 to 8 float32 inputs on AVX-512
// FMA: line p of a tile holds columns 2p and 2p+1 of the 16 rows, so the
// even column's bf16 shifted left by 16 bits and the odd one's masked are
// 16 float32 weights each, multiplied by one input value broadcast from
// memory. Several groups make several streams of weights, which keep more
// reads in flight (as the four rows of the matrix-vector kernels do).
// Each line is loaded once, and the broadcasts address the inputs with a
// base register only (the rows' pointers advance a step at a time): on
// Intel cores an EVEX instruction with an indexed memory operand splits
// into two micro-ops, and one thread's products of 8 inputs with weights
// in L2 ran at 53-59 GFLOP/s with an index against 80-104 without (one
// input: 28 against 35 GB/s).
// Registers: per (group, input) pair a, Z<a> the even sums, Z<8+a> the
// odd ones and Z<16+a> the totals; Z26 a line, Z24 and Z25 its weights;
// Z27 the mask. Bodies exist for groups × inputs <= 8, groups 1, 2 or 4.
func x86TileFMA(g *gen) {
	g.text("tileBF16FMA", "$0-80", fmt.Sprintf(`func tileBF16FMA(dst *float32, ldd int, w *uint16, groupBytes, steps int, x *float32, ldx, nb, ng, resume int)

Sets dst[j*ldd+16*h+r] = sum_c w_h[r,c]*x[j*ldx+c] for the 16 rows r of
each of the ng groups h at w + h*groupBytes (steps tiles of 1 KiB in the
tile layout) and the nb inputs j (strides count elements; ng 1, 2 or 4,
nb*ng <= %d). Per segment of %d steps, the even and the odd columns are
summed in order with FMA, from zero; the total adds each segment's
even+odd sum in order, starting from zero, or with resume != 0 from the
totals at dst (a product cut into runs of whole segments of columns then
sums as one call does).`, tileFMAMaxInputs, tileFMASegSteps))
	g.l("MOVQ dst+0(FP), DI")
	g.l("MOVQ w+16(FP), SI")
	g.l("MOVQ groupBytes+24(FP), R9")
	g.l("MOVQ x+40(FP), DX")
	g.l("MOVQ ldx+48(FP), R8")
	g.l("SHLQ $2, R8")
	g.l("MOVL $0xFFFF0000, AX")
	g.l("VPBROADCASTD AX, Z27")
	// The inputs' rows: DX, R10-R15, BX; with several groups at most
	// four inputs, and R13-R15 hold groups 1-3.
	xr := []string{"DX", "R10", "R11", "R12", "R13", "R14", "R15", "BX"}
	wr := []string{"SI", "R13", "R14", "R15"}
	g.l("MOVQ nb+56(FP), AX")
	g.l("MOVQ ng+64(FP), CX")
	type body struct{ ng, nb int }
	var bodies []body
	for _, ng := range []int{1, 2, 4} {
		for nb := 1; nb*ng <= tileFMAMaxInputs; nb++ {
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
		g.l("MOVQ resume+72(FP), CX")
		g.l("TESTQ CX, CX")
		g.l("JZ zero" + tag)
		g.l("MOVQ ldd+8(FP), AX")
		g.l("SHLQ $2, AX")
		g.l("MOVQ DI, CX")
		for j := range nb {
			for h := range ng {
				g.l("VMOVUPS %d(CX), Z%d", 64*h, 16+h*nb+j)
			}
			if j+1 < nb {
				g.l("ADDQ AX, CX")
			}
		}
		g.l("JMP start" + tag)
		g.label("zero" + tag)
		for a := range ng * nb {
			g.l("VPXORD Z%d, Z%d, Z%d", 16+a, 16+a, 16+a)
		}
		g.label("start" + tag)
		g.l("MOVQ steps+32(FP), CX")
		g.label("segment" + tag)
		g.l("MOVQ $%d, R8", tileFMASegSteps)
		g.l("CMPQ CX, R8")
		g.l("CMOVQLT CX, R8")
		g.l("SUBQ R8, CX")
		for a := range ng * nb {
			g.l("VPXORD Z%d, Z%d, Z%d", a, a, a)
			g.l("VPXORD Z%d, Z%d, Z%d", 8+a, 8+a, 8+a)
		}
		g.label("step" + tag)
		for p := range 16 {
			for h := range ng {
				g.l("PREFETCHT0 %d(%s)", tileFMAPrefetch+64*p, wr[h])
				g.l("VMOVDQU32 %d(%s), Z26", 64*p, wr[h])
				g.l("VPSLLD $16, Z26, Z24")
				g.l("VPANDD Z26, Z27, Z25")
				for j := range nb {
					a := h*nb + j
					g.l("VFMADD231PS.BCST %d(%s), Z24, Z%d", 8*p, xr[j], a)
					g.l("VFMADD231PS.BCST %d(%s), Z25, Z%d", 8*p+4, xr[j], 8+a)
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
		for a := range ng * nb {
			g.l("VADDPS Z%d, Z%d, Z%d", 8+a, a, a)
			g.l("VADDPS Z%d, Z%d, Z%d", a, 16+a, 16+a)
		}
		g.l("TESTQ CX, CX")
		g.l("JNZ segment" + tag)
		g.l("MOVQ ldd+8(FP), R9")
		g.l("SHLQ $2, R9")
		for j := range nb {
			for h := range ng {
				g.l("VMOVUPS Z%d, %d(DI)", 16+h*nb+j, 64*h)
			}
			if j+1 < nb {
				g.l("ADDQ R9, DI")
			}
		}
		g.l("VZEROUPPER")
		g.l("RET")
	}
}
