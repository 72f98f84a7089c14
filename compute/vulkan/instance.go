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

// layerAvailable reports whether the loader knows the named layer.
func layerAvailable(gipa unsafe.Pointer, name string) bool {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.govk_layer_available(gipa, cname) != 0
}

// createInstance makes a Vulkan 1.1 instance, with validation (including
// synchronization validation) if asked. The call is made in C (instance.c),
// as vulkan-go's copy of the create info can be freed while it runs.
func createInstance(gipa unsafe.Pointer, validation bool) (vk.Instance, error) {
	var layer *C.char
	if validation {
		if !layerAvailable(gipa, validationLayer) {
			return nil, fmt.Errorf("vulkan: validation requested but %s is not installed (Debian package vulkan-validationlayers)", validationLayer)
		}
		layer = C.CString(validationLayer)
		defer C.free(unsafe.Pointer(layer))
	}
	var h unsafe.Pointer
	r := vk.Result(C.govk_create_instance(gipa, C.uint32_t(vk.MakeVersion(1, 1, 0)), layer, &h))
	if r == vk.ErrorIncompatibleDriver {
		return nil, errors.New("vulkan: no Vulkan driver found (vkCreateInstance: incompatible driver); install a GPU driver, or mesa-vulkan-drivers for lavapipe, and check VK_ICD_FILENAMES")
	}
	if err := vkErr("vkCreateInstance", r); err != nil {
		return nil, err
	}
	inst := *(*vk.Instance)(unsafe.Pointer(&h))
	if err := vk.InitInstance(inst); err != nil {
		vk.DestroyInstance(inst, nil)
		return nil, fmt.Errorf("vulkan: loading instance functions: %w", err)
	}
	return inst, nil
}

// computeQueue returns the first queue family of phys with compute, and
// the valid bits of its timestamps.
func computeQueue(gipa unsafe.Pointer, inst vk.Instance, phys vk.PhysicalDevice) (family, timestampBits uint32, ok bool) {
	var f, bits C.uint32_t
	if C.govk_compute_queue(gipa, handlePtr(inst), handlePtr(phys), &f, &bits) != 0 {
		return 0, 0, false
	}
	return uint32(f), uint32(bits), true
}
