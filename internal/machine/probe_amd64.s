//go:build !noasm

#include "textflag.h"

// Hand-written probes; see probe_amd64.go for the Go declarations.

// func readXorAVX2(p *byte, n int) uint64
// XORs the n bytes at p together as uint64 words and returns the result.
// Requires n a positive multiple of 256. Eight independent 32-byte loads per
// iteration, each folded into its own accumulator, keep many loads in flight.
TEXT ·readXorAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
avx2loop:
	VPXOR 0(SI), Y0, Y0
	VPXOR 32(SI), Y1, Y1
	VPXOR 64(SI), Y2, Y2
	VPXOR 96(SI), Y3, Y3
	VPXOR 128(SI), Y4, Y4
	VPXOR 160(SI), Y5, Y5
	VPXOR 192(SI), Y6, Y6
	VPXOR 224(SI), Y7, Y7
	ADDQ $256, SI
	SUBQ $256, CX
	JNZ avx2loop
	VPXOR Y1, Y0, Y0
	VPXOR Y2, Y0, Y0
	VPXOR Y3, Y0, Y0
	VPXOR Y4, Y0, Y0
	VPXOR Y5, Y0, Y0
	VPXOR Y6, Y0, Y0
	VPXOR Y7, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPXOR X1, X0, X0
	VMOVQ X0, AX
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET

