package main

import "fmt"

// The one-input K-quant kernels of several groups at once: ng groups of 16
// rows, each ldx bytes after the one before, meet the same input, so that
// ng weight streams are in flight where the one-input kernel has one. Each
// group's sums are the one-input kernel's, bit for bit. Group h's weights
// are addressed from SI (quants) and R10 (sides) by qpGroup.

// qpGroup returns the address of group h at off from the quant pointer
// (side false: SI, R11 = SI+3·ldx) or the side pointer (R10, R12).
func qpGroup(h, off int, side bool) string {
	base, base3 := "SI", "R11"
	if side {
		base, base3 = "R10", "R12"
	}
	switch h {
	case 0:
		return fmt.Sprintf("%d(%s)", off, base)
	case 1:
		return fmt.Sprintf("%d(%s)(R9*1)", off, base)
	case 2:
		return fmt.Sprintf("%d(%s)(R9*2)", off, base)
	}
	return fmt.Sprintf("%d(%s)", off, base3)
}

// qpGroupsHead sets R9 to the groups' stride, and R11 and R12 (groups 3),
// after qpHead.
func qpGroupsHead(g *gen) {
	g.l("MOVQ ldx+32(FP), R9")
	g.l("LEAQ (SI)(R9*2), R11")
	g.l("ADDQ R9, R11")
	g.l("LEAQ (R10)(R9*2), R12")
	g.l("ADDQ R9, R12")
}

// qpGroupsTail advances the pointers by one super-block of super bytes,
// loops, and stores the ng groups' sums Z0.. at dst (16 floats each).
func qpGroupsTail(g *gen, ng, super int) {
	for _, r := range []string{"SI", "R11", "R10", "R12"} {
		g.l("ADDQ $%d, %s", super, r)
	}
	g.l("ADDQ $%d, R13", qKInput)
	g.l("DECQ CX")
	g.l("JNZ block")
	for h := range ng {
		g.l("VMOVUPS Z%d, %d(DI)", h, 64*h)
	}
	g.l("VZEROUPPER")
	g.l("RET")
}

func qpGroupsDoc(name, what string, ng int) string {
	return fmt.Sprintf("func %s(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)\n", name) +
		fmt.Sprintf("Sets dst[16h+r] for r < 16 and h < %d to the %s product of row r of\n", ng, what) +
		"packed group h (w + h*ldx bytes) and packed input x, as the one-input kernel\n" +
		"sums it. Requires blocks >= 1."
}

