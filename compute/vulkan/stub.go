//go:build !cgo

package vulkan

import (
	"errors"

	"github.com/govinfer/govinfer/compute"
)

// errNoCgo explains why this build has no Vulkan backend.
var errNoCgo = errors.New("vulkan: this binary was built without cgo (CGO_ENABLED=0), which the Vulkan backend needs; rebuild with cgo or use the cpu backend")

// Backend is unavailable without cgo; New never returns one.
type Backend struct{ compute.Backend }

// Describe implements nothing useful without cgo.
func (b *Backend) Describe() string { return "vulkan: unavailable without cgo" }

// New reports that the Vulkan backend is unavailable without cgo.
func New(Options) (*Backend, error) { return nil, errNoCgo }

// Devices reports that the Vulkan backend is unavailable without cgo.
func Devices() ([]string, error) { return nil, errNoCgo }

// FreeMemory reports nothing without cgo.
func (b *Backend) FreeMemory() int64 { return 0 }
