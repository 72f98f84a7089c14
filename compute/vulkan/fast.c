// The per-dispatch recording path of package vulkan in C: descriptor set
// allocation and update, bind, push constants and dispatch in one cgo
// call, through device function pointers (barriers are a call of their own,
// recorded only where a dispatch depends on earlier work). vulkan-go converts every
// struct through Go allocations and finalizers, which costs tens of
// microseconds per dispatch; a model step records hundreds.
//
// Shader modules and pipelines are created here too: vulkan-go frees the C
// copies of array arguments from a finalizer that can run while the call
// is still reading them, which made lavapipe crash now and then inside
// vkCreateComputePipelines (std::bad_alloc or SIGSEGV while compiling).
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "fast.h"

typedef void* (*gipa_fn)(void* instance, const char* name);
typedef void* (*gdpa_fn)(void* device, const char* name);

// Vulkan struct layouts used here (vulkan_core.h; 64-bit handles).
typedef struct {
	int32_t sType; const void* pNext;
	uint64_t descriptorPool; uint32_t descriptorSetCount; const uint64_t* pSetLayouts;
} set_alloc_info;
typedef struct { uint64_t buffer, offset, range; } buffer_info;
typedef struct {
	int32_t sType; const void* pNext;
	uint64_t dstSet; uint32_t dstBinding, dstArrayElement, descriptorCount; int32_t descriptorType;
	const void* pImageInfo; const buffer_info* pBufferInfo; const void* pTexelBufferView;
} write_set;
typedef struct { int32_t sType; const void* pNext; uint32_t srcAccessMask, dstAccessMask; } memory_barrier;

typedef struct { uint32_t constantID, offset; size_t size; } spec_entry;
typedef struct { uint32_t mapEntryCount; const spec_entry* pMapEntries; size_t dataSize; const void* pData; } spec_info;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags; uint32_t stage; uint64_t module;
	const char* pName; const spec_info* pSpecializationInfo;
} stage_info;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags; stage_info stage; uint64_t layout;
	uint64_t basePipelineHandle; int32_t basePipelineIndex;
} compute_pipeline_info;
typedef struct { int32_t sType; const void* pNext; uint32_t flags; size_t codeSize; const uint32_t* pCode; } module_info;

typedef int32_t (*create_module_fn)(void*, const module_info*, const void*, uint64_t*);
typedef int32_t (*create_pipelines_fn)(void*, uint64_t, uint32_t, const compute_pipeline_info*, const void*, uint64_t*);
typedef int32_t (*alloc_sets_fn)(void*, const set_alloc_info*, uint64_t*);
typedef void (*update_sets_fn)(void*, uint32_t, const write_set*, uint32_t, const void*);
typedef void (*bind_pipeline_fn)(void*, int32_t, uint64_t);
typedef void (*bind_sets_fn)(void*, int32_t, uint64_t, uint32_t, uint32_t, const uint64_t*, uint32_t, const uint32_t*);
typedef void (*push_fn)(void*, uint64_t, uint32_t, uint32_t, uint32_t, const void*);
typedef void (*dispatch_fn)(void*, uint32_t, uint32_t, uint32_t);
typedef void (*barrier_fn)(void*, uint32_t, uint32_t, uint32_t, uint32_t, const memory_barrier*, uint32_t, const void*, uint32_t, const void*);

int govk_fast_load(void* gipa, void* instance, void* device, govk_fast* f) {
	gdpa_fn gdpa = (gdpa_fn)((gipa_fn)gipa)(instance, "vkGetDeviceProcAddr");
	if (!gdpa) {
		return -1;
	}
	f->allocSets = gdpa(device, "vkAllocateDescriptorSets");
	f->updateSets = gdpa(device, "vkUpdateDescriptorSets");
	f->bindPipeline = gdpa(device, "vkCmdBindPipeline");
	f->bindSets = gdpa(device, "vkCmdBindDescriptorSets");
	f->push = gdpa(device, "vkCmdPushConstants");
	f->dispatch = gdpa(device, "vkCmdDispatch");
	f->barrier = gdpa(device, "vkCmdPipelineBarrier");
	f->createModule = gdpa(device, "vkCreateShaderModule");
	f->createPipelines = gdpa(device, "vkCreateComputePipelines");
	if (!f->allocSets || !f->updateSets || !f->bindPipeline || !f->bindSets || !f->push || !f->dispatch || !f->barrier ||
		!f->createModule || !f->createPipelines) {
		return -1;
	}
	return 0;
}

