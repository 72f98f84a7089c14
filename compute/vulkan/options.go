// Package vulkan implements compute.Backend on any Vulkan 1.1+ device,
// with the GLSL compute shaders of package shaders compiled to SPIR-V and
// embedded in the binary. Calls that pass arrays or strings, and those
// made per step or per buffer, are made in this package's C (fast.c,
// instance.c; the device is created in coopmat.go's): vulkan-go frees its
// C copies of arrays and strings from finalizers that can run while the
// call still uses them, and leaks its copy of every other struct. The rest,
// made once per backend, go through github.com/vulkan-go/vulkan.
//
// The backend records operations into command buffers and submits them at
// Download, Sync or Argmax, with no CPU round trip inside a step. Barriers
// separate only dependent operations: the SPIR-V of each shader says which
// bindings it writes, and an operation waits only where it reads or writes
// a buffer that work since the latest barrier writes, or writes one that
// work reads; independent ones (the q, k, v projections, gate and up)
// overlap. On GPUs a step's command buffer is submitted every 64
// dispatches while the host records the rest, so the device starts early.
// Weights live in device-local memory in their stored dtype, split by rows
// into chunks no larger than the device's maxStorageBufferRange, each its
// own VkBuffer bound at an offset inside large blocks of memory (arena.go),
// so the allocations count the bytes, not the tensors; quantized
// ones (GGML's Q8_0, Q4_K, Q5_K and Q6_K blocks, as a GGUF file stores
// them) are dequantized in the shaders of MatMul and Embed, with float32
// activations and accumulation. Small Go
// slices an operation takes (token ids, rope tables) and Upload data go
// through a host-visible upload ring.
//
// Attention writes the new keys and values into the caches with one
// dispatch, then runs tiled over 8 query rows per workgroup (the query
// heads of a GQA group and neighbouring tokens share every K and V read)
// with an online softmax; when too few workgroups would run (decode on a
// long context), the cache length is split and a merge pass combines the
// partial softmaxes (flash-decoding). The gated delta rule runs token by
// token for decode and short sequences (parallel over heads and state
// columns) and, from 64 tokens, in chunks of 64 (WY form): the intra-chunk
// terms of all chunks in parallel, then one pass sequential over the chunks
// that carries the state, then the outputs of all chunks in parallel.
// Prefill products (more than 8 tokens) of f16 and bf16 weights run on
// cooperative matrices where the device has VK_KHR_cooperative_matrix with
// f16 16x16x16 or 8x8x8 tiles (tensor cores on NVIDIA): each float32
// activation is split into two f16 halves under a power-of-two scale per
// token, so the product keeps about float32 precision and the golden
// tolerances hold; elsewhere they run on a portable tiled shader.
// MemoryBandwidth measures the device's copy bandwidth, the baseline
// "govinfer bench" compares decode with; scripts/gpu-check.sh runs the
// tests and benchmarks on a real GPU.
//
// The package needs cgo and the Vulkan loader (libvulkan.so.1, Debian
// package libvulkan1) at run time; without cgo, New returns an error that
// says so. On machines without a GPU, Mesa's lavapipe (Debian
// mesa-vulkan-drivers) is a conformant CPU implementation.
package vulkan

import "time"

// Options configures a Vulkan backend.
type Options struct {
	// Device selects the physical device: 0 picks automatically (discrete
	// GPU first, then integrated, virtual, CPU); N > 0 picks the device at
	// index N-1 of Devices.
	Device int
	// Validation enables VK_LAYER_KHRONOS_validation and routes its
	// messages to Log; errors and warnings it reports are returned by the
	// next Sync, Download or Argmax.
	Validation bool
	// Log receives diagnostic messages (validation output). Nil discards
	// them.
	Log func(msg string)
	// MaxBindingBytes, if positive, lowers the size of weight chunks below
	// the device's maxStorageBufferRange, so tests can exercise the
	// splitting of large weights on small ones. Weights too narrow to split
	// (norm and gate vectors, conv taps) must still fit one chunk.
	MaxBindingBytes int
	// TiledFrom, if positive, is the number of inputs from which MatMul
	// runs the tiled matrix-matrix shaders rather than matrix-vector
	// passes of 8 inputs. Zero picks per device: 9 on GPUs, never on CPU
	// devices such as lavapipe.
	TiledFrom int
	// Profile times every operation on the device with timestamp queries;
	// Profile returns the totals by shader. It adds a timestamp write per
	// operation, so leave it off outside measurements.
	Profile bool
	// NoCooperativeMatrix keeps the prefill products on the portable tiled
	// shader on devices that have VK_KHR_cooperative_matrix.
	NoCooperativeMatrix bool
}

// ProfileEntry is the device time one kind of operation took.
type ProfileEntry struct {
	// Op names the shader ("matvec", "attention", ...) or "copy" for
	// transfers (uploads, copies, fills).
	Op string
	// Count is how many dispatches or transfers ran.
	Count int
	// Time is their total device time.
	Time time.Duration
}

// Stats counts what the backend has recorded since it opened.
type Stats struct {
	Dispatches  int // compute dispatches
	Barriers    int // pipeline barriers between them
	Submissions int // command buffers submitted
}
