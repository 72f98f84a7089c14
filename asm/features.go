package asm

import (
	"runtime"

	"github.com/govinfer/govinfer/internal/amx"
	"github.com/klauspost/cpuid/v2"
)

// Features is a set of CPU capabilities a kernel set may use. [New] only
// enables a capability when it is also present on the running CPU and the
// package was built with assembly (no "noasm" tag), so any mask is safe.
type Features struct {
	// AVX2 means AVX2, FMA3 and F16C (amd64).
	AVX2 bool
	// AVX512 means AVX-512 F, BW and VL (amd64); it is used only together with AVX2.
	AVX512 bool
	// AVX512BF16 means AVX512_BF16 (VDPBF16PS); it is used only together with AVX512.
	AVX512BF16 bool
	// AVX512VNNI means AVX512_VNNI (VPDPBUSD, the packed quantized
	// products); it is used only together with AVX512.
	AVX512VNNI bool
	// AMXBF16 means AMX-TILE and AMX-BF16 (TDPBF16PS, the tile products
	// of MatMulBF16Tiles) with the operating system's permission to use
	// tile data; it is used only together with AVX512BF16.
	AMXBF16 bool
	// AVXVNNI means AVX-VNNI (VEX-encoded VPDPBUSD on ymm: Intel from
	// Alder Lake, AMD Zen 5), the packed quantized products of the sets
	// without AVX512_VNNI; it is used only together with AVX2.
	AVXVNNI bool
	// NEON means the arm64 Advanced SIMD unit (ASIMD).
	NEON bool
	// DotProd means FEAT_DotProd (SDOT, arm64); it is used only together with NEON.
	DotProd bool

	// packedBF16 keeps the AVX2 set's older bf16 product kernels
	// (VPMOVZXWD and VPSLLD per eight weights), for comparisons.
	packedBF16 bool
	// multiStream runs one-input Q4_K and Q6_K products on AVX512_VNNI
	// two or four groups of 16 rows at a time (several weight streams in
	// flight) rather than one group at a time (one sequential stream).
	// DetectFeatures sets it except on AMD CPUs, where one stream reads
	// faster (see qpGroupKernels); New keeps it where asked.
	multiStream bool
}

// DetectFeatures reports the capabilities of the running CPU that this
// package can use, as seen by github.com/klauspost/cpuid/v2.
func DetectFeatures() Features {
	c := cpuid.CPU
	var f Features
	switch runtime.GOARCH {
	case "amd64":
		f.AVX2 = c.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
		f.AVX512 = f.AVX2 && c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL)
		f.AVX512BF16 = f.AVX512 && c.Supports(cpuid.AVX512BF16)
		f.AVX512VNNI = f.AVX512 && c.Supports(cpuid.AVX512VNNI)
		f.AVXVNNI = f.AVX2 && c.Supports(cpuid.AVXVNNI)
		f.AMXBF16 = f.AVX512BF16 && c.Supports(cpuid.AMXTILE, cpuid.AMXBF16) && amx.Permitted()
		f.multiStream = c.VendorID != cpuid.AMD
	case "arm64":
		// ASIMD is mandatory on arm64; cpuid may not see it everywhere
		// (for example under user-mode emulation), so trust the architecture.
		f.NEON = true
		f.DotProd = c.Supports(cpuid.ASIMDDP)
	}
	return f
}

// and returns the capabilities present in both f and g, keeping the
// implications between them (AVX512 and AVXVNNI need AVX2, AVX512BF16 and AVX512VNNI need AVX512,
// AMXBF16 needs AVX512BF16, DotProd needs NEON).
func (f Features) and(g Features) Features {
	r := Features{
		AVX2:        f.AVX2 && g.AVX2,
		AVX512:      f.AVX512 && g.AVX512,
		AVX512BF16:  f.AVX512BF16 && g.AVX512BF16,
		AVX512VNNI:  f.AVX512VNNI && g.AVX512VNNI,
		AMXBF16:     f.AMXBF16 && g.AMXBF16,
		AVXVNNI:     f.AVXVNNI && g.AVXVNNI,
		NEON:        f.NEON && g.NEON,
		DotProd:     f.DotProd && g.DotProd,
		packedBF16:  f.packedBF16 || g.packedBF16,
		multiStream: f.multiStream || g.multiStream,
	}
	r.AVX512 = r.AVX512 && r.AVX2
	r.AVX512BF16 = r.AVX512BF16 && r.AVX512
	r.AVX512VNNI = r.AVX512VNNI && r.AVX512
	r.AMXBF16 = r.AMXBF16 && r.AVX512BF16
	r.AVXVNNI = r.AVXVNNI && r.AVX2
	r.DotProd = r.DotProd && r.NEON
	return r
}
