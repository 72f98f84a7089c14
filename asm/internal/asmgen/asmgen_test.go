package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEVEXEncodings checks the hand encodings of the AVX512_BF16
// instructions against the GNU assembler's output for the same ones.
func TestEVEXEncodings(t *testing.T) {
	cases := []struct {
		name            string
		enc             func(dst, src1, src2 int) []byte
		dst, src1, src2 int
		want            []byte
	}{
		// vdpbf16ps %zmm2,%zmm1,%zmm0
		{"VDPBF16PS", dpbf16ps, 0, 1, 2, []byte{0x62, 0xf2, 0x76, 0x48, 0x52, 0xc2}},
		// vdpbf16ps %zmm31,%zmm17,%zmm9
		{"VDPBF16PS", dpbf16ps, 9, 17, 31, []byte{0x62, 0x12, 0x76, 0x40, 0x52, 0xcf}},
		// vcvtne2ps2bf16 %zmm0,%zmm1,%zmm2
		{"VCVTNE2PS2BF16", cvtne2ps2bf16, 2, 1, 0, []byte{0x62, 0xf2, 0x77, 0x48, 0x72, 0xd0}},
		// vcvtne2ps2bf16 %zmm31,%zmm17,%zmm9
		{"VCVTNE2PS2BF16", cvtne2ps2bf16, 9, 17, 31, []byte{0x62, 0x12, 0x77, 0x40, 0x72, 0xcf}},
	}
	for _, c := range cases {
		if got := c.enc(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("%s z%d, z%d, z%d: got % x, want % x", c.name, c.dst, c.src1, c.src2, got, c.want)
		}
	}
}

// TestNEONEncodings checks the NEON WORD encodings against llvm-mc's output
// for the same instructions on v1, v2, v3 (llvm-mc -triple=aarch64 -show-encoding).
func TestNEONEncodings(t *testing.T) {
	want := map[string]uint32{
		"FMAX":    0x4e23f441, // fmax v1.4s, v2.4s, v3.4s
		"FMIN":    0x4ea3f441, // fmin v1.4s, v2.4s, v3.4s
		"FADD":    0x4e23d441, // fadd v1.4s, v2.4s, v3.4s
		"FMUL":    0x6e23dc41, // fmul v1.4s, v2.4s, v3.4s
		"FDIV":    0x6e23fc41, // fdiv v1.4s, v2.4s, v3.4s
		"FMLA":    0x4e23cc41, // fmla v1.4s, v2.4s, v3.4s
		"FCVTNS":  0x4e21a841, // fcvtns v1.4s, v2.4s
		"SCVTF":   0x4e21d841, // scvtf v1.4s, v2.4s
		"ADD":     0x4ea38441, // add v1.4s, v2.4s, v3.4s
		"SUB":     0x6ea38441, // sub v1.4s, v2.4s, v3.4s
		"ORR":     0x4ea31c41, // orr v1.16b, v2.16b, v3.16b
		"BSL":     0x6e631c41, // bsl v1.16b, v2.16b, v3.16b
		"SSHR#1":  0x4f3f0441, // sshr v1.4s, v2.4s, #1
		"SSHR#31": 0x4f210441, // sshr v1.4s, v2.4s, #31
		"SHL#23":  0x4f375441, // shl v1.4s, v2.4s, #23
		"MOV":     0x4ea21c41, // mov v1.16b, v2.16b (orr v1, v2, v2)
	}
	if len(want) != len(neonOps) {
		t.Errorf("%d NEON ops, %d checked", len(neonOps), len(want))
	}
	for op, w := range want {
		if got := neonEnc(op, 1, 2, 3); got != w {
			t.Errorf("%s v1, v2, v3: got %#08x, want %#08x", op, got, w)
		}
	}
}

// TestAMXEncodings checks the AMX bytes against the GNU assembler's output
// for the same instructions.
func TestAMXEncodings(t *testing.T) {
	var g gen
	g.ldtilecfg("AX")           // ldtilecfg (%rax)
	g.tdpbf16ps(0, 4, 6)        // tdpbf16ps %tmm6,%tmm4,%tmm0
	g.tileloadd(4, "SI", "DX")  // tileloadd (%rsi,%rdx,1),%tmm4
	g.tilestored(3, "DI", "CX") // tilestored %tmm3,(%rdi,%rcx,1)
	g.tilezero(2)               // tilezero %tmm2
	g.tilerelease()             // tilerelease
	want := []string{
		"c4 e2 78 49 00", "c4 e2 4a 5c c4", "c4 e2 7b 4b 24 16",
		"c4 e2 7a 4b 1c 0f", "c4 e2 7b 49 d0", "c4 e2 78 49 c0",
	}
	lines := strings.Split(strings.TrimSpace(g.b.String()), "\n")
	for i, line := range lines {
		code, _, _ := strings.Cut(line, "//")
		var got []string
		for _, f := range strings.Split(code, ";") {
			f = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(f), "BYTE $0x"))
			got = append(got, strings.ToLower(f))
		}
		if s := strings.Join(got, " "); s != want[i] {
			t.Errorf("%s: got %s, want %s", strings.TrimSpace(line), s, want[i])
		}
	}
}

// TestVEXEncodings checks the hand encoding of VEX VPDPBUSD (AVX-VNNI)
// against the GNU assembler's output for the same instructions.
func TestVEXEncodings(t *testing.T) {
	cases := []struct {
		dst, src1, src2 int
		want            []byte
	}{
		{0, 1, 2, []byte{0xc4, 0xe2, 0x75, 0x50, 0xc2}},    // {vex} vpdpbusd %ymm2,%ymm1,%ymm0
		{3, 9, 15, []byte{0xc4, 0xc2, 0x35, 0x50, 0xdf}},   // {vex} vpdpbusd %ymm15,%ymm9,%ymm3
		{10, 12, 4, []byte{0xc4, 0x62, 0x1d, 0x50, 0xd4}},  // {vex} vpdpbusd %ymm4,%ymm12,%ymm10
		{11, 13, 14, []byte{0xc4, 0x42, 0x15, 0x50, 0xde}}, // {vex} vpdpbusd %ymm14,%ymm13,%ymm11
	}
	for _, c := range cases {
		if got := vpdpbusd(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("VPDPBUSD y%d, y%d, y%d: got % x, want % x", c.dst, c.src1, c.src2, got, c.want)
		}
	}
}
