//go:build !noasm

package amx

import (
	"sync"
	"syscall"
	"unsafe"
)

// Linux's arch_prctl requests for extended state components.
const (
	archGetXCompPerm = 0x1022
	archReqXCompPerm = 0x1023
	xfeatureTileData = 18
)

// Permitted asks Linux, once per process, for permission to use AMX tile
// data and reports whether it is granted. It does not check that the CPU
// has AMX.
var Permitted = sync.OnceValue(func() bool {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureTileData, 0); errno != 0 {
		return false
	}
	var perm uint64
	if _, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXCompPerm, uintptr(unsafe.Pointer(&perm)), 0); errno != 0 {
		return false
	}
	return perm&(1<<xfeatureTileData) != 0
})
