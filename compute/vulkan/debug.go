//go:build cgo

package vulkan

/*
#include <stdint.h>
#include <stdlib.h>
int32_t govk_create_debug(void* gipa, void* instance, uint32_t flags, void* user, uint64_t* cb);
void govk_destroy_debug(void* gipa, void* instance, uint64_t cb);

// VkValidationFeaturesEXT enabling synchronization validation, in C
// memory (it is chained into the instance create info).
typedef struct {
	int32_t sType; const void* pNext;
	uint32_t enabledCount; const int32_t* pEnabled;
	uint32_t disabledCount; const int32_t* pDisabled;
} govk_validation_features;
static const int32_t govk_sync_validation = 4; // VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
static govk_validation_features* govk_new_sync_validation(void) {
	govk_validation_features* f = calloc(1, sizeof *f);
	if (f) {
		f->sType = 1000247000; // VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT
		f->enabledCount = 1;
		f->pEnabled = &govk_sync_validation;
	}
	return f;
}
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// syncValidation returns a VkValidationFeaturesEXT in C memory that turns
// on the validation layer's synchronization checks (missing or too weak
// barriers between dependent dispatches and transfers), for the pNext of
// the instance create info, and the function that frees it.
func syncValidation() (unsafe.Pointer, func()) {
	f := C.govk_new_sync_validation()
	return unsafe.Pointer(f), func() { C.free(unsafe.Pointer(f)) }
}

// debugSink receives validation messages for one backend. It is reached
// from the C callback through a cgo.Handle kept in C memory, so several
// backends can validate at once (vulkan-go's own callback support keeps
// one Go function per process).
type debugSink struct {
	handle cgo.Handle
	user   unsafe.Pointer // C memory holding handle
	cb     C.uint64_t
}

//export govkDebugMessage
func govkDebugMessage(flags C.uint32_t, code C.int32_t, prefix, msg *C.char, user unsafe.Pointer) C.uint32_t {
	h := *(*cgo.Handle)(user)
	b, ok := h.Value().(*Backend)
	if !ok {
		return 0
	}
	b.validationMessage(uint32(flags), int32(code), C.GoString(prefix), C.GoString(msg))
	return 0 // VK_FALSE: do not abort the call
}

// validationMessage logs a message and keeps errors and warnings for the
// next report.
func (b *Backend) validationMessage(flags uint32, code int32, prefix, msg string) {
	b.logf("vulkan validation [%s %d]: %s", prefix, code, msg)
	if flags&uint32(vk.DebugReportErrorBit|vk.DebugReportWarningBit) != 0 {
		b.msgMu.Lock()
		b.msgs = append(b.msgs, msg)
		b.msgMu.Unlock()
	}
}

// startDebug installs the validation callback on b's instance.
func (b *Backend) startDebug() error {
	s := &debugSink{handle: cgo.NewHandle(b)}
	s.user = C.malloc(C.size_t(unsafe.Sizeof(s.handle)))
	*(*cgo.Handle)(s.user) = s.handle
	flags := C.uint32_t(vk.DebugReportErrorBit | vk.DebugReportWarningBit | vk.DebugReportPerformanceWarningBit)
	r := C.govk_create_debug(b.gipa, *(*unsafe.Pointer)(unsafe.Pointer(&b.inst)), flags, s.user, &s.cb)
	if err := vkErr("vkCreateDebugReportCallbackEXT", vk.Result(r)); err != nil {
		s.handle.Delete()
		C.free(s.user)
		return err
	}
	b.debug = s
	return nil
}

// stopDebug removes the callback; it runs after the device is destroyed so
// messages about leaked objects still arrive.
func (b *Backend) stopDebug() {
	s := b.debug
	if s == nil {
		return
	}
	C.govk_destroy_debug(b.gipa, *(*unsafe.Pointer)(unsafe.Pointer(&b.inst)), s.cb)
	s.handle.Delete()
	C.free(s.user)
	b.debug = nil
}
