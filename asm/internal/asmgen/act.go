package main

import (
	"fmt"
	"math"
	"strings"
)

// The activation kernels: exp, sigmoid, silu and the gated products, all on
// one float32 exponential (see exp.go in package asm, whose constants the
// table below repeats and whose steps the code follows).

// act is one activation kernel.
type act struct {
	name   string // Go name stem: exp, sigmoid, silu, siluMul, sigmoidMul
	file   string // file name stem
	binary bool   // three pointer arguments (dst, a, b) instead of (dst, x)
	doc    string
}

var acts = []act{
	{"exp", "exp", false, "Sets dst[i] = e^x[i] for i < n."},
	{"sigmoid", "sigmoid", false, "Sets dst[i] = sigmoid(x[i]) for i < n."},
	{"silu", "silu", false, "Sets dst[i] = silu(x[i]) for i < n."},
	{"siluMul", "silumul", true, "Sets dst[i] = silu(a[i]) * b[i] for i < n (a is the gate, b the up projection)."},
	{"sigmoidMul", "sigmoidmul", true, "Sets dst[i] = a[i] * sigmoid(b[i]) for i < n (b is the gate)."},
}

// actConst is the constant table shared by the activation kernels: each
// value is stored eight times (32 bytes) so AVX2 can use it as a memory
// operand; AVX-512 broadcasts the first copy.
var actConst = []struct {
	name string
	bits uint32
}{
	{"sign", 0x80000000},
	{"min", f32bits(-110)},
	{"max", f32bits(100)},
	{"log2e", f32bits(1.44269504088896341)},
	{"negLn2Hi", f32bits(-0.693359375)},
	{"negLn2Lo", f32bits(2.12194440e-4)},
	{"c0", f32bits(1.9875691500e-4)},
	{"c1", f32bits(1.3981999507e-3)},
	{"c2", f32bits(8.3334519073e-3)},
	{"c3", f32bits(4.1665795894e-2)},
	{"c4", f32bits(1.6666665459e-1)},
	{"c5", f32bits(5.0000001201e-1)},
	{"one", f32bits(1)},
	{"bias", 127},
}

func f32bits(v float64) uint32 { return math.Float32bits(float32(v)) }

// cref returns the memory operand of the named constant.
func cref(name string) string {
	for i, c := range actConst {
		if c.name == name {
			return fmt.Sprintf("actc<>+%d(SB)", 32*i)
		}
	}
	panic("asmgen: no activation constant " + name)
}

func actTable(g *gen) {
	for i, c := range actConst {
		for j := range 8 {
			fmt.Fprintf(&g.b, "DATA actc<>+%d(SB)/4, $0x%08x\n", 32*i+4*j, c.bits)
		}
	}
	fmt.Fprintf(&g.b, "GLOBL actc<>(SB), RODATA|NOPTR, $%d\n\n", 32*len(actConst))
}

func actSig(k act, fn string) string {
	if k.binary {
		return fmt.Sprintf("func %s(dst, a, b *float32, n int)", fn)
	}
	return fmt.Sprintf("func %s(dst, x *float32, n int)", fn)
}

