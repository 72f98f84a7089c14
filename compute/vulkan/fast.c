// The per-dispatch recording path of package vulkan in C: descriptor set
// allocation and update, bind, push constants and dispatch in one cgo
// call, through device function pointers (barriers are a call of their own,
// recorded only where a dispatch depends on earlier work). vulkan-go converts every
// struct through Go allocations and finalizers, which costs tens of
// microseconds per dispatch; a model step records hundreds.
//
// Every other device-level call that takes a struct is made here too:
// vulkan-go frees the C copies of array arguments from a finalizer that can
// run while the call is still reading them, which made lavapipe crash now
// and then inside vkCreateComputePipelines (std::bad_alloc or SIGSEGV while
// compiling), and it leaks the C copy of every other struct (one per
// vkBeginCommandBuffer, so one per step).
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
typedef struct {
	uint32_t binding; int32_t descriptorType; uint32_t descriptorCount; uint32_t stageFlags; const void* pImmutableSamplers;
} set_layout_binding;
typedef struct { int32_t sType; const void* pNext; uint32_t flags, bindingCount; const set_layout_binding* pBindings; } set_layout_info;
typedef struct { uint32_t stageFlags, offset, size; } push_range;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags;
	uint32_t setLayoutCount; const uint64_t* pSetLayouts;
	uint32_t pushConstantRangeCount; const push_range* pPushConstantRanges;
} pipeline_layout_info;
typedef struct { int32_t type; uint32_t descriptorCount; } pool_size;
typedef struct { int32_t sType; const void* pNext; uint32_t flags, maxSets, poolSizeCount; const pool_size* pPoolSizes; } pool_info;
typedef struct { int32_t sType; const void* pNext; uint32_t flags; const void* pInheritanceInfo; } begin_info;
typedef struct {
	int32_t sType; const void* pNext;
	uint32_t waitSemaphoreCount; const uint64_t* pWaitSemaphores; const uint32_t* pWaitDstStageMask;
	uint32_t commandBufferCount; void* const* pCommandBuffers;
	uint32_t signalSemaphoreCount; const uint64_t* pSignalSemaphores;
} submit_info;
typedef struct { uint64_t srcOffset, dstOffset, size; } buffer_copy;
typedef struct {
	int32_t sType; const void* pNext; uint32_t flags; uint64_t size; uint32_t usage; int32_t sharingMode;
	uint32_t queueFamilyIndexCount; const uint32_t* pQueueFamilyIndices;
} buffer_info_create;
typedef struct { int32_t sType; const void* pNext; uint64_t allocationSize; uint32_t memoryTypeIndex; } memory_alloc_info;
typedef struct { uint64_t size, alignment; uint32_t memoryTypeBits; } memory_requirements;

