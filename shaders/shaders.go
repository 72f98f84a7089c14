// Package shaders holds the GLSL compute shaders of the Vulkan backend and
// their SPIR-V, compiled by build.sh with glslc and embedded in the binary.
// Each name.comp compiles to name.spv; common.glsl is included by all.
package shaders

import (
	"embed"
	"encoding/binary"
	"fmt"
)

//go:embed *.spv
var spv embed.FS

// spirvMagic is the first word of every SPIR-V module.
const spirvMagic = 0x07230203

// Code returns the SPIR-V words of the named shader (without extension,
// for example "matvec").
func Code(name string) ([]uint32, error) {
	b, err := spv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: %s: %w", name, err)
	}
	if len(b) < 20 || len(b)%4 != 0 {
		return nil, fmt.Errorf("shaders: %s.spv: %d bytes is not a SPIR-V module", name, len(b))
	}
	words := make([]uint32, len(b)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	if words[0] != spirvMagic {
		return nil, fmt.Errorf("shaders: %s.spv: bad magic %#x", name, words[0])
	}
	return words, nil
}

// Names returns the names of all embedded shaders.
func Names() []string {
	entries, _ := spv.ReadDir(".")
	var names []string
	for _, e := range entries {
		n := e.Name()
		names = append(names, n[:len(n)-len(".spv")])
	}
	return names
}
