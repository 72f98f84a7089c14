//go:build cgo

package vulkan

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

// govk_open loads the Vulkan loader and returns its vkGetInstanceProcAddr,
// or NULL with the dlerror text in *err.
static void* govk_open(const char** err) {
	void* h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		*err = dlerror();
		return NULL;
	}
	void* f = dlsym(h, "vkGetInstanceProcAddr");
	if (!f) {
		*err = dlerror();
	}
	return f;
}

typedef void* (*govk_gipa)(void* instance, const char* name);
typedef void (*govk_props2)(void* phys, void* props);

// Minimal mirrors of the Vulkan 1.1/1.2 property structs this package
// reads through pNext (layouts from vulkan_core.h).
typedef struct {
	int32_t sType; void* pNext;
	uint32_t subgroupSize, supportedStages, supportedOperations, quadOperationsInAllStages;
} govk_subgroup;
typedef struct {
	int32_t sType; void* pNext;
	uint32_t driverID; char driverName[256]; char driverInfo[256]; uint8_t conformance[4];
} govk_driver;

// govk_query fills subgroup size, stages and operations, and the driver
// name and info when wantDriver (Vulkan 1.2+). Returns -1 if
// vkGetPhysicalDeviceProperties2 is missing.
static int govk_query(void* gipa, void* instance, void* phys, int wantDriver,
		uint32_t* sg, char* name, char* info) {
	govk_props2 f = (govk_props2)((govk_gipa)gipa)(instance, "vkGetPhysicalDeviceProperties2");
	if (!f) {
		return -1;
	}
	uint64_t props[512]; // VkPhysicalDeviceProperties2 is under 1 KiB
	memset(props, 0, sizeof props);
	govk_subgroup s; memset(&s, 0, sizeof s);
	govk_driver d; memset(&d, 0, sizeof d);
	s.sType = 1000094000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES
	d.sType = 1000196000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES
	if (wantDriver) {
		s.pNext = &d;
	}
	((int32_t*)props)[0] = 1000059001; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
	((void**)props)[1] = &s;
	f(phys, props);
	sg[0] = s.subgroupSize; sg[1] = s.supportedStages; sg[2] = s.supportedOperations;
	memcpy(name, d.driverName, 256); name[255] = 0;
	memcpy(info, d.driverInfo, 256); info[255] = 0;
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// loaderOnce loads libvulkan.so.1 once per process: the loader and the
// function pointers vulkan-go keeps are process-wide.
var loaderOnce = sync.OnceValues(func() (unsafe.Pointer, error) {
	var cerr *C.char
	gipa := C.govk_open(&cerr)
	if gipa == nil {
		msg := "unknown error"
		if cerr != nil {
			msg = C.GoString(cerr)
		}
		return nil, fmt.Errorf("vulkan: cannot load the Vulkan loader libvulkan.so.1 (Debian package libvulkan1): %s", msg)
	}
	vk.SetGetInstanceProcAddr(gipa)
	if err := vk.Init(); err != nil {
		return nil, fmt.Errorf("vulkan: initialising the loader: %w", err)
	}
	return gipa, nil
})

// subgroupInfo is what govk_query reports about a device.
type subgroupInfo struct {
	size, stages, ops      uint32
	driverName, driverInfo string
}

// querySubgroup reads the subgroup and (Vulkan 1.2+) driver properties.
func querySubgroup(gipa unsafe.Pointer, inst vk.Instance, phys vk.PhysicalDevice, apiVersion uint32) (subgroupInfo, error) {
	var sg [3]C.uint32_t
	name := (*C.char)(C.malloc(256))
	info := (*C.char)(C.malloc(256))
	defer C.free(unsafe.Pointer(name))
	defer C.free(unsafe.Pointer(info))
	want := C.int(0)
	if apiVersion >= vk.MakeVersion(1, 2, 0) {
		want = 1
	}
	if C.govk_query(gipa, *(*unsafe.Pointer)(unsafe.Pointer(&inst)), *(*unsafe.Pointer)(unsafe.Pointer(&phys)), want, &sg[0], name, info) != 0 {
		return subgroupInfo{}, errors.New("vulkan: vkGetPhysicalDeviceProperties2 missing (needs Vulkan 1.1)")
	}
	return subgroupInfo{size: uint32(sg[0]), stages: uint32(sg[1]), ops: uint32(sg[2]),
		driverName: C.GoString(name), driverInfo: C.GoString(info)}, nil
}