typedef int32_t (*create_module_fn)(void*, const module_info*, const void*, uint64_t*);
typedef int32_t (*create_pipelines_fn)(void*, uint64_t, uint32_t, const compute_pipeline_info*, const void*, uint64_t*);
typedef int32_t (*alloc_sets_fn)(void*, const set_alloc_info*, uint64_t*);
typedef void (*update_sets_fn)(void*, uint32_t, const write_set*, uint32_t, const void*);
typedef void (*bind_pipeline_fn)(void*, int32_t, uint64_t);
typedef void (*bind_sets_fn)(void*, int32_t, uint64_t, uint32_t, uint32_t, const uint64_t*, uint32_t, const uint32_t*);
typedef void (*push_fn)(void*, uint64_t, uint32_t, uint32_t, uint32_t, const void*);
typedef void (*dispatch_fn)(void*, uint32_t, uint32_t, uint32_t);
typedef int32_t (*create_set_layout_fn)(void*, const set_layout_info*, const void*, uint64_t*);
typedef int32_t (*create_pipeline_layout_fn)(void*, const pipeline_layout_info*, const void*, uint64_t*);
typedef int32_t (*create_pool_fn)(void*, const pool_info*, const void*, uint64_t*);
typedef int32_t (*begin_fn)(void*, const begin_info*);
typedef int32_t (*submit_fn)(void*, uint32_t, const submit_info*, uint64_t);
typedef void (*copy_fn)(void*, uint64_t, uint64_t, uint32_t, const buffer_copy*);
typedef int32_t (*create_buffer_fn)(void*, const buffer_info_create*, const void*, uint64_t*);
typedef void (*buffer_requirements_fn)(void*, uint64_t, memory_requirements*);
typedef int32_t (*alloc_memory_fn)(void*, const memory_alloc_info*, const void*, uint64_t*);
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
	f->createSetLayout = gdpa(device, "vkCreateDescriptorSetLayout");
	f->createPipelineLayout = gdpa(device, "vkCreatePipelineLayout");
	f->createPool = gdpa(device, "vkCreateDescriptorPool");
	f->beginCmd = gdpa(device, "vkBeginCommandBuffer");
	f->submit = gdpa(device, "vkQueueSubmit");
	f->copy = gdpa(device, "vkCmdCopyBuffer");
	f->createBuffer = gdpa(device, "vkCreateBuffer");
	f->allocMemory = gdpa(device, "vkAllocateMemory");
	f->bufferRequirements = gdpa(device, "vkGetBufferMemoryRequirements");
	if (!f->allocSets || !f->updateSets || !f->bindPipeline || !f->bindSets || !f->push || !f->dispatch || !f->barrier ||
		!f->createModule || !f->createPipelines || !f->createSetLayout || !f->createPipelineLayout || !f->createPool ||
		!f->beginCmd || !f->submit || !f->copy || !f->createBuffer || !f->allocMemory || !f->bufferRequirements) {
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

// govk_create_layouts creates the descriptor set layout every shader shares
// (nbindings storage buffers) and the pipeline layout of that set with
// pushBytes of push constants.
int32_t govk_create_layouts(const govk_fast* f, void* device, uint32_t nbindings, uint32_t pushBytes,
		uint64_t* setLayout, uint64_t* pipeLayout) {
	set_layout_binding binds[GOVK_MAX_BINDINGS];
	if (nbindings > GOVK_MAX_BINDINGS) {
		return -3; // VK_ERROR_INITIALIZATION_FAILED
	}
	memset(binds, 0, sizeof binds);
	for (uint32_t i = 0; i < nbindings; i++) {
		binds[i].binding = i;
		binds[i].descriptorType = 7; // VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
		binds[i].descriptorCount = 1;
		binds[i].stageFlags = 0x20; // VK_SHADER_STAGE_COMPUTE_BIT
	}
	set_layout_info li = {32 /* VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO */, NULL, 0, nbindings, binds};
	int32_t r = ((create_set_layout_fn)f->createSetLayout)(device, &li, NULL, setLayout);
	if (r != 0) {
		return r;
	}
	push_range pr = {0x20, 0, pushBytes};
	pipeline_layout_info pi = {30 /* VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO */, NULL, 0, 1, setLayout, 1, &pr};
	return ((create_pipeline_layout_fn)f->createPipelineLayout)(device, &pi, NULL, pipeLayout);
}

// govk_create_pool creates a descriptor pool of maxSets sets holding
// descriptors storage buffers in all.
int32_t govk_create_pool(const govk_fast* f, void* device, uint32_t maxSets, uint32_t descriptors, uint64_t* pool) {
	pool_size size = {7 /* VK_DESCRIPTOR_TYPE_STORAGE_BUFFER */, descriptors};
	pool_info info = {33 /* VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO */, NULL, 0, maxSets, 1, &size};
	return ((create_pool_fn)f->createPool)(device, &info, NULL, pool);
}

// govk_begin begins a command buffer for one submission.
int32_t govk_begin(const govk_fast* f, void* cmd) {
	begin_info info = {42 /* VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO */, NULL, 1 /* ONE_TIME_SUBMIT */, NULL};
	return ((begin_fn)f->beginCmd)(cmd, &info);
}

// govk_submit submits one command buffer that signals fence when done.
int32_t govk_submit(const govk_fast* f, void* queue, void* cmd, uint64_t fence) {
	submit_info info;
	memset(&info, 0, sizeof info);
	info.sType = 4; // VK_STRUCTURE_TYPE_SUBMIT_INFO
	info.commandBufferCount = 1;
	info.pCommandBuffers = &cmd;
	return ((submit_fn)f->submit)(queue, 1, &info, fence);
}

void govk_copy(const govk_fast* f, void* cmd, uint64_t src, uint64_t dst, uint64_t srcOffset, uint64_t dstOffset, uint64_t size) {
	buffer_copy region = {srcOffset, dstOffset, size};
	((copy_fn)f->copy)(cmd, src, dst, 1, &region);
}

// govk_host_barrier makes the compute and transfer writes recorded before
// it visible to host reads once the submission completes.
void govk_host_barrier(const govk_fast* f, void* cmd) {
	memory_barrier mb = {46 /* VK_STRUCTURE_TYPE_MEMORY_BARRIER */, NULL,
		0x00000040 | 0x00001000, // SHADER_WRITE | TRANSFER_WRITE
		0x00002000};             // HOST_READ
	((barrier_fn)f->barrier)(cmd, 0x00000800 | 0x00001000 /* COMPUTE_SHADER | TRANSFER */, 0x00004000 /* HOST */,
		0, 1, &mb, 0, NULL, 0, NULL);
}

// govk_create_buffer creates an exclusive buffer of size bytes.
int32_t govk_create_buffer(const govk_fast* f, void* device, uint64_t size, uint32_t usage, uint64_t* buffer) {
	buffer_info_create info;
	memset(&info, 0, sizeof info);
	info.sType = 12; // VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO
	info.size = size;
	info.usage = usage;
	info.sharingMode = 0; // VK_SHARING_MODE_EXCLUSIVE
	return ((create_buffer_fn)f->createBuffer)(device, &info, NULL, buffer);
}

// govk_buffer_requirements reports the bytes of memory buffer needs, their
// alignment and the memory types it can be bound to.
void govk_buffer_requirements(const govk_fast* f, void* device, uint64_t buffer, uint64_t* size, uint64_t* alignment, uint32_t* typeBits) {
	memory_requirements req;
	memset(&req, 0, sizeof req);
	((buffer_requirements_fn)f->bufferRequirements)(device, buffer, &req);
	*size = req.size;
	*alignment = req.alignment;
	*typeBits = req.memoryTypeBits;
}

int32_t govk_alloc_memory(const govk_fast* f, void* device, uint64_t size, uint32_t typeIndex, uint64_t* memory) {
	memory_alloc_info info = {5 /* VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO */, NULL, size, typeIndex};
	return ((alloc_memory_fn)f->allocMemory)(device, &info, NULL, memory);
}
