// Package machine describes the CPU govinfer runs on and measures what it
// can do: its model, the vector features the kernels care about, its caches
// and cores, the bandwidth of a plain read loop over memory, and the peak
// rate of register-only multiply-add loops (f32 FMA, and bf16 dot products
// where the CPU has them). These are the ceilings that decode (bandwidth
// bound) and prefill (compute bound) are compared with.
//
// The probes are hand-written assembly on amd64 (AVX2 and AVX-512). On
// other architectures, or with the noasm build tag, they are scalar Go
// loops; their names then start with [Scalar] and the figures are what Go
// code reaches, not the machine's vector peak.
package machine

import (
	"runtime"
	"slices"

	"github.com/klauspost/cpuid/v2"
)

// CPU is what the running CPU is, as reported by cpuid.
type CPU struct {
	// Model is the brand name ("AMD EPYC 9654 96-Core Processor"), or
	// "unknown".
	Model string `json:"model"`
	// Vendor is the vendor name cpuid reports.
	Vendor string `json:"vendor"`
	// Arch is runtime.GOARCH.
	Arch string `json:"arch"`
	// Features lists the capabilities relevant to the kernels that the CPU
	// has, in a fixed order (see [DetectCPU]).
	Features []string `json:"features"`
	// L1D, L2 and L3 are the cache sizes in bytes as cpuid reports them
	// (per core, per cluster or shared, depending on the level and the
	// CPU); 0 if unknown.
	L1D int `json:"l1d_bytes"`
	L2  int `json:"l2_bytes"`
	L3  int `json:"l3_bytes"`
	// PhysicalCores, ThreadsPerCore and LogicalCores are cpuid's counts (0
	// if unknown); LogicalCPUs is runtime.NumCPU, the CPUs this process may
	// use.
	PhysicalCores  int `json:"physical_cores"`
	ThreadsPerCore int `json:"threads_per_core"`
	LogicalCores   int `json:"logical_cores"`
	LogicalCPUs    int `json:"logical_cpus"`
}

// features are the capabilities DetectCPU looks for, with the names it
// reports them under.
var features = []struct {
	id   cpuid.FeatureID
	name string
}{
	// x86
	{cpuid.AVX2, "AVX2"},
	{cpuid.FMA3, "FMA"},
	{cpuid.F16C, "F16C"},
	{cpuid.AVX512F, "AVX512F"},
	{cpuid.AVX512BW, "AVX512BW"},
	{cpuid.AVX512VL, "AVX512VL"},
	{cpuid.AVX512BF16, "AVX512_BF16"},
	{cpuid.AVX512VNNI, "AVX512_VNNI"},
	{cpuid.AVX512FP16, "AVX512_FP16"},
	{cpuid.AVXVNNI, "AVX_VNNI"},
	{cpuid.AMXBF16, "AMX_BF16"},
	// arm64
	{cpuid.ASIMD, "ASIMD"},
	{cpuid.ASIMDDP, "ASIMDDP"},
	{cpuid.ASIMDHP, "ASIMDHP"},
	{cpuid.BF16, "BF16"},
	{cpuid.I8MM, "I8MM"},
	{cpuid.SVE, "SVE"},
}

// DetectCPU describes the running CPU.
func DetectCPU() CPU {
	c := cpuid.CPU
	cpu := CPU{
		Model:          c.BrandName,
		Vendor:         c.VendorString,
		Arch:           runtime.GOARCH,
		L1D:            max(c.Cache.L1D, 0),
		L2:             max(c.Cache.L2, 0),
		L3:             max(c.Cache.L3, 0),
		PhysicalCores:  c.PhysicalCores,
		ThreadsPerCore: c.ThreadsPerCore,
		LogicalCores:   c.LogicalCores,
		LogicalCPUs:    runtime.NumCPU(),
	}
	if cpu.Model == "" {
		cpu.Model = "unknown"
	}
	if cpu.Vendor == "" {
		cpu.Vendor = c.VendorID.String()
	}
	for _, f := range features {
		if c.Supports(f.id) {
			cpu.Features = append(cpu.Features, f.name)
		}
	}
	if runtime.GOARCH == "arm64" && !c.Supports(cpuid.ASIMD) {
		// ASIMD is mandatory on arm64; cpuid may not see it (user-mode
		// emulation, some kernels).
		cpu.Features = append([]string{"ASIMD"}, cpu.Features...)
	}
	return cpu
}

// Has reports whether the CPU has the named feature (a name of Features).
func (c CPU) Has(feature string) bool {
	return slices.Contains(c.Features, feature)
}