// x86Act emits an activation kernel. Registers: SI points at the activation
// input, DX at the multiplier (binary kernels), DI at dst; register 0 holds
// the input vector and 9 the result. Constants live in registers 10-15 (and
// 16-23 on AVX-512, which has 32).
func x86Act(g *gen, a x86, k act) {
	fn := k.name + a.name
	frame := "$0-24"
	if k.binary {
		frame = "$0-32"
	}
	actTable(g)
	g.text(fn, frame, actSig(k, fn)+"\n"+k.doc+"\n"+
		fmt.Sprintf("Requires n a positive multiple of %d; dst may equal an input.", a.lanes))
	z := a.reg == "Z"
	r := a.r
	g.l("MOVQ dst+0(FP), DI")
	switch {
	case k.name == "sigmoidMul":
		g.l("MOVQ a+8(FP), DX")
		g.l("MOVQ b+16(FP), SI")
		g.l("MOVQ n+24(FP), CX")
	case k.binary:
		g.l("MOVQ a+8(FP), SI")
		g.l("MOVQ b+16(FP), DX")
		g.l("MOVQ n+24(FP), CX")
	default:
		g.l("MOVQ x+8(FP), SI")
		g.l("MOVQ n+16(FP), CX")
	}
	bcast := func(name string, reg int) { g.l("VBROADCASTSS %s, %s", cref(name), r(reg)) }
	bcast("sign", 15)
	bcast("min", 14)
	bcast("log2e", 13)
	bcast("one", 12)
	if k.name == "exp" {
		bcast("max", 10)
	}
	// hi, lo, c0..c5: registers on AVX-512, memory operands on AVX2.
	cs := []string{"negLn2Hi", "negLn2Lo", "c0", "c1", "c2", "c3", "c4", "c5"}
	c := map[string]string{}
	for i, name := range cs {
		if z {
			bcast(name, 16+i)
			c[name] = r(16 + i)
		} else {
			c[name] = cref(name)
		}
	}
	if !z {
		bcast("bias", 11)
	}
	g.l("XORQ AX, AX")
	g.label("loop")
	g.l("VMOVUPS (SI)(AX*4), %s", r(0))
	// t = clamp(x) for exp, max(-|x|, min) otherwise. VMAXPS/VMINPS return
	// their last Go operand when either is NaN, so NaN propagates.
	if k.name == "exp" {
		g.l("VMAXPS %s, %s, %s", r(0), r(14), r(1))
		g.l("VMINPS %s, %s, %s", r(1), r(10), r(1))
	} else {
		if z {
			g.l("VPORD %s, %s, %s", r(15), r(0), r(1))
		} else {
			g.l("VORPS %s, %s, %s", r(15), r(0), r(1))
		}
		g.l("VMAXPS %s, %s, %s", r(1), r(14), r(1))
	}
	// n = round(t*log2e) (int in 2 on AVX2), nf in 3.
	g.l("VMULPS %s, %s, %s", r(13), r(1), r(2))
	if z {
		g.l("VRNDSCALEPS $0, %s, %s", r(2), r(3))
	} else {
		g.l("VCVTPS2DQ %s, %s", r(2), r(2))
		g.l("VCVTDQ2PS %s, %s", r(2), r(3))
	}
	// r = t - nf*ln2 in 1; p = 1 + r + r²*q(r) in 4.
	g.l("VFMADD231PS %s, %s, %s", c["negLn2Hi"], r(3), r(1))
	g.l("VFMADD231PS %s, %s, %s", c["negLn2Lo"], r(3), r(1))
	if z {
		g.l("VMOVAPS %s, %s", c["c0"], r(4))
	} else {
		g.l("VMOVUPS %s, %s", c["c0"], r(4))
	}
	for _, name := range cs[3:] {
		g.l("VFMADD213PS %s, %s, %s", c[name], r(1), r(4))
	}
	g.l("VMULPS %s, %s, %s", r(1), r(1), r(5))
	g.l("VFMADD213PS %s, %s, %s", r(1), r(5), r(4))
	g.l("VADDPS %s, %s, %s", r(12), r(4), r(4))
	// e = p * 2^n in 7. AVX2 forms q1 = p*2^n1 in 4 and keeps s2 = 2^n2 in 6.
	if z {
		g.l("VSCALEFPS %s, %s, %s", r(3), r(4), r(7))
	} else {
		g.l("VPSRAD $1, %s, %s", r(2), r(5))
		g.l("VPSUBD %s, %s, %s", r(5), r(2), r(6))
		g.l("VPADDD %s, %s, %s", r(11), r(5), r(5))
		g.l("VPSLLD $23, %s, %s", r(5), r(5))
		g.l("VPADDD %s, %s, %s", r(11), r(6), r(6))
		g.l("VPSLLD $23, %s, %s", r(6), r(6))
		g.l("VMULPS %s, %s, %s", r(5), r(4), r(4))
		g.l("VMULPS %s, %s, %s", r(6), r(4), r(7))
	}
	res := r(9)
	if k.name == "exp" {
		res = r(7)
	} else {
		g.l("VADDPS %s, %s, %s", r(12), r(7), r(8)) // d = 1 + e
		if z {
			g.l("VPTESTMD %s, %s, K1", r(15), r(0)) // K1: sign of x set
		}
		// blend sets res to neg where the sign of x is set, else to pos.
		blend := func(neg, pos string) {
			if z {
				g.l("VBLENDMPS %s, %s, K1, %s", neg, pos, res)
			} else {
				g.l("VBLENDVPS %s, %s, %s, %s", r(0), neg, pos, res)
			}
		}
		if strings.HasPrefix(k.name, "sigmoid") {
			blend(r(7), r(12)) // e/(1+e) for x < 0, 1/(1+e) otherwise
		} else {
			// x*e/(1+e) for x < 0, with x*e scaled last; x/(1+e) otherwise.
			g.l("VMAXPS %s, %s, %s", r(0), r(14), r(5))
			g.l("VMULPS %s, %s, %s", r(4), r(5), r(5))
			if z {
				g.l("VSCALEFPS %s, %s, %s", r(3), r(5), r(5))
			} else {
				g.l("VMULPS %s, %s, %s", r(6), r(5), r(5))
			}
			blend(r(5), r(0))
		}
		g.l("VDIVPS %s, %s, %s", r(8), res, res)
		if k.binary {
			g.l("VMULPS (DX)(AX*4), %s, %s", res, res)
		}
	}
	g.l("VMOVUPS %s, (DI)(AX*4)", res)
	g.l("ADDQ $%d, AX", a.lanes)
	g.l("CMPQ AX, CX")
	g.l("JB loop")
	g.l("VZEROUPPER")
	g.l("RET")
}