// func readXorAVX512(p *byte, n int) uint64
// readXorAVX2 with 64-byte loads. Requires n a positive multiple of 512.
TEXT ·readXorAVX512(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VPXORQ Z4, Z4, Z4
	VPXORQ Z5, Z5, Z5
	VPXORQ Z6, Z6, Z6
	VPXORQ Z7, Z7, Z7
avx512loop:
	VPXORQ 0(SI), Z0, Z0
	VPXORQ 64(SI), Z1, Z1
	VPXORQ 128(SI), Z2, Z2
	VPXORQ 192(SI), Z3, Z3
	VPXORQ 256(SI), Z4, Z4
	VPXORQ 320(SI), Z5, Z5
	VPXORQ 384(SI), Z6, Z6
	VPXORQ 448(SI), Z7, Z7
	ADDQ $512, SI
	SUBQ $512, CX
	JNZ avx512loop
	VPXORQ Z1, Z0, Z0
	VPXORQ Z2, Z0, Z0
	VPXORQ Z3, Z0, Z0
	VPXORQ Z4, Z0, Z0
	VPXORQ Z5, Z0, Z0
	VPXORQ Z6, Z0, Z0
	VPXORQ Z7, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPXOR Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPXOR X1, X0, X0
	VMOVQ X0, AX
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET

// func fmaAVX2(iters int, x float32) float32
// Runs iters iterations of 12 independent VFMADD231PS ymm chains (acc += x*x,
// 8 lanes each) on registers only, and returns lane 0 of the first plus the
// last chain: 2*iters*x*x. Requires iters >= 1. Twelve chains cover an FMA
// latency of 4-6 cycles on two pipes.
TEXT ·fmaAVX2(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	VBROADCASTSS x+8(FP), Y12
	VMOVAPS Y12, Y13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
fmaAVX2loop:
	VFMADD231PS Y13, Y12, Y0
	VFMADD231PS Y13, Y12, Y1
	VFMADD231PS Y13, Y12, Y2
	VFMADD231PS Y13, Y12, Y3
	VFMADD231PS Y13, Y12, Y4
	VFMADD231PS Y13, Y12, Y5
	VFMADD231PS Y13, Y12, Y6
	VFMADD231PS Y13, Y12, Y7
	VFMADD231PS Y13, Y12, Y8
	VFMADD231PS Y13, Y12, Y9
	VFMADD231PS Y13, Y12, Y10
	VFMADD231PS Y13, Y12, Y11
	DECQ CX
	JNZ fmaAVX2loop
	VADDPS Y11, Y0, Y0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func fmaAVX512(iters int, x float32) float32
// fmaAVX2 on zmm registers (16 lanes). Requires iters >= 1.
TEXT ·fmaAVX512(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	VBROADCASTSS x+8(FP), Z12
	VMOVAPS Z12, Z13
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
fmaAVX512loop:
	VFMADD231PS Z13, Z12, Z0
	VFMADD231PS Z13, Z12, Z1
	VFMADD231PS Z13, Z12, Z2
	VFMADD231PS Z13, Z12, Z3
	VFMADD231PS Z13, Z12, Z4
	VFMADD231PS Z13, Z12, Z5
	VFMADD231PS Z13, Z12, Z6
	VFMADD231PS Z13, Z12, Z7
	VFMADD231PS Z13, Z12, Z8
	VFMADD231PS Z13, Z12, Z9
	VFMADD231PS Z13, Z12, Z10
	VFMADD231PS Z13, Z12, Z11
	DECQ CX
	JNZ fmaAVX512loop
	VADDPS Z11, Z0, Z0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dotBF16AVX512(iters int, x uint32) float32
// Runs iters iterations of 12 independent VDPBF16PS zmm chains (each lane:
// acc += a0*b0 + a1*b1 for the two bf16 halves of x in every operand) and
// returns lane 0 of the first plus the last chain. Requires iters >= 1 and
// AVX512_BF16; the Go assembler lacks VDPBF16PS, so it is hand-encoded
// (EVEX.512.F3.0F38.W0 52 /r, the encoding of asm/internal/asmgen's dpbf16ps).
TEXT ·dotBF16AVX512(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	MOVL x+8(FP), AX
	VPBROADCASTD AX, Z12
	VMOVAPS Z12, Z13
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
dotbf16loop:
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc5 // VDPBF16PS Z13, Z12, Z0
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z13, Z12, Z1
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xd5 // VDPBF16PS Z13, Z12, Z2
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xdd // VDPBF16PS Z13, Z12, Z3
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xe5 // VDPBF16PS Z13, Z12, Z4
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xed // VDPBF16PS Z13, Z12, Z5
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xf5 // VDPBF16PS Z13, Z12, Z6
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xfd // VDPBF16PS Z13, Z12, Z7
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc5 // VDPBF16PS Z13, Z12, Z8
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z13, Z12, Z9
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xd5 // VDPBF16PS Z13, Z12, Z10
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xdd // VDPBF16PS Z13, Z12, Z11
	DECQ CX
	JNZ dotbf16loop
	VADDPS Z11, Z0, Z0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dotInt8AVX512(iters int, x uint32) float32
// Runs iters iterations of 12 independent VPDPBUSD zmm chains (each lane:
// acc += the four products of the unsigned and signed bytes of x) and
// returns lane 0 of the first plus the last chain, as float32. Requires
// iters >= 1 and AVX512_VNNI.
TEXT ·dotInt8AVX512(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	MOVL x+8(FP), AX
	VPBROADCASTD AX, Z12
	VMOVDQA32 Z12, Z13
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
dotint8loop:
	VPDPBUSD Z13, Z12, Z0
	VPDPBUSD Z13, Z12, Z1
	VPDPBUSD Z13, Z12, Z2
	VPDPBUSD Z13, Z12, Z3
	VPDPBUSD Z13, Z12, Z4
	VPDPBUSD Z13, Z12, Z5
	VPDPBUSD Z13, Z12, Z6
	VPDPBUSD Z13, Z12, Z7
	VPDPBUSD Z13, Z12, Z8
	VPDPBUSD Z13, Z12, Z9
	VPDPBUSD Z13, Z12, Z10
	VPDPBUSD Z13, Z12, Z11
	DECQ CX
	JNZ dotint8loop
	VPADDD Z11, Z0, Z0
	VCVTDQ2PS Z0, Z0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dotInt8AVXVNNI(iters int, x uint32) float32
// dotInt8AVX512 on ymm with AVX-VNNI: 12 independent VEX-encoded VPDPBUSD
// ymm chains. Go's assembler emits VPDPBUSD only in its EVEX form
// (AVX512_VNNI), which faults on CPUs without AVX-512, so the VEX
// instructions are written as bytes (C4 map 0F38, W0, L=256, pp=66,
// opcode 50). Requires iters >= 1 and AVX-VNNI.
TEXT ·dotInt8AVXVNNI(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	MOVL x+8(FP), AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VMOVDQA Y12, Y13
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
dotint8avxvnniloop:
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xc5 // VPDPBUSD Y13, Y12, Y0 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xcd // VPDPBUSD Y13, Y12, Y1 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xd5 // VPDPBUSD Y13, Y12, Y2 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xdd // VPDPBUSD Y13, Y12, Y3 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xe5 // VPDPBUSD Y13, Y12, Y4 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xed // VPDPBUSD Y13, Y12, Y5 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xf5 // VPDPBUSD Y13, Y12, Y6 (VEX)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x1d; BYTE $0x50; BYTE $0xfd // VPDPBUSD Y13, Y12, Y7 (VEX)
	BYTE $0xc4; BYTE $0x42; BYTE $0x1d; BYTE $0x50; BYTE $0xc5 // VPDPBUSD Y13, Y12, Y8 (VEX)
	BYTE $0xc4; BYTE $0x42; BYTE $0x1d; BYTE $0x50; BYTE $0xcd // VPDPBUSD Y13, Y12, Y9 (VEX)
	BYTE $0xc4; BYTE $0x42; BYTE $0x1d; BYTE $0x50; BYTE $0xd5 // VPDPBUSD Y13, Y12, Y10 (VEX)
	BYTE $0xc4; BYTE $0x42; BYTE $0x1d; BYTE $0x50; BYTE $0xdd // VPDPBUSD Y13, Y12, Y11 (VEX)
	DECQ CX
	JNZ dotint8avxvnniloop
	VPADDD Y11, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dotInt8AVX2(iters int, x uint32) float32
// Runs iters iterations of 12 independent int8 dot chains on ymm, as the
// AVX2 packed quantized products run without VNNI: VPMADDUBSW (unsigned by
// signed bytes of x, pairs summed to int16), VPMADDWD with words of 1 (pairs
// summed to int32) and VPADDD into the chain's lanes; returns lane 0 of the
// first plus the last chain, as float32. Requires iters >= 1.
TEXT ·dotInt8AVX2(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	MOVL x+8(FP), AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VMOVDQA Y12, Y13
	MOVL $0x00010001, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
dotint8avx2loop:
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y0, Y0
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y1, Y1
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y2, Y2
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y3, Y3
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y4, Y4
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y5, Y5
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y6, Y6
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y7, Y7
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y8, Y8
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y9, Y9
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y10, Y10
	VPMADDUBSW Y13, Y12, Y15
	VPMADDWD Y14, Y15, Y15
	VPADDD Y15, Y11, Y11
	DECQ CX
	JNZ dotint8avx2loop
	VPADDD Y11, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func tdpBF16AMX(cfg *byte, ones *uint16, iters int, out *float32)
// Loads the AMX configuration cfg (eight tiles of 16 rows of 64 bytes),
// fills tiles 4-7 from the 1 KiB at ones, runs iters iterations of four
// independent TDPBF16PS (tiles 0-3 += 4·6, 5·6, 4·7, 5·7), stores tile 0
// at out and releases the tiles. The Go assembler has no AMX mnemonics:
// the instructions are written as their VEX bytes (see asm's asmgen).
TEXT ·tdpBF16AMX(SB), NOSPLIT, $0-32
	MOVQ cfg+0(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // LDTILECFG (AX)
	MOVQ ones+8(FP), SI
	MOVQ iters+16(FP), CX
	MOVQ $64, DX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0 // TILEZERO tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8 // TILEZERO tmm1
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0 // TILEZERO tmm2
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8 // TILEZERO tmm3
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x16 // TILELOADD tmm4, (SI)(DX*1)
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x16 // TILELOADD tmm5, (SI)(DX*1)
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x16 // TILELOADD tmm6, (SI)(DX*1)
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x3C; BYTE $0x16 // TILELOADD tmm7, (SI)(DX*1)
amxloop:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4 // TDPBF16PS tmm0, tmm4, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xCD // TDPBF16PS tmm1, tmm5, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xD4 // TDPBF16PS tmm2, tmm4, tmm7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xDD // TDPBF16PS tmm3, tmm5, tmm7
	DECQ CX
	JNZ amxloop
	MOVQ out+24(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x10 // TILESTORED (AX)(DX*1), tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // TILERELEASE
	RET
