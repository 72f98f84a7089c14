//go:build cgo

package vulkan

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/compute"
)

const validationLayer = "VK_LAYER_KHRONOS_validation"

// Attention workgroups that keep a device busy: a few per multiprocessor on
// a big GPU (Vulkan does not report their number), which splits the cache
// length (see attnSplit), and one on a CPU device (lavapipe), whose
// threads are few and where splitting only adds a merge pass: it splits
// nothing.
const (
	attnTargetGPU = 512
	attnTargetCPU = 1
)

// Upload ring sizes: weights are staged through the ring in copies of half
// its size with a submission each time it fills, so a GPU loading tens of
// GB wants a large one; on a CPU device every copy is a host memcpy anyway.
const (
	ringBytesGPU = 64 << 20
	ringBytesCPU = 4 << 20
)

// Backend runs the graph on a Vulkan device. Like the CPU backend it is for
// use by one goroutine at a time.
type Backend struct {
	opts Options
	gipa unsafe.Pointer

	inst  vk.Instance
	debug *debugSink
	phys  vk.PhysicalDevice
	dev   vk.Device
	queue vk.Queue
	qfam  uint32

	props      vk.PhysicalDeviceProperties
	mem        vk.PhysicalDeviceMemoryProperties
	sg         subgroupInfo
	maxBinding uint64 // largest buffer binding in bytes
	chunkBytes uint64 // largest weight chunk in bytes (maxBinding unless lowered)
	tiledFrom  int    // batch size from which MatMul uses the tiled shader
	// matvecUnroll is the matvec shader's UNROLL (1 to 4): 128-bit weight
	// loads per lane per iteration. 1 until a GPU measurement says more.
	matvecUnroll int
	// coopmat is the tile size (16 or 8) of the cooperative-matrix matmul
	// shader the device runs (VK_KHR_cooperative_matrix, f16 inputs, f32
	// accumulators), which MatMul then uses for the tiled products of f16
	// and bf16 weights; 0 where it runs none.
	coopmat       int
	coopmatShader string // matmulcm16 or matmulcm8
	// coopmatQShader is its variant for quantized weights (matmulcmq16
	// or matmulcmq8).
	coopmatQShader string
	// attnTarget is how many attention workgroups fill the device; above
	// one the cache length is split (attnSplit). attnSplitLen, when
	// positive (tests), fixes the split length instead.
	attnTarget   int
	attnSplitLen int
	// deltaChunkMin is the fewest tokens of a sequence for which
	// GatedDeltaRule runs the chunked form, and deltaScratchMax the most
	// bytes of scratch it uses (tests lower both).
	deltaChunkMin   int
	deltaScratchMax uint64
	heapUsed        [vk.MaxMemoryHeaps]uint64
	// heapAlloc is the bytes of VkDeviceMemory allocated from each heap
	// (arena blocks and host-visible buffers); allocations counts them.
	heapAlloc   [vk.MaxMemoryHeaps]uint64
	allocations int
	arena       arena
	desc        string

	rec          recorder
	prof         *profiler // nil unless Options.Profile
	fast         fastPath
	pipes        pipelines
	ring         *ring
	readback     *rawBuf
	argmaxBuf    *rawBuf
	dummy        *rawBuf
	attnPart     *rawBuf              // attention partial results of split cache lengths
	deltaScratch *rawBuf              // intermediate results of the chunked delta rule
	pending      []*rawBuf            // freed while still in use by recorded work
	live         map[*rawBuf]struct{} // every buffer not yet destroyed, for Close

	err   error      // first error since the last report, returned by Sync
	msgMu sync.Mutex // guards msgs: layers may call back from any thread
	msgs  []string   // validation errors and warnings since the last report
}

// deviceRank orders device types for automatic choice.
func deviceRank(t vk.PhysicalDeviceType) int {
	switch t {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return 0
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return 1
	case vk.PhysicalDeviceTypeVirtualGpu:
		return 2
	case vk.PhysicalDeviceTypeCpu:
		return 3
	}
	return 4
}