// NEON encodings the Go assembler lacks, on four single-precision lanes
// (checked against llvm-mc in asmgen_test.go). Each takes Rd, Rn and Rm
// register numbers; the unary ones ignore m.
var neonOps = map[string]uint32{
	"FMAX":    0x4E20F400,
	"FMIN":    0x4EA0F400,
	"FADD":    0x4E20D400,
	"FMUL":    0x6E20DC00,
	"FDIV":    0x6E20FC00,
	"FMLA":    0x4E20CC00, // Vd += Vn*Vm
	"FCVTNS":  0x4E21A800, // float to int32, round to nearest even
	"SCVTF":   0x4E21D800, // int32 to float
	"ADD":     0x4EA08400, // int32
	"SUB":     0x6EA08400, // int32
	"ORR":     0x4EA01C00, // 16B
	"BSL":     0x6E601C00, // 16B: Vd = Vd&Vn | ^Vd&Vm
	"SSHR#1":  0x4F3F0400,
	"SSHR#31": 0x4F210400,
	"SHL#23":  0x4F375400,
	"MOV":     0x4EA01C00, // ORR Vd, Vn, Vn (Rm set to n below)
}

// neonEnc returns the encoding of op with registers d, n, m.
func neonEnc(op string, d, n, m int) uint32 {
	base, ok := neonOps[op]
	if !ok {
		panic("asmgen: unknown NEON op " + op)
	}
	if op == "MOV" {
		m = n
	}
	switch op {
	case "FCVTNS", "SCVTF", "SSHR#1", "SSHR#31", "SHL#23":
		m = 0
	}
	return base | uint32(m)<<16 | uint32(n)<<5 | uint32(d)
}

// neon emits op Vd, Vn, Vm as a WORD.
func neon(g *gen, op string, d, n, m int) {
	name, imm, shift := strings.Cut(op, "#")
	text := fmt.Sprintf("%s V%d.4S, V%d.4S, V%d.4S", name, d, n, m)
	switch {
	case shift:
		text = fmt.Sprintf("%s V%d.4S, V%d.4S, #%s", name, d, n, imm)
	case op == "FCVTNS" || op == "SCVTF" || op == "MOV":
		text = fmt.Sprintf("%s V%d.4S, V%d.4S", name, d, n)
	}
	g.l("WORD $0x%08x // %s", neonEnc(op, d, n, m), text)
}

