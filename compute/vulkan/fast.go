//go:build cgo

package vulkan

/*
#include <stdlib.h>
#include "fast.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// fastPath holds device function pointers for recording in C.
type fastPath struct {
	fns *C.govk_fast // C memory
}

// handle64 returns a non-dispatchable (or dispatchable) Vulkan handle as
// the integer or pointer value C expects.
func handle64[T any](h T) uint64 { return *(*uint64)(unsafe.Pointer(&h)) }

// handlePtr returns a dispatchable handle as a C pointer.
func handlePtr[T any](h T) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

func (fp *fastPath) init(b *Backend) error {
	fp.fns = (*C.govk_fast)(C.malloc(C.size_t(unsafe.Sizeof(C.govk_fast{}))))
	if C.govk_fast_load(b.gipa, handlePtr(b.inst), handlePtr(b.dev), fp.fns) != 0 {
		return errors.New("vulkan: vkGetDeviceProcAddr failed for the recording functions")
	}
	return nil
}

func (fp *fastPath) destroy() {
	if fp.fns != nil {
		C.free(unsafe.Pointer(fp.fns))
		fp.fns = nil
	}
}

// barrier records the all-compute-and-transfer memory barrier.
func (fp *fastPath) barrier(cmd vk.CommandBuffer) {
	C.govk_fast_barrier(fp.fns, handlePtr(cmd))
}

// dispatch allocates and fills a descriptor set from pool, binds and
// dispatches; it returns the allocation's result (nothing is recorded
// unless it is Success).
func (fp *fastPath) dispatch(b *Backend, pool vk.DescriptorPool, pipe vk.Pipeline, bufs *[numBindings]uint64, sizes *[numBindings]uint64, push []uint32, gx, gy, gz uint32) vk.Result {
	var pushPtr *C.uint32_t
	if len(push) > 0 {
		pushPtr = (*C.uint32_t)(unsafe.Pointer(&push[0]))
	}
	r := C.govk_fast_dispatch(fp.fns, handlePtr(b.dev), handlePtr(b.rec.cmd), C.uint64_t(handle64(pool)),
		C.uint64_t(handle64(b.rec.setLayout)), C.uint64_t(handle64(b.rec.pipeLayout)), C.uint64_t(handle64(pipe)),
		(*C.uint64_t)(unsafe.Pointer(&bufs[0])), (*C.uint64_t)(unsafe.Pointer(&sizes[0])), numBindings,
		pushPtr, C.uint32_t(len(push)*4), C.uint32_t(gx), C.uint32_t(gy), C.uint32_t(gz))
	return vk.Result(r)
}

// createModule creates a shader module from SPIR-V words.
func (fp *fastPath) createModule(b *Backend, code []uint32) (vk.ShaderModule, vk.Result) {
	var h C.uint64_t
	r := C.govk_create_module(fp.fns, handlePtr(b.dev), (*C.uint32_t)(unsafe.Pointer(&code[0])), C.size_t(4*len(code)), &h)
	return handleOf[vk.ShaderModule](uint64(h)), vk.Result(r)
}

// createPipeline creates a compute pipeline of module with the pipeline
// layout every shader shares and the given specialisation constants.
func (fp *fastPath) createPipeline(b *Backend, module vk.ShaderModule, spec []uint32) (vk.Pipeline, vk.Result) {
	var h C.uint64_t
	r := C.govk_create_pipeline(fp.fns, handlePtr(b.dev), C.uint64_t(handle64(module)), C.uint64_t(handle64(b.rec.pipeLayout)),
		(*C.uint32_t)(unsafe.Pointer(&spec[0])), C.uint32_t(len(spec)), &h)
	return handleOf[vk.Pipeline](uint64(h)), vk.Result(r)
}

// handleOf returns the handle of type T with the value v (the inverse of
// handle64).
func handleOf[T any](v uint64) T { return *(*T)(unsafe.Pointer(&v)) }

// createLayouts creates the descriptor set layout of nbindings storage
// buffers that every shader shares, and its pipeline layout with pushBytes
// of push constants.
func (fp *fastPath) createLayouts(dev vk.Device, nbindings, pushBytes uint32) (vk.DescriptorSetLayout, vk.PipelineLayout, error) {
	var sl, pl C.uint64_t
	r := C.govk_create_layouts(fp.fns, handlePtr(dev), C.uint32_t(nbindings), C.uint32_t(pushBytes), &sl, &pl)
	setLayout, pipeLayout := handleOf[vk.DescriptorSetLayout](uint64(sl)), handleOf[vk.PipelineLayout](uint64(pl))
	if r != 0 {
		if sl != 0 {
			vk.DestroyDescriptorSetLayout(dev, setLayout, nil)
		}
		return nil, nil, vkErr("vkCreateDescriptorSetLayout/vkCreatePipelineLayout", vk.Result(r))
	}
	return setLayout, pipeLayout, nil
}

// createPool creates a descriptor pool of maxSets sets holding descriptors
// storage buffers in all.
func (fp *fastPath) createPool(dev vk.Device, maxSets, descriptors uint32) (vk.DescriptorPool, error) {
	var h C.uint64_t
	if err := vkErr("vkCreateDescriptorPool", vk.Result(C.govk_create_pool(fp.fns, handlePtr(dev), C.uint32_t(maxSets), C.uint32_t(descriptors), &h))); err != nil {
		return nil, err
	}
	return handleOf[vk.DescriptorPool](uint64(h)), nil
}

// begin begins cmd for one submission.
func (fp *fastPath) begin(cmd vk.CommandBuffer) error {
	return vkErr("vkBeginCommandBuffer", vk.Result(C.govk_begin(fp.fns, handlePtr(cmd))))
}

// submit submits cmd on queue, signalling fence when it completes.
func (fp *fastPath) submit(queue vk.Queue, cmd vk.CommandBuffer, fence vk.Fence) error {
	return vkErr("vkQueueSubmit", vk.Result(C.govk_submit(fp.fns, handlePtr(queue), handlePtr(cmd), C.uint64_t(handle64(fence)))))
}

// copy records a copy of size bytes from src at srcOff to dst at dstOff.
func (fp *fastPath) copy(cmd vk.CommandBuffer, src, dst vk.Buffer, srcOff, dstOff, size uint64) {
	C.govk_copy(fp.fns, handlePtr(cmd), C.uint64_t(handle64(src)), C.uint64_t(handle64(dst)), C.uint64_t(srcOff), C.uint64_t(dstOff), C.uint64_t(size))
}

// hostBarrier records the barrier that makes earlier compute and transfer
// writes visible to the host.
func (fp *fastPath) hostBarrier(cmd vk.CommandBuffer) {
	C.govk_host_barrier(fp.fns, handlePtr(cmd))
}

// createBuffer creates an exclusive buffer of size bytes.
func (fp *fastPath) createBuffer(dev vk.Device, size uint64, usage vk.BufferUsageFlags) (vk.Buffer, error) {
	var h C.uint64_t
	if err := vkErr("vkCreateBuffer", vk.Result(C.govk_create_buffer(fp.fns, handlePtr(dev), C.uint64_t(size), C.uint32_t(usage), &h))); err != nil {
		return nil, err
	}
	return handleOf[vk.Buffer](uint64(h)), nil
}

// bufferRequirements returns the bytes of memory buf needs, the alignment
// of their offset and the memory types (a bit per index) it can be bound
// to.
func (fp *fastPath) bufferRequirements(dev vk.Device, buf vk.Buffer) (size, align uint64, typeBits uint32) {
	var sz, al C.uint64_t
	var bits C.uint32_t
	C.govk_buffer_requirements(fp.fns, handlePtr(dev), C.uint64_t(handle64(buf)), &sz, &al, &bits)
	return uint64(sz), uint64(al), uint32(bits)
}

// allocMemory allocates size bytes of memory type typeIndex.
func (fp *fastPath) allocMemory(dev vk.Device, size uint64, typeIndex uint32) (vk.DeviceMemory, error) {
	var h C.uint64_t
	if err := vkErr(fmt.Sprintf("vkAllocateMemory(%d bytes)", size), vk.Result(C.govk_alloc_memory(fp.fns, handlePtr(dev), C.uint64_t(size), C.uint32_t(typeIndex), &h))); err != nil {
		return nil, err
	}
	return handleOf[vk.DeviceMemory](uint64(h)), nil
}