func deviceTypeName(t vk.PhysicalDeviceType) string {
	switch t {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return "discrete GPU"
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return "integrated GPU"
	case vk.PhysicalDeviceTypeVirtualGpu:
		return "virtual GPU"
	case vk.PhysicalDeviceTypeCpu:
		return "CPU"
	}
	return "other"
}

// vkErr turns a failed Vulkan result into an error naming the call.
func vkErr(what string, r vk.Result) error {
	if r == vk.Success {
		return nil
	}
	if err := vk.Error(r); err != nil {
		return fmt.Errorf("vulkan: %s: %w", what, err)
	}
	return fmt.Errorf("vulkan: %s: result %d", what, r)
}

func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22, (v>>12)&0x3ff, v&0xfff)
}

// physicalDevices lists the instance's devices with their properties.
func physicalDevices(inst vk.Instance) ([]vk.PhysicalDevice, []vk.PhysicalDeviceProperties, error) {
	var n uint32
	if err := vkErr("vkEnumeratePhysicalDevices", vk.EnumeratePhysicalDevices(inst, &n, nil)); err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, errors.New("vulkan: no Vulkan devices found (install a GPU driver, or mesa-vulkan-drivers for lavapipe)")
	}
	devs := make([]vk.PhysicalDevice, n)
	if err := vkErr("vkEnumeratePhysicalDevices", vk.EnumeratePhysicalDevices(inst, &n, devs)); err != nil {
		return nil, nil, err
	}
	props := make([]vk.PhysicalDeviceProperties, n)
	for i := range devs[:n] {
		vk.GetPhysicalDeviceProperties(devs[i], &props[i])
		props[i].Deref()
		props[i].Limits.Deref()
	}
	return devs[:n], props, nil
}

// Devices lists the Vulkan devices, in the order Options.Device counts
// them (index 0 is Device 1).
func Devices() ([]string, error) {
	gipa, err := loaderOnce()
	if err != nil {
		return nil, err
	}
	inst, err := createInstance(gipa, false)
	if err != nil {
		return nil, err
	}
	defer vk.DestroyInstance(inst, nil)
	_, props, err := physicalDevices(inst)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range props {
		out = append(out, fmt.Sprintf("%s (%s, Vulkan %s)", vk.ToString(p.DeviceName[:]), deviceTypeName(p.DeviceType), versionString(p.ApiVersion)))
	}
	return out, nil
}

