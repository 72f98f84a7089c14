//go:build cgo

package vulkan

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*cm_gipa)(void* instance, const char* name);

// Mirrors of the structs used here (vulkan_core.h).
typedef struct { char extensionName[256]; uint32_t specVersion; } cm_ext_props;
typedef struct { int32_t sType; void* pNext; uint32_t features[55]; } cm_features2;
typedef struct { int32_t sType; void* pNext; uint32_t shaderFloat16, shaderInt8; } cm_f16i8;
typedef struct {
	int32_t sType; void* pNext;
	uint32_t vulkanMemoryModel, vulkanMemoryModelDeviceScope, vulkanMemoryModelAvailabilityVisibilityChains;
} cm_memmodel;
typedef struct { int32_t sType; void* pNext; uint32_t cooperativeMatrix, cooperativeMatrixRobustBufferAccess; } cm_coopfeat;
typedef struct {
	int32_t sType; void* pNext;
	uint32_t MSize, NSize, KSize, AType, BType, CType, ResultType, saturatingAccumulation, scope;
} cm_coopprops;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags; uint32_t queueFamilyIndex; uint32_t queueCount;
	const float* pQueuePriorities;
} cm_queue_info;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags;
	uint32_t queueCreateInfoCount; const cm_queue_info* pQueueCreateInfos;
	uint32_t enabledLayerCount; const char* const* ppEnabledLayerNames;
	uint32_t enabledExtensionCount; const char* const* ppEnabledExtensionNames;
	const void* pEnabledFeatures;
} cm_device_info;

typedef int32_t (*cm_enum_ext)(void*, const char*, uint32_t*, cm_ext_props*);
typedef void (*cm_get_features2)(void*, cm_features2*);
typedef int32_t (*cm_get_coop_props)(void*, uint32_t*, cm_coopprops*);
typedef int32_t (*cm_create_device)(void*, const cm_device_info*, const void*, void**);

static const char* cm_ext_names[] = {
	"VK_KHR_cooperative_matrix", "VK_KHR_shader_float16_int8", "VK_KHR_vulkan_memory_model",
};
#define CM_NEXTS 3

