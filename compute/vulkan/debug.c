// Validation message routing for package vulkan: a VK_EXT_debug_report
// callback that hands each message to Go with the backend's handle.
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "_cgo_export.h"

typedef void* (*govk_gipa_fn)(void* instance, const char* name);

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	void* pfnCallback;
	void* pUserData;
} govk_debug_report_info;

typedef int32_t (*govk_create_debug_fn)(void* instance, const govk_debug_report_info* info, const void* alloc, uint64_t* cb);
typedef void (*govk_destroy_debug_fn)(void* instance, uint64_t cb, const void* alloc);

static uint32_t govk_debug_cb(uint32_t flags, int32_t objectType, uint64_t object, size_t location,
		int32_t code, const char* prefix, const char* msg, void* user) {
	return govkDebugMessage(flags, code, (char*)prefix, (char*)msg, user);
}

int32_t govk_create_debug(void* gipa, void* instance, uint32_t flags, void* user, uint64_t* cb) {
	govk_create_debug_fn f = (govk_create_debug_fn)((govk_gipa_fn)gipa)(instance, "vkCreateDebugReportCallbackEXT");
	if (!f) {
		return -7; // VK_ERROR_EXTENSION_NOT_PRESENT
	}
	govk_debug_report_info info;
	memset(&info, 0, sizeof info);
	info.sType = 1000011000; // VK_STRUCTURE_TYPE_DEBUG_REPORT_CALLBACK_CREATE_INFO_EXT
	info.flags = flags;
	info.pfnCallback = (void*)govk_debug_cb;
	info.pUserData = user;
	return f(instance, &info, NULL, cb);
}

void govk_destroy_debug(void* gipa, void* instance, uint64_t cb) {
	govk_destroy_debug_fn f = (govk_destroy_debug_fn)((govk_gipa_fn)gipa)(instance, "vkDestroyDebugReportCallbackEXT");
	if (f) {
		f(instance, cb, NULL);
	}
}