// armAct emits the NEON activation kernel k, four values per iteration: R1
// points at the activation input, R2 at the multiplier, R0 at dst. Constants
// are in V16-V29, the input in V0 and the result in V9.
func armAct(g *gen, k act) {
	fn := k.name + "NEON"
	frame := "$0-24"
	if k.binary {
		frame = "$0-32"
	}
	g.text(fn, frame, actSig(k, fn)+"\n"+k.doc+"\n"+
		"Requires n a positive multiple of 4; dst may equal an input.")
	g.l("MOVD dst+0(FP), R0")
	switch {
	case k.name == "sigmoidMul":
		g.l("MOVD a+8(FP), R2")
		g.l("MOVD b+16(FP), R1")
		g.l("MOVD n+24(FP), R3")
	case k.binary:
		g.l("MOVD a+8(FP), R1")
		g.l("MOVD b+16(FP), R2")
		g.l("MOVD n+24(FP), R3")
	default:
		g.l("MOVD x+8(FP), R1")
		g.l("MOVD n+16(FP), R3")
	}
	regs := map[string]int{}
	for i, c := range actConst {
		reg := 16 + i
		regs[c.name] = reg
		g.l("MOVW $0x%08x, R4", c.bits)
		g.l("VDUP R4, V%d.S4", reg)
	}
	cr := func(name string) int { return regs[name] }
	g.l("LSR $2, R3, R3")
	g.label("loop")
	g.l("VLD1.P 16(R1), [V0.S4]")
	if k.name == "exp" {
		neon(g, "FMAX", 1, 0, cr("min"))
		neon(g, "FMIN", 1, 1, cr("max"))
	} else {
		neon(g, "ORR", 1, 0, cr("sign"))
		neon(g, "FMAX", 1, 1, cr("min"))
	}
	neon(g, "FMUL", 2, 1, cr("log2e"))
	neon(g, "FCVTNS", 2, 2, 0)
	neon(g, "SCVTF", 3, 2, 0)
	neon(g, "FMLA", 1, 3, cr("negLn2Hi"))
	neon(g, "FMLA", 1, 3, cr("negLn2Lo"))
	// Horner's rule, alternating V4 and V5: q = q*r + c.
	neon(g, "MOV", 4, cr("c0"), 0)
	q := 4
	for _, c := range []string{"c1", "c2", "c3", "c4", "c5"} {
		nq := 9 - q
		neon(g, "MOV", nq, cr(c), 0)
		neon(g, "FMLA", nq, q, 1)
		q = nq
	}
	neon(g, "FMUL", 6, 1, 1)         // r²
	neon(g, "MOV", 7, 1, 0)          // r
	neon(g, "FMLA", 7, q, 6)         // r + r²*q
	neon(g, "FADD", 4, 7, cr("one")) // p
	neon(g, "SSHR#1", 5, 2, 0)       // n1
	neon(g, "SUB", 6, 2, 5)          // n2
	neon(g, "ADD", 5, 5, cr("bias"))
	neon(g, "SHL#23", 5, 5, 0) // s1
	neon(g, "ADD", 6, 6, cr("bias"))
	neon(g, "SHL#23", 6, 6, 0) // s2
	neon(g, "FMUL", 4, 4, 5)   // q1 = p*s1
	neon(g, "FMUL", 7, 4, 6)   // e
	res := 9
	if k.name == "exp" {
		res = 7
	} else {
		neon(g, "FADD", 8, 7, cr("one")) // d
		neon(g, "SSHR#31", 9, 0, 0)      // all ones where the sign of x is set
		if strings.HasPrefix(k.name, "sigmoid") {
			neon(g, "BSL", 9, 7, cr("one"))
		} else {
			neon(g, "FMAX", 5, 0, cr("min"))
			neon(g, "FMUL", 5, 5, 4)
			neon(g, "FMUL", 5, 5, 6)
			neon(g, "BSL", 9, 5, 0)
		}
		neon(g, "FDIV", 9, 9, 8)
		if k.binary {
			g.l("VLD1.P 16(R2), [V10.S4]")
			neon(g, "FMUL", 9, 9, 10)
		}
	}
	g.l("VST1.P [V%d.S4], 16(R0)", res)
	g.l("SUB $1, R3, R3")
	g.l("CBNZ R3, loop")
	g.l("RET")
}
