//go:build cgo

package vulkan

/*
#include <stdlib.h>
#include "fast.h"
*/
import "C"

import (
	"errors"
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