// New opens a Vulkan device and returns a backend on it.
func New(o Options) (*Backend, error) {
	gipa, err := loaderOnce()
	if err != nil {
		return nil, err
	}
	b := &Backend{opts: o, gipa: gipa, live: map[*rawBuf]struct{}{}}
	if err := b.init(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) logf(format string, args ...any) {
	if b.opts.Log != nil {
		b.opts.Log(fmt.Sprintf(format, args...))
	}
}

func (b *Backend) init() error {
	inst, err := createInstance(b.gipa, b.opts.Validation)
	if err != nil {
		return err
	}
	b.inst = inst
	if b.opts.Validation {
		if err := b.startDebug(); err != nil {
			return err
		}
	}
	devs, props, err := physicalDevices(b.inst)
	if err != nil {
		return err
	}
	pick := -1
	if b.opts.Device > 0 {
		if b.opts.Device > len(devs) {
			return fmt.Errorf("vulkan: device %d requested but only %d present", b.opts.Device, len(devs))
		}
		pick = b.opts.Device - 1
	} else {
		for i, p := range props {
			if p.ApiVersion < vk.MakeVersion(1, 1, 0) {
				continue
			}
			if pick < 0 || deviceRank(p.DeviceType) < deviceRank(props[pick].DeviceType) {
				pick = i
			}
		}
		if pick < 0 {
			return errors.New("vulkan: no device supports Vulkan 1.1")
		}
	}
	b.phys, b.props = devs[pick], props[pick]
	name := vk.ToString(b.props.DeviceName[:])
	if b.props.ApiVersion < vk.MakeVersion(1, 1, 0) {
		return fmt.Errorf("vulkan: device %s supports only Vulkan %s; 1.1 is needed", name, versionString(b.props.ApiVersion))
	}
	if b.sg, err = querySubgroup(b.gipa, b.inst, b.phys, b.props.ApiVersion); err != nil {
		return err
	}
	const needOps = vk.SubgroupFeatureBasicBit | vk.SubgroupFeatureArithmeticBit
	if b.sg.ops&uint32(needOps) != uint32(needOps) || b.sg.stages&uint32(vk.ShaderStageComputeBit) == 0 {
		return fmt.Errorf("vulkan: device %s lacks subgroup arithmetic in compute shaders", name)
	}
	if b.sg.size < 4 || b.sg.size > 128 {
		return fmt.Errorf("vulkan: device %s has unsupported subgroup size %d", name, b.sg.size)
	}
	lim := b.props.Limits
	if lim.MaxComputeSharedMemorySize < 16384 || lim.MaxComputeWorkGroupInvocations < 256 || lim.MaxPushConstantsSize < 128 {
		return fmt.Errorf("vulkan: device %s limits too small (shared %d, invocations %d)", name, lim.MaxComputeSharedMemorySize, lim.MaxComputeWorkGroupInvocations)
	}
	b.maxBinding = uint64(lim.MaxStorageBufferRange) &^ 15
	if b.maxBinding < 1<<20 {
		return fmt.Errorf("vulkan: device %s: largest storage buffer binding %d bytes is too small", name, b.maxBinding)
	}
	b.chunkBytes = b.maxBinding
	if m := b.opts.MaxBindingBytes; m > 0 && uint64(m) < b.chunkBytes {
		b.chunkBytes = max(16, uint64(m)&^15)
	}
	vk.GetPhysicalDeviceMemoryProperties(b.phys, &b.mem)
	b.mem.Deref()
	for i := range b.mem.MemoryTypes[:b.mem.MemoryTypeCount] {
		b.mem.MemoryTypes[i].Deref()
	}
	for i := range b.mem.MemoryHeaps[:b.mem.MemoryHeapCount] {
		b.mem.MemoryHeaps[i].Deref()
	}

	// One compute queue.
	qfam, timestampBits, ok := computeQueue(b.gipa, b.inst, b.phys)
	b.qfam = ^uint32(0)
	if ok {
		b.qfam = qfam
	}
	if b.qfam == ^uint32(0) {
		return fmt.Errorf("vulkan: device %s has no compute queue", name)
	}
	// The cooperative-matrix shaders take 20 KiB of shared memory and four
	// subgroups.
	if !b.opts.NoCooperativeMatrix && b.props.ApiVersion >= vk.MakeVersion(1, 2, 0) &&
		lim.MaxComputeSharedMemorySize >= 20<<10 && lim.MaxComputeWorkGroupInvocations >= 4*b.sg.size {
		b.coopmat = coopmatTile(b.gipa, b.inst, b.phys)
	}
	dev, err := createDevice(b.gipa, b.inst, b.phys, b.qfam, b.coopmat > 0)
	if err != nil && b.coopmat > 0 {
		// A driver that lists the extension and features but will not
		// enable them: run on the portable shaders instead.
		b.logf("vulkan: creating the device with cooperative matrices failed (%v); using the portable tiled shader", err)
		b.coopmat = 0
		dev, err = createDevice(b.gipa, b.inst, b.phys, b.qfam, false)
	}
	if err != nil {
		return err
	}
	b.coopmatShader = fmt.Sprintf("matmulcm%d", b.coopmat)
	b.coopmatQShader = fmt.Sprintf("matmulcmq%d", b.coopmat)
	b.dev = dev
	var q vk.Queue
	vk.GetDeviceQueue(b.dev, b.qfam, 0, &q)
	b.queue = q

	if err := b.fast.init(b); err != nil {
		return err
	}
	if err := b.rec.init(b); err != nil {
		return err
	}
	if b.opts.Profile {
		b.prof = &profiler{}
		if err := b.prof.init(b, timestampBits); err != nil {
			b.prof = nil
			return err
		}
		b.rec.prof = b.prof
	}
	if err := b.pipes.init(b); err != nil {
		return err
	}
	b.arena.init(b)
	if b.dummy, err = b.newRaw(16, memDevice); err != nil {
		return err
	}
	ringBytes := uint64(ringBytesGPU)
	if b.props.DeviceType == vk.PhysicalDeviceTypeCpu {
		ringBytes = ringBytesCPU
	}
	if b.ring, err = newRing(b, min(ringBytes, b.maxBinding)); err != nil {
		return err
	}
	b.tiledFrom = maxBatch + 1
	b.matvecUnroll = 1
	b.attnTarget = attnTargetGPU
	b.deltaChunkMin = deltaChunkMinDefault
	b.deltaScratchMax = min(b.maxBinding, deltaScratchCap)
	if b.props.DeviceType == vk.PhysicalDeviceTypeCpu {
		b.tiledFrom = math.MaxInt
		b.attnTarget = attnTargetCPU
		// The host records on the cores that execute: nothing to overlap.
		b.rec.submitEvery = 0
	}
	if b.opts.TiledFrom > 0 {
		b.tiledFrom = b.opts.TiledFrom
	}
	b.desc = b.describe(name)
	return nil
}

// describe builds the line Describe returns.
func (b *Backend) describe(name string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "vulkan: %s (%s), Vulkan %s", name, deviceTypeName(b.props.DeviceType), versionString(b.props.ApiVersion))
	if b.sg.driverName != "" {
		fmt.Fprintf(&sb, ", driver %s %s", b.sg.driverName, b.sg.driverInfo)
	}
	var local uint64
	for i := range b.mem.MemoryHeaps[:b.mem.MemoryHeapCount] {
		h := b.mem.MemoryHeaps[i]
		if h.Flags&vk.MemoryHeapFlags(vk.MemoryHeapDeviceLocalBit) != 0 {
			local = max(local, uint64(h.Size))
		}
	}
	fmt.Fprintf(&sb, ", %.1f GiB device-local heap, subgroup %d, max binding %d MiB; features: subgroup arithmetic, bf16/f16 weights as packed uint",
		float64(local)/(1<<30), b.sg.size, b.maxBinding>>20)
	if b.coopmat > 0 {
		fmt.Fprintf(&sb, ", cooperative matrix (f16 %dx%dx%d) for prefill", b.coopmat, b.coopmat, b.coopmat)
	}
	if b.opts.Validation {
		sb.WriteString("; validation on")
	}
	return sb.String()
}