// x86QPackQ4KGroups emits the packed Q4_K×Q8_K kernel for one input and ng
// groups (qpQ4KVNNI<ng>g).
//
// Registers: group h's running sum in Zh, its S (then M) in Z(8+h), its
// sub-block sum in Z(16+h), its scales in Z(4+h); weights Z24, Z25 in
// turn; the mins' word pairs Z20..Z23 (Z26 d and dmin, Z27 products);
// masks 0x0F, 0xF0 in Z30, Z31.
func x86QPackQ4KGroups(g *gen, ng int) {
	name := fmt.Sprintf("qpQ4KVNNI%dg", ng)
	g.text(name, "$0-48", qpGroupsDoc(name, "Q4_K×Q8_K", ng))
	qpHead(g, q4KQuants)
	qpGroupsHead(g)
	qpBroadcast(g, 0x0f, 30)
	qpBroadcast(g, 0xf0, 31)
	for h := range ng {
		g.l("VPXORD Z%d, Z%d, Z%d", h, h, h)
	}
	g.label("block")
	for j := range 8 {
		for h := range ng {
			g.l("VPMOVZXBD %s, Z%d", qpGroup(h, 16*j, true), 4+h)
			if j%2 == 0 {
				g.l("VPSLLD $4, Z%d, Z%d", 4+h, 4+h)
			}
			g.l("VPXORD Z%d, Z%d, Z%d", 16+h, 16+h, 16+h)
		}
		for s := range 8 {
			for h := range ng {
				w := 24 + (s*ng+h)%2
				g.l("VPANDD %s, Z%d, Z%d", qpGroup(h, 64*(8*(j/2)+s), false), 30+j%2, w)
				g.l("VPDPBUSD.BCST %d(R13), Z%d, Z%d", 32*j+4*s, w, 16+h)
			}
		}
		for h := range ng {
			if j == 0 {
				g.l("VPMULLD Z%d, Z%d, Z%d", 4+h, 16+h, 8+h)
			} else {
				g.l("VPMULLD Z%d, Z%d, Z%d", 4+h, 16+h, 16+h)
				g.l("VPADDD Z%d, Z%d, Z%d", 16+h, 8+h, 8+h)
			}
		}
	}
	for h := range ng {
		g.l("VCVTPH2PS %s, Z26", qpGroup(h, 256, true))
		g.l("VMULPS.BCST %d(R13), Z26, Z27", qKInputD)
		g.l("VPSRAD $4, Z%d, Z%d", 8+h, 8+h)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+h, 8+h)
		g.l("VMULPS Z27, Z%d, Z%d", 8+h, 8+h)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+h, h, h)
	}
	for h := range ng {
		for p := range 4 {
			g.l("VPMOVZXBW %s, Z%d", qpGroup(h, 128+32*p, true), 20+p)
		}
		g.l("VCVTPH2PS %s, Z26", qpGroup(h, 288, true))
		g.l("VPXORD Z%d, Z%d, Z%d", 8+h, 8+h, 8+h)
		for p := range 4 {
			g.l("VPDPWSSD.BCST %d(R13), Z%d, Z%d", qKInputBs32+4*p, 20+p, 8+h)
		}
		g.l("VMULPS.BCST %d(R13), Z26, Z27", qKInputD)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+h, 8+h)
		g.l("VMULPS Z27, Z%d, Z%d", 8+h, 8+h)
		g.l("VSUBPS Z%d, Z%d, Z%d", 8+h, h, h)
	}
	qpGroupsTail(g, ng, q4KSuper)
}

// x86QPackQ6KGroups emits the packed Q6_K×Q8_K kernel for one input and ng
// groups (qpQ6KVNNI<ng>g).
//
// Registers: group h's running sum in Zh, its S in Z(8+h), its sub-block
// sum in Z(12+h); weights Z18..Z22 and scales Z23 (Z24 d, Z25 products);
// masks 0x3F, 0x0F, 0x03 in Z29..Z31.
func x86QPackQ6KGroups(g *gen, ng int) {
	name := fmt.Sprintf("qpQ6KVNNI%dg", ng)
	g.text(name, "$0-48", qpGroupsDoc(name, "Q6_K×Q8_K", ng))
	qpHead(g, q6KQuants)
	qpGroupsHead(g)
	qpBroadcast(g, 0x3f, 29)
	qpBroadcast(g, 0x0f, 30)
	qpBroadcast(g, 0x03, 31)
	for h := range ng {
		g.l("VPXORD Z%d, Z%d, Z%d", h, h, h)
	}
	g.label("block")
	for j := range 16 {
		for h := range ng {
			for c := range 3 {
				g.l("VMOVDQU32 %s, Z%d", qpGroup(h, 192*j+64*c, false), 18+c)
			}
			q6kUnpack(g)
			g.l("VPMOVSXBD %s, Z23", qpGroup(h, 16*j, true))
			q6kSubBlock(g, j, 12+h, 8+h, "(R13)")
		}
	}
	for h := range ng {
		g.l("VCVTPH2PS %s, Z24", qpGroup(h, 256, true))
		g.l("VMULPS.BCST %d(R13), Z24, Z25", qKInputD)
		g.l("VCVTDQ2PS Z%d, Z%d", 8+h, 8+h)
		g.l("VMULPS Z25, Z%d, Z%d", 8+h, 8+h)
		g.l("VADDPS Z%d, Z%d, Z%d", 8+h, h, h)
	}
	qpGroupsTail(g, ng, q6KSuper)
}
