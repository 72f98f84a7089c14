// Declarations shared by the C files of package vulkan (fast.c,
// instance.c) and the Go files that call them.
#include <stddef.h>
#include <stdint.h>

#define GOVK_MAX_BINDINGS 8

typedef struct {
	void* allocSets;
	void* updateSets;
	void* bindPipeline;
	void* bindSets;
	void* push;
	void* dispatch;
	void* barrier;
	void* createModule;
	void* createPipelines;
	void* createSetLayout;
	void* createPipelineLayout;
	void* createPool;
	void* beginCmd;
	void* submit;
	void* copy;
	void* createBuffer;
	void* allocMemory;
	void* bufferRequirements;
} govk_fast;

int govk_fast_load(void* gipa, void* instance, void* device, govk_fast* f);
void govk_fast_barrier(const govk_fast* f, void* cmd);
int32_t govk_fast_dispatch(const govk_fast* f, void* device, void* cmd, uint64_t pool, uint64_t setLayout,
	uint64_t pipeLayout, uint64_t pipeline, const uint64_t* bufs, const uint64_t* sizes, uint32_t nbufs,
	const uint32_t* push, uint32_t pushBytes, uint32_t gx, uint32_t gy, uint32_t gz);
int32_t govk_create_module(const govk_fast* f, void* device, const uint32_t* code, size_t bytes, uint64_t* module);
int32_t govk_create_pipeline(const govk_fast* f, void* device, uint64_t module, uint64_t layout,
	const uint32_t* spec, uint32_t nspec, uint64_t* pipeline);
int32_t govk_create_layouts(const govk_fast* f, void* device, uint32_t nbindings, uint32_t pushBytes,
	uint64_t* setLayout, uint64_t* pipeLayout);
int32_t govk_create_pool(const govk_fast* f, void* device, uint32_t maxSets, uint32_t descriptors, uint64_t* pool);
int32_t govk_begin(const govk_fast* f, void* cmd);
int32_t govk_submit(const govk_fast* f, void* queue, void* cmd, uint64_t fence);
void govk_copy(const govk_fast* f, void* cmd, uint64_t src, uint64_t dst, uint64_t srcOffset, uint64_t dstOffset, uint64_t size);
void govk_host_barrier(const govk_fast* f, void* cmd);
int32_t govk_create_buffer(const govk_fast* f, void* device, uint64_t size, uint32_t usage, uint64_t* buffer);
void govk_buffer_requirements(const govk_fast* f, void* device, uint64_t buffer, uint64_t* size, uint64_t* alignment, uint32_t* typeBits);
int32_t govk_alloc_memory(const govk_fast* f, void* device, uint64_t size, uint32_t typeIndex, uint64_t* memory);

int govk_layer_available(void* gipa, const char* name);
int32_t govk_create_instance(void* gipa, uint32_t apiVersion, const char* layer, void** instance);
int govk_compute_queue(void* gipa, void* instance, void* phys, uint32_t* family, uint32_t* timestampBits);