// govk_coopmat_check returns the tile size T of the cooperative-matrix
// shader the device can run: it needs the three extensions, the
// cooperativeMatrix, shaderFloat16 and vulkanMemoryModel features, and a
// TxTxT subgroup-scope configuration with f16 A and B and f32 C and
// result, T being 16 (preferred) or 8. It returns 0 when there is none,
// and -1 when the query functions are missing.
static int govk_coopmat_check(void* gipa, void* instance, void* phys) {
	cm_enum_ext enumExt = (cm_enum_ext)((cm_gipa)gipa)(instance, "vkEnumerateDeviceExtensionProperties");
	cm_get_features2 feats = (cm_get_features2)((cm_gipa)gipa)(instance, "vkGetPhysicalDeviceFeatures2");
	cm_get_coop_props coop = (cm_get_coop_props)((cm_gipa)gipa)(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
	if (!enumExt || !feats) {
		return -1;
	}
	if (!coop) {
		return 0;
	}
	uint32_t n = 0;
	if (enumExt(phys, NULL, &n, NULL) != 0 || n == 0) {
		return 0;
	}
	cm_ext_props* exts = calloc(n, sizeof *exts);
	if (!exts) {
		return 0;
	}
	int found = 0;
	if (enumExt(phys, NULL, &n, exts) == 0) {
		for (int want = 0; want < CM_NEXTS; want++) {
			for (uint32_t i = 0; i < n; i++) {
				if (strcmp(exts[i].extensionName, cm_ext_names[want]) == 0) {
					found++;
					break;
				}
			}
		}
	}
	free(exts);
	if (found != CM_NEXTS) {
		return 0;
	}
	cm_coopfeat cf; memset(&cf, 0, sizeof cf);
	cm_memmodel mm; memset(&mm, 0, sizeof mm);
	cm_f16i8 fi; memset(&fi, 0, sizeof fi);
	cm_features2 f2; memset(&f2, 0, sizeof f2);
	cf.sType = 1000506000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
	mm.sType = 1000211000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES
	fi.sType = 1000082000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES
	f2.sType = 1000059000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
	f2.pNext = &cf; cf.pNext = &mm; mm.pNext = &fi;
	feats(phys, &f2);
	if (!cf.cooperativeMatrix || !mm.vulkanMemoryModel || !fi.shaderFloat16) {
		return 0;
	}
	n = 0;
	if (coop(phys, &n, NULL) != 0 || n == 0) {
		return 0;
	}
	cm_coopprops* props = calloc(n, sizeof *props);
	if (!props) {
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		props[i].sType = 1000506001; // VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
	}
	int tile = 0;
	if (coop(phys, &n, props) == 0) {
		for (uint32_t i = 0; i < n; i++) {
			cm_coopprops p = props[i];
			// Component types: FLOAT16 0, FLOAT32 1; scope SUBGROUP 3.
			if ((p.MSize == 16 || p.MSize == 8) && p.NSize == p.MSize && p.KSize == p.MSize &&
				p.AType == 0 && p.BType == 0 && p.CType == 1 && p.ResultType == 1 && p.scope == 3 &&
				!p.saturatingAccumulation && (int)p.MSize > tile) {
				tile = (int)p.MSize;
			}
		}
	}
	free(props);
	return tile;
}

// govk_create_device creates a device with one queue of family qfam and,
// when coopmat is set, the extensions and features matmulcm.comp needs.
static int32_t govk_create_device(void* gipa, void* instance, void* phys, uint32_t qfam, int coopmat, void** dev) {
	cm_create_device create = (cm_create_device)((cm_gipa)gipa)(instance, "vkCreateDevice");
	if (!create) {
		return -3; // VK_ERROR_INITIALIZATION_FAILED
	}
	float prio = 1.0f;
	cm_queue_info q; memset(&q, 0, sizeof q);
	q.sType = 2; // VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO
	q.queueFamilyIndex = qfam;
	q.queueCount = 1;
	q.pQueuePriorities = &prio;
	cm_coopfeat cf; memset(&cf, 0, sizeof cf);
	cm_memmodel mm; memset(&mm, 0, sizeof mm);
	cm_f16i8 fi; memset(&fi, 0, sizeof fi);
	cm_device_info info; memset(&info, 0, sizeof info);
	info.sType = 3; // VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO
	info.queueCreateInfoCount = 1;
	info.pQueueCreateInfos = &q;
	if (coopmat) {
		cf.sType = 1000506000;
		cf.cooperativeMatrix = 1;
		mm.sType = 1000211000;
		mm.vulkanMemoryModel = 1;
		fi.sType = 1000082000;
		fi.shaderFloat16 = 1;
		cf.pNext = &mm; mm.pNext = &fi;
		info.pNext = &cf;
		info.enabledExtensionCount = CM_NEXTS;
		info.ppEnabledExtensionNames = cm_ext_names;
	}
	return create(phys, &info, NULL, dev);
}
*/
import "C"

import (
	"encoding/binary"
	"math"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// coopmatTile returns the tile size (16 or 8) of the cooperative-matrix
// matmul shader the device runs, or 0 where it runs none.
func coopmatTile(gipa unsafe.Pointer, inst vk.Instance, phys vk.PhysicalDevice) int {
	return max(0, int(C.govk_coopmat_check(gipa, handlePtr(inst), handlePtr(phys))))
}

// createDevice creates the logical device with one queue of family qfam,
// enabling what the cooperative-matrix shader needs when coopmat is set.
func createDevice(gipa unsafe.Pointer, inst vk.Instance, phys vk.PhysicalDevice, qfam uint32, coopmat bool) (vk.Device, error) {
	var dev unsafe.Pointer
	cm := C.int(0)
	if coopmat {
		cm = 1
	}
	r := vk.Result(C.govk_create_device(gipa, handlePtr(inst), handlePtr(phys), C.uint32_t(qfam), cm, &dev))
	if err := vkErr("vkCreateDevice", r); err != nil {
		return nil, err
	}
	return *(*vk.Device)(unsafe.Pointer(&dev)), nil
}

// f16Range is the largest bf16 bit pattern (sign cleared) whose value f16
// holds: 0x477f is 65280; 0x4780 (65536) is past f16's largest, 65504.
const f16Range = 0x477f

// bf16FitsF16 reports whether every bf16 value in data (little-endian
// pairs of bytes) is finite and within f16's range, so converting it to
// f16 cannot overflow. It tests four values per 64-bit word: adding
// 0x8000-0x4780 to a 15-bit magnitude carries into its bit 15 exactly when
// the magnitude is 0x4780 or more, and no lane can carry into the next.
func bf16FitsF16(data []byte) bool {
	const (
		mag   = 0x7fff_7fff_7fff_7fff
		bias  = (0x8000 - (f16Range + 1)) * 0x0001_0001_0001_0001
		carry = 0x8000_8000_8000_8000
	)
	i := 0
	for ; i+32 <= len(data); i += 32 {
		w := data[i : i+32 : i+32]
		a := (binary.LittleEndian.Uint64(w[0:]) & mag) + bias
		b := (binary.LittleEndian.Uint64(w[8:]) & mag) + bias
		c := (binary.LittleEndian.Uint64(w[16:]) & mag) + bias
		d := (binary.LittleEndian.Uint64(w[24:]) & mag) + bias
		if (a|b|c|d)&carry != 0 {
			return false
		}
	}
	for ; i+8 <= len(data); i += 8 {
		v := binary.LittleEndian.Uint64(data[i:])
		if ((v&mag)+bias)&carry != 0 {
			return false
		}
	}
	for ; i+2 <= len(data); i += 2 {
		if binary.LittleEndian.Uint16(data[i:])&0x7fff > f16Range {
			return false
		}
	}
	return true
}

// quantF16Max is the largest magnitude a dequantized value may have for
// the cooperative-matrix shader: rounded to 11 significant bits (at most
// 2^-11 up) it stays within f16's largest, 65504.
const quantF16Max = 65504 / (1 + 1.0/2048)

// quantFitsF16 reports whether every value of the t blocks in data is
// within quantF16Max, bounded from each block's fp16 scales: Q8_0 |d|·128,
// Q4_K |d|·63·15 + |dmin|·63, Q5_K |d|·63·31 + |dmin|·63, Q6_K |d|·128·32.
// It reads two or four bytes per block; a NaN or infinite scale fails.
func quantFitsF16(t quant.Type, data []byte) bool {
	f16 := func(b []byte) float64 { return math.Abs(float64(half.F16ToF32(binary.LittleEndian.Uint16(b)))) }
	size := t.BlockBytes()
	if size == 0 {
		return false
	}
	for o := 0; o+size <= len(data); o += size {
		blk := data[o : o+size]
		var m float64
		switch t {
		case quant.Q8_0:
			m = f16(blk) * 128
		case quant.Q4_K:
			m = f16(blk)*63*15 + f16(blk[2:])*63
		case quant.Q5_K:
			m = f16(blk)*63*31 + f16(blk[2:])*63
		case quant.Q6_K:
			m = f16(blk[208:]) * 128 * 32
		default:
			return false
		}
		if !(m <= quantF16Max) { // NaN too
			return false
		}
	}
	return true
}
