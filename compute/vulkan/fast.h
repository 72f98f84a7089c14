// Declarations shared by fast.c and fast.go.
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
} govk_fast;

int govk_fast_load(void* gipa, void* instance, void* device, govk_fast* f);
void govk_fast_barrier(const govk_fast* f, void* cmd);
int32_t govk_fast_dispatch(const govk_fast* f, void* device, void* cmd, uint64_t pool, uint64_t setLayout,
	uint64_t pipeLayout, uint64_t pipeline, const uint64_t* bufs, const uint64_t* sizes, uint32_t nbufs,
	const uint32_t* push, uint32_t pushBytes, uint32_t gx, uint32_t gy, uint32_t gz);
int32_t govk_create_module(const govk_fast* f, void* device, const uint32_t* code, size_t bytes, uint64_t* module);
int32_t govk_create_pipeline(const govk_fast* f, void* device, uint64_t module, uint64_t layout,
	const uint32_t* spec, uint32_t nspec, uint64_t* pipeline);
