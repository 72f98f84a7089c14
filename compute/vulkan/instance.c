// Instance-level Vulkan calls of package vulkan, made in C through the
// loader's vkGetInstanceProcAddr: vulkan-go copies struct and array
// arguments into C memory that a finalizer frees, and the finalizer can run
// while the call is still reading or writing that memory. Layer names
// freed under vkEnumerateInstanceLayerProperties corrupted the C heap
// ("free(): invalid next size", SIGABRT in CI); the instance create info
// and its name arrays had the same exposure.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fast.h"

typedef void* (*gipa_fn)(void* instance, const char* name);

// Vulkan struct layouts used here (vulkan_core.h).
typedef struct {
	char layerName[256];
	uint32_t specVersion, implementationVersion;
	char description[256];
} layer_props;
typedef struct {
	int32_t sType; const void* pNext;
	const char* pApplicationName; uint32_t applicationVersion;
	const char* pEngineName; uint32_t engineVersion;
	uint32_t apiVersion;
} app_info;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags;
	const app_info* pApplicationInfo;
	uint32_t enabledLayerCount; const char* const* ppEnabledLayerNames;
	uint32_t enabledExtensionCount; const char* const* ppEnabledExtensionNames;
} instance_info;
typedef struct {
	int32_t sType; const void* pNext;
	uint32_t enabledCount; const int32_t* pEnabled;
	uint32_t disabledCount; const int32_t* pDisabled;
} validation_features;
typedef struct {
	uint32_t queueFlags, queueCount, timestampValidBits;
	uint32_t granularity[3];
} queue_family;

typedef int32_t (*enum_layers_fn)(uint32_t*, layer_props*);
typedef int32_t (*create_instance_fn)(const instance_info*, const void*, void**);
typedef void (*queue_families_fn)(void*, uint32_t*, queue_family*);

int govk_layer_available(void* gipa, const char* name) {
	enum_layers_fn f = (enum_layers_fn)((gipa_fn)gipa)(NULL, "vkEnumerateInstanceLayerProperties");
	if (!f) {
		return 0;
	}
	uint32_t n = 0;
	if (f(&n, NULL) != 0 || n == 0) {
		return 0;
	}
	layer_props* p = calloc(n, sizeof *p);
	if (!p) {
		return 0;
	}
	int found = 0;
	if (f(&n, p) >= 0) { // VK_INCOMPLETE (layers added since) still lists n
		for (uint32_t i = 0; i < n && !found; i++) {
			found = strncmp(p[i].layerName, name, sizeof p[i].layerName) == 0;
		}
	}
	free(p);
	return found;
}

int32_t govk_create_instance(void* gipa, uint32_t apiVersion, const char* layer, void** instance) {
	create_instance_fn f = (create_instance_fn)((gipa_fn)gipa)(NULL, "vkCreateInstance");
	if (!f) {
		return -3; // VK_ERROR_INITIALIZATION_FAILED
	}
	app_info app = {0 /* VK_STRUCTURE_TYPE_APPLICATION_INFO */, NULL, "govinfer", 0, "govinfer", 0, apiVersion};
	instance_info info;
	memset(&info, 0, sizeof info);
	info.sType = 1; // VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
	info.pApplicationInfo = &app;
	// With a validation layer: its messages through VK_EXT_debug_report and
	// its synchronization checks (missing or too weak barriers) turned on.
	static const char* const exts[] = {"VK_EXT_debug_report", "VK_EXT_validation_features"};
	static const int32_t syncValidation = 4; // VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
	validation_features features = {1000247000 /* VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT */, NULL, 1, &syncValidation, 0, NULL};
	if (layer) {
		info.pNext = &features;
		info.enabledLayerCount = 1;
		info.ppEnabledLayerNames = &layer;
		info.enabledExtensionCount = 2;
		info.ppEnabledExtensionNames = exts;
	}
	return f(&info, NULL, instance);
}

int govk_compute_queue(void* gipa, void* instance, void* phys, uint32_t* family, uint32_t* timestampBits) {
	queue_families_fn f = (queue_families_fn)((gipa_fn)gipa)(instance, "vkGetPhysicalDeviceQueueFamilyProperties");
	if (!f) {
		return -1;
	}
	uint32_t n = 0;
	f(phys, &n, NULL);
	if (n == 0) {
		return -1;
	}
	queue_family* q = calloc(n, sizeof *q);
	if (!q) {
		return -1;
	}
	f(phys, &n, q);
	int r = -1;
	for (uint32_t i = 0; i < n; i++) {
		if (q[i].queueFlags & 0x2) { // VK_QUEUE_COMPUTE_BIT
			*family = i;
			*timestampBits = q[i].timestampValidBits;
			r = 0;
			break;
		}
	}
	free(q);
	return r;
}
