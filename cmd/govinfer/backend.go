package main

import (
	"flag"
	"fmt"
	"github.com/govinfer/govinfer/asm"
	goio "io"
	"runtime"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/compute/vulkan"
)

// backendOptions selects and configures a compute backend.
type backendOptions struct {
	name    string // "cpu" or "vulkan"
	threads int    // CPU worker goroutines; 0 = all cores
	device  int    // Vulkan device: 0 = best (discrete GPU first), N = the Nth listed
	// noCoopmat keeps Vulkan prefill products off VK_KHR_cooperative_matrix.
	noCoopmat bool
	// profile times every Vulkan operation with device timestamps.
	profile bool
	// bf16Inputs rounds the CPU's bf16 products' inputs to bf16
	// (cpu.Options.BF16Inputs).
	bf16Inputs bool
	// noAMXTiles keeps the CPU's bf16 products off AMX tiles
	// (cpu.Options.NoAMXTiles).
	noAMXTiles bool
	// noFMATiles keeps the CPU's bf16 weights row-major where they are
	// not on AMX tiles (cpu.Options.NoFMATiles).
	noFMATiles bool
	// kernels names the CPU kernel set to run (cpuKernels); "" or "auto"
	// is the best the CPU has.
	kernels string
	// log, when set, receives one line describing the backend and device.
	log goio.Writer
}

// backendNames lists the values --backend accepts.
const backendNames = "cpu or vulkan"

// newBackend creates the backend named in o.
func newBackend(o backendOptions) (compute.Backend, error) {
	var be compute.Backend
	switch o.name {
	case "cpu", "":
		k, err := cpuKernels(o.kernels)
		if err != nil {
			return nil, err
		}
		be = cpu.New(cpu.Options{Threads: o.threads, BF16Inputs: o.bf16Inputs, NoAMXTiles: o.noAMXTiles, NoFMATiles: o.noFMATiles, Kernels: k})
		if o.log != nil {
			fmt.Fprintf(o.log, "backend: %s\n", be.Name())
		}
	case "vulkan":
		if o.bf16Inputs {
			return nil, fmt.Errorf("--bf16-inputs applies to --backend cpu only")
		}
		vk, err := vulkan.New(vulkan.Options{Device: o.device, NoCooperativeMatrix: o.noCoopmat, Profile: o.profile})
		if err != nil {
			return nil, fmt.Errorf("--backend vulkan cannot start: %w", err)
		}
		if o.log != nil {
			fmt.Fprintf(o.log, "backend: %s\n", vk.Describe())
		}
		be = vk
	default:
		return nil, fmt.Errorf("unknown backend %q (want %s)", o.name, backendNames)
	}
	return be, nil
}

// cpuKernelSets are the CPU kernel sets --cpu-kernels names, for
// comparisons on one machine: what an older CPU would run.
var cpuKernelSets = map[string]asm.Features{
	"go":           {},
	"avx2":         {AVX2: true},
	"avx2-avxvnni": {AVX2: true, AVXVNNI: true},
	"avx512":       {AVX2: true, AVX512: true, AVX512BF16: true, AVX512VNNI: true},
	"neon":         {NEON: true},
}

// cpuKernels returns the kernel set --cpu-kernels names: nil (the best
// the CPU has) for "" and "auto", else the named set, which must be one
// the CPU runs in full.
func cpuKernels(name string) (*asm.Kernels, error) {
	if name == "" || name == "auto" {
		return nil, nil
	}
	f, ok := cpuKernelSets[name]
	if !ok {
		return nil, fmt.Errorf("--cpu-kernels: unknown set %q (want auto, go, avx2, avx2-avxvnni, avx512 or neon)", name)
	}
	k := asm.New(f)
	if got := k.Features(); name != "go" && got == (asm.Features{}) {
		return nil, fmt.Errorf("--cpu-kernels: this CPU cannot run the %s kernels", name)
	}
	return k, nil
}

// cpuKernelsFlag defines --cpu-kernels.
func cpuKernelsFlag(fs *flag.FlagSet) *string {
	return fs.String("cpu-kernels", "auto", "CPU kernel set: auto (the best this CPU has), or for comparisons the set an older CPU would run: avx2 (AVX2+FMA+F16C only), avx2-avxvnni (with AVX-VNNI, as Intel from Alder Lake), avx512 (no AMX), go (pure Go), neon")
}

