//go:build cgo

package vulkan

/*
#include <stdint.h>
#include <stdlib.h>
int32_t govk_create_debug(void* gipa, void* instance, uint32_t flags, void* user, uint64_t* cb);
void govk_destroy_debug(void* gipa, void* instance, uint64_t cb);
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

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
