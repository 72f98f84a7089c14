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

// x86TileAMX writes tileBF16AMX: the tiles are C00 tmm0 (weight rows
// 0-15, inputs 0-15), C01 tmm1 (rows 0-15, inputs 16-31), C10 tmm2, C11
// tmm3, the weights A0 tmm4 (rows 0-15) and A1 tmm5 (rows 16-31), the
// inputs tmm6 and tmm7, each 16 rows of 64 bytes (the caller's
// configuration).
func x86TileAMX(g *gen) {
	g.text("tileBF16AMX", "$0-80", `func tileBF16AMX(cfg *byte, w *uint16, lda int, x *uint16, groupBytes, partBytes, parts, steps, groups int, c *float32)

For 32 weight rows (w, rows lda bytes apart) and one or two groups of
16 packed inputs (x; the second group groupBytes after the first; parts
parts, each partBytes after the one before), over steps steps of 32
columns: c[r*32+i] = Σ_k w[r,k]·x[i,k] (i < 32), each step adding the
parts' products in order. Loads the AMX configuration cfg and releases
the tiles before it returns.`)
	g.l("MOVQ cfg+0(FP), AX")
	g.ldtilecfg("AX")
	g.l("MOVQ w+8(FP), SI")
	g.l("MOVQ lda+16(FP), DX")
	g.l("MOVQ DX, DI")
	g.l("SHLQ $4, DI")
	g.l("ADDQ SI, DI")
	g.l("MOVQ x+24(FP), BX")
	g.l("MOVQ groupBytes+32(FP), R9")
	g.l("MOVQ partBytes+40(FP), R10")
	g.l("MOVQ parts+48(FP), R12")
	g.l("MOVQ steps+56(FP), R8")
	g.l("MOVQ groups+64(FP), R11")
	g.l("MOVQ $64, CX")
	for t := range 4 {
		g.tilezero(t)
	}
	g.label("step")
	g.tileloadd(4, "SI", "DX")
	g.tileloadd(5, "DI", "DX")
	g.l("MOVQ BX, AX")
	g.l("MOVQ R12, R13")
	g.label("part")
	g.tileloadd(6, "AX", "CX")
	g.tdpbf16ps(0, 4, 6)
	g.tdpbf16ps(2, 5, 6)
	g.l("CMPQ R11, $2")
	g.l("JNE partDone")
	g.l("ADDQ R9, AX")
	g.tileloadd(7, "AX", "CX")
	g.tdpbf16ps(1, 4, 7)
	g.tdpbf16ps(3, 5, 7)
	g.l("SUBQ R9, AX")
	g.label("partDone")
	g.l("ADDQ R10, AX")
	g.l("DECQ R13")
	g.l("JNZ part")
	g.l("ADDQ $64, SI")
	g.l("ADDQ $64, DI")
	g.l("ADDQ $1024, BX")
	g.l("DECQ R8")
	g.l("JNZ step")
	g.l("MOVQ c+72(FP), AX")
	g.l("MOVQ $128, CX")
	g.l("LEAQ 64(AX), BX")
	g.l("LEAQ 2048(AX), SI")
	g.l("LEAQ 2112(AX), DI")
	g.tilestored(0, "AX", "CX")
	g.tilestored(1, "BX", "CX")
	g.tilestored(2, "SI", "CX")
	g.tilestored(3, "DI", "CX")
	g.tilerelease()
	g.l("RET")
}