// visionBackend returns what makes the vision tower's backend for a model
// on the backend o describes: on Vulkan a second backend on the same
// device (the model's serves the engine loop alone), nil on the CPU, where
// llm gives the tower a CPU backend of its own.
func visionBackend(o backendOptions) func() (compute.Backend, error) {
	if o.name != "vulkan" {
		return nil
	}
	return func() (compute.Backend, error) {
		vk, err := vulkan.New(vulkan.Options{Device: o.device, NoCooperativeMatrix: o.noCoopmat})
		if err != nil {
			return nil, fmt.Errorf("vulkan: %w", err)
		}
		return vk, nil
	}
}

// bf16InputsFlag defines --bf16-inputs.
func bf16InputsFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("bf16-inputs", false, "CPU: round the inputs of products with bf16 weights to bf16, as llama.cpp does, "+
		"to run them on VDPBF16PS where the CPU has AVX512_BF16 (measured on a Zen 4: about 1.5x the prefill rate, "+
		"1.2x batched decode; no faster elsewhere); logits move by about 1e-2 relative on the random test models against 1e-5 for the "+
		"default exact float32 products; results stay reproducible across batches and prompt cuts")
}

// amxTilesFlag defines --amx-tiles, on by default.
func amxTilesFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("amx-tiles", true, "CPU: multiply bf16 weights on AMX tiles where the CPU has AMX-BF16 (Xeon from Sapphire Rapids on): "+
		"the weights are repacked at load; prompt rows run on the tiles with each input split into three bf16 parts, so the "+
		"products stay exact (one part with --bf16-inputs), decoded tokens' rows on FMA; measured on such a Xeon, 2 threads: "+
		"prefill 1.9-2.2x, decode 0.97-1.21x the rates of the row-major kernels (--amx-tiles=false --fma-tiles=false); "+
		"no effect on other CPUs or on --backend vulkan")
}

// fmaTilesFlag defines --fma-tiles, on by default.
func fmaTilesFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("fma-tiles", true, "CPU with AVX-512 whose bf16 weights are not on AMX tiles (no AMX, or --amx-tiles=false): "+
		"repack bf16 weights at load into the 16-row tile layout and run every product, prompt and decode, on the exact float32 "+
		"FMA tile kernels (measured on a Sapphire Rapids-class Xeon, 2 threads, alternating rounds: prefill 1.27-1.68x, "+
		"decode 0.98-1.21x, batched decode 1.30-1.35x the rates of --fma-tiles=false); "+
		"ignored with --bf16-inputs, which reads the row-major layout, and on CPUs without AVX-512")
}

// runtimeThreads is the default number of CPU worker threads.
func runtimeThreads() int { return runtime.NumCPU() }

// cpuMoEFlags adds llama.cpp's --cpu-moe and --n-cpu-moe to fs. The
// function it returns gives llm.Options.CPUMoE (model.Options.CPUMoELayers):
// -1 for --cpu-moe, N for --n-cpu-moe N, 0 for neither; an error for a
// negative N or both.
func cpuMoEFlags(fs *flag.FlagSet) func() (int, error) {
	all := fs.Bool("cpu-moe", false, "mixture-of-experts models on --backend vulkan: keep every layer's experts in host memory and run them on the CPU (routers, shared experts and everything else on the device), as llama.cpp's --cpu-moe; no effect on the CPU backend or a dense model")
	n := fs.Int("n-cpu-moe", 0, "as --cpu-moe for the experts of the first `N` layers only")
	return func() (int, error) {
		switch {
		case *n < 0:
			return 0, fmt.Errorf("--n-cpu-moe must not be negative, got %d", *n)
		case *all && *n > 0:
			return 0, fmt.Errorf("--cpu-moe and --n-cpu-moe %d: give one", *n)
		case *all:
			return -1, nil
		}
		return *n, nil
	}
}

// hostRoutingUsage is --host-moe-routing's help.
const hostRoutingUsage = "mixture-of-experts models on --backend vulkan: route on the host (each MoE layer's router logits read back, each chosen expert run as a weight of its own) rather than on the device: slower, but what LoRA adapters that update the experts need unmerged"

// expertBackend returns the CPU backend that holds and runs the experts
// of --cpu-moe or --n-cpu-moe (layers, as cpuMoEFlags gives it) beside
// the backend be, or nil when the experts stay on be: layers is 0 or be
// is a CPU backend already.
func expertBackend(layers int, be compute.Backend, threads int) compute.Backend {
	if _, onCPU := be.(*cpu.Backend); layers == 0 || onCPU {
		return nil
	}
	return cpu.New(cpu.Options{Threads: threads})
}