void govk_fast_barrier(const govk_fast* f, void* cmd) {
	memory_barrier mb = {46 /* VK_STRUCTURE_TYPE_MEMORY_BARRIER */, NULL,
		0x00000040 | 0x00001000,                           // SHADER_WRITE | TRANSFER_WRITE
		0x00000020 | 0x00000040 | 0x00000800 | 0x00001000}; // SHADER_READ | SHADER_WRITE | TRANSFER_READ | TRANSFER_WRITE
	uint32_t stages = 0x00000800 | 0x00001000; // COMPUTE_SHADER | TRANSFER
	((barrier_fn)f->barrier)(cmd, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

int32_t govk_fast_dispatch(const govk_fast* f, void* device, void* cmd, uint64_t pool, uint64_t setLayout,
		uint64_t pipeLayout, uint64_t pipeline, const uint64_t* bufs, const uint64_t* sizes, uint32_t nbufs,
		const uint32_t* push, uint32_t pushBytes, uint32_t gx, uint32_t gy, uint32_t gz) {
	set_alloc_info ai = {34 /* VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO */, NULL, pool, 1, &setLayout};
	uint64_t set = 0;
	int32_t r = ((alloc_sets_fn)f->allocSets)(device, &ai, &set);
	if (r != 0) {
		return r;
	}
	buffer_info infos[GOVK_MAX_BINDINGS];
	write_set writes[GOVK_MAX_BINDINGS];
	memset(writes, 0, sizeof writes);
	for (uint32_t i = 0; i < nbufs && i < GOVK_MAX_BINDINGS; i++) {
		infos[i].buffer = bufs[i];
		infos[i].offset = 0;
		infos[i].range = sizes[i];
		writes[i].sType = 35; // VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
		writes[i].dstSet = set;
		writes[i].dstBinding = i;
		writes[i].descriptorCount = 1;
		writes[i].descriptorType = 7; // VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
		writes[i].pBufferInfo = &infos[i];
	}
	((update_sets_fn)f->updateSets)(device, nbufs, writes, 0, NULL);
	((bind_pipeline_fn)f->bindPipeline)(cmd, 1 /* COMPUTE */, pipeline);
	((bind_sets_fn)f->bindSets)(cmd, 1, pipeLayout, 0, 1, &set, 0, NULL);
	if (pushBytes > 0) {
		((push_fn)f->push)(cmd, pipeLayout, 0x20 /* COMPUTE */, 0, pushBytes, push);
	}
	((dispatch_fn)f->dispatch)(cmd, gx, gy, gz);
	return 0;
}

int32_t govk_create_module(const govk_fast* f, void* device, const uint32_t* code, size_t bytes, uint64_t* module) {
	module_info info = {16 /* VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO */, NULL, 0, bytes, code};
	return ((create_module_fn)f->createModule)(device, &info, NULL, module);
}

// govk_create_pipeline creates a compute pipeline of module's "main" with
// specialisation constants 0..nspec-1 set to spec.
int32_t govk_create_pipeline(const govk_fast* f, void* device, uint64_t module, uint64_t layout,
	const uint32_t* spec, uint32_t nspec, uint64_t* pipeline) {
	spec_entry entries[16];
	if (nspec > 16) {
		return -3; // VK_ERROR_INITIALIZATION_FAILED
	}
	for (uint32_t i = 0; i < nspec; i++) {
		entries[i].constantID = i;
		entries[i].offset = 4 * i;
		entries[i].size = 4;
	}
	spec_info si = {nspec, entries, 4 * (size_t)nspec, spec};
	compute_pipeline_info info;
	memset(&info, 0, sizeof info);
	info.sType = 29; // VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
	info.stage.sType = 18; // VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
	info.stage.stage = 0x20; // VK_SHADER_STAGE_COMPUTE_BIT
	info.stage.module = module;
	info.stage.pName = "main";
	info.stage.pSpecializationInfo = &si;
	info.layout = layout;
	info.basePipelineIndex = -1;
	return ((create_pipelines_fn)f->createPipelines)(device, 0, 1, &info, NULL, pipeline);
}
