//go:build !noasm

package machine

import (
	"github.com/govinfer/govinfer/internal/amx"
	"github.com/klauspost/cpuid/v2"
)

//go:noescape
func readXorAVX2(p *byte, n int) uint64

//go:noescape
func readXorAVX512(p *byte, n int) uint64

func fmaAVX2(iters int, x float32) float32

func fmaAVX512(iters int, x float32) float32

func dotBF16AVX512(iters int, x uint32) float32

func dotInt8AVX512(iters int, x uint32) float32

func dotInt8AVX2(iters int, x uint32) float32

func dotInt8AVXVNNI(iters int, x uint32) float32

//go:noescape
func tdpBF16AMX(cfg *byte, ones *uint16, iters int, out *float32)

// hasAVX2 and friends say which probes the running CPU can execute.
var (
	hasAVX2       = cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3)
	hasAVX512     = hasAVX2 && cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL)
	hasAVX512BF16 = hasAVX512 && cpuid.CPU.Supports(cpuid.AVX512BF16)
	hasAVX512VNNI = hasAVX512 && cpuid.CPU.Supports(cpuid.AVX512VNNI)
	hasAVXVNNI    = hasAVX2 && cpuid.CPU.Supports(cpuid.AVXVNNI)
)

// readProbes returns the read loops the CPU can run, best first.
func readProbes() []readProbe {
	var ps []readProbe
	if hasAVX512 {
		ps = append(ps, readProbe{"avx512 zmm loads", 512, func(b []byte) uint64 { return readXorAVX512(&b[0], len(b)) }})
	}
	if hasAVX2 {
		ps = append(ps, readProbe{"avx2 ymm loads", 256, func(b []byte) uint64 { return readXorAVX2(&b[0], len(b)) }})
	}
	return append(ps, goReadProbe)
}

// fmaProbes returns the f32 FMA loops the CPU can run, best first.
func fmaProbes() []computeProbe {
	var ps []computeProbe
	if hasAVX512 {
		ps = append(ps, computeProbe{"avx512 VFMADD231PS zmm x12", 12 * 16 * 2, func(n int) float32 { return fmaAVX512(n, 1) }, 2})
	}
	if hasAVX2 {
		ps = append(ps, computeProbe{"avx2 VFMADD231PS ymm x12", 12 * 8 * 2, func(n int) float32 { return fmaAVX2(n, 1) }, 2})
	}
	return append(ps, goFMAProbe)
}

// bf16Probes returns the bf16 dot loops the CPU can run, best first; none
// without AVX512_BF16.
func bf16Probes() []computeProbe {
	if !hasAVX512BF16 {
		return nil
	}
	// Each VDPBF16PS zmm does 32 bf16 multiply-adds: 64 flops. 0x3f80 is
	// bf16 1.0, so every instruction adds 2 to each lane.
	return []computeProbe{{"avx512_bf16 VDPBF16PS zmm x12", 12 * 32 * 2, func(n int) float32 { return dotBF16AVX512(n, 0x3f803f80) }, 4}}
}

// int8Probes returns the int8 dot loops the CPU can run, best first; none
// without AVX2.
func int8Probes() []computeProbe {
	var ps []computeProbe
	if hasAVX512VNNI {
		// Each VPDPBUSD zmm does 64 byte multiply-adds: 128 integer
		// operations. Every byte of 0x01010101 is 1, so each instruction
		// adds 4 to a lane.
		ps = append(ps, computeProbe{"avx512_vnni VPDPBUSD zmm x12", 12 * 64 * 2, func(n int) float32 { return dotInt8AVX512(n, 0x01010101) }, 8})
	}
	if hasAVXVNNI {
		// Each VEX VPDPBUSD ymm does 32 byte multiply-adds: 64 integer
		// operations, and adds 4 to a lane.
		ps = append(ps, computeProbe{"avx_vnni VPDPBUSD ymm x12", 12 * 32 * 2, func(n int) float32 { return dotInt8AVXVNNI(n, 0x01010101) }, 8})
	}
	if hasAVX2 {
		// Each VPMADDUBSW+VPMADDWD+VPADDD ymm does 32 byte multiply-adds:
		// 64 integer operations, and adds 4 to a lane.
		ps = append(ps, computeProbe{"avx2 VPMADDUBSW+VPMADDWD ymm x12", 12 * 32 * 2, func(n int) float32 { return dotInt8AVX2(n, 0x01010101) }, 8})
	}
	return ps
}

// amxProbes returns the AMX tile loops the CPU can run; none without
// AMX-BF16 or the operating system's permission to use tile data.
func amxProbes() []computeProbe {
	if !hasAVX512 || !cpuid.CPU.Supports(cpuid.AMXTILE, cpuid.AMXBF16) || !amx.Permitted() {
		return nil
	}
	// Each TDPBF16PS does 16×16×32 bf16 multiply-adds. The tiles hold bf16
	// 1.0, so every instruction adds 32 to each sum.
	return []computeProbe{{"amx_bf16 TDPBF16PS x4", 4 * 16 * 16 * 32 * 2, tdpBF16Ones, 32}}
}

// tdpBF16Ones runs n iterations of tdpBF16AMX on tiles of ones and
// returns the first sum.
func tdpBF16Ones(n int) float32 {
	var cfg [64]byte
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t], cfg[48+t] = 64, 16
	}
	var ones [512]uint16
	for i := range ones {
		ones[i] = 0x3f80
	}
	var out [256]float32
	tdpBF16AMX(&cfg[0], &ones[0], n, &out[0])
	return out[0]
}