// Describe returns a line naming the device, driver, memory and features
// used, for the log at start.
func (b *Backend) Describe() string { return b.desc }

// Name implements compute.Backend.
func (b *Backend) Name() string {
	return "vulkan (" + vk.ToString(b.props.DeviceName[:]) + ")"
}

// CooperativeMatrix returns the side of the f16 cooperative-matrix tiles
// the prefill products run on (16 or 8), or 0 where they run on the
// portable tiled shader.
func (b *Backend) CooperativeMatrix() int { return b.coopmat }

// SubgroupSize returns the device's subgroup size.
func (b *Backend) SubgroupSize() int { return int(b.sg.size) }

// Close implements compute.Backend: it waits for the device and releases
// everything.
func (b *Backend) Close() error {
	var err error
	if b.dev != nil {
		err = b.rec.wait(nil)
		vk.DeviceWaitIdle(b.dev)
		b.releasePending()
		b.pipes.destroy(b)
		b.ring.destroy(b)
		for _, r := range []*rawBuf{b.readback, b.argmaxBuf, b.dummy, b.attnPart, b.deltaScratch} {
			r.destroy(b)
		}
		b.readback, b.argmaxBuf, b.dummy, b.attnPart, b.deltaScratch = nil, nil, nil, nil, nil
		// Weights and buffers the caller did not free.
		for r := range b.live {
			r.destroy(b)
		}
		for len(b.arena.blocks) > 0 {
			b.dropBlock(b.arena.blocks[0])
		}
		if b.prof != nil {
			b.prof.destroy(b)
		}
		b.rec.destroy(b)
		b.fast.destroy()
		vk.DestroyDevice(b.dev, nil)
		b.dev = nil
	}
	b.stopDebug()
	if b.inst != nil {
		vk.DestroyInstance(b.inst, nil)
		b.inst = nil
	}
	return joinErr(err, b.report())
}

// compile-time check
var _ compute.Backend = (*Backend)(nil)
