// Package shaders holds the GLSL compute shaders of the Vulkan backend and
// their SPIR-V, compiled by build.sh with glslc and embedded in the binary.
// Each name.comp compiles to name.spv; common.glsl is included by all,
// quant.glsl (the GGML block dequantizers) by the *q shaders, matmulcm.glsl
// by the cooperative-matrix ones.
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

// Bindings describes the storage buffer bindings a shader declares: bit i
// of Used is set when binding i exists, bit i of Written when the shader
// may write it (it is not declared readonly).
type Bindings struct {
	Used, Written uint32
}

// SPIR-V opcodes, decorations and storage classes that Reflect reads.
const (
	opTypeStruct     = 30
	opTypePointer    = 32
	opVariable       = 59
	opDecorate       = 71
	opMemberDecorate = 72

	decorBufferBlock = 3
	decorNonWritable = 24
	decorBinding     = 33

	storageUniform = 2
	storageBuffer  = 12
)

// Reflect returns the storage buffer bindings of a SPIR-V module: the
// variables with a Binding decoration in the StorageBuffer class (or
// Uniform with a BufferBlock struct, the SPIR-V 1.0 form), written unless
// the variable or every member of its struct is NonWritable.
func Reflect(words []uint32) (Bindings, error) {
	if len(words) < 5 || words[0] != spirvMagic {
		return Bindings{}, fmt.Errorf("shaders: not a SPIR-V module")
	}
	binding := map[uint32]uint32{}    // variable -> binding
	nonWritable := map[uint32]bool{}  // variable -> NonWritable
	memberRO := map[uint32]int{}      // struct -> members decorated NonWritable
	bufferBlock := map[uint32]bool{}  // struct -> BufferBlock
	members := map[uint32]int{}       // struct -> member count
	pointee := map[uint32][2]uint32{} // pointer type -> storage class, pointee
	vars := map[uint32][2]uint32{}    // variable -> pointer type, storage class
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return Bindings{}, fmt.Errorf("shaders: truncated SPIR-V instruction at word %d", i)
		}
		args := words[i+1 : i+n]
		switch {
		case op == opDecorate && len(args) >= 2:
			switch args[1] {
			case decorBinding:
				if len(args) >= 3 {
					binding[args[0]] = args[2]
				}
			case decorNonWritable:
				nonWritable[args[0]] = true
			case decorBufferBlock:
				bufferBlock[args[0]] = true
			}
		case op == opMemberDecorate && len(args) >= 3 && args[2] == decorNonWritable:
			memberRO[args[0]]++
		case op == opTypeStruct && len(args) >= 1:
			members[args[0]] = len(args) - 1
		case op == opTypePointer && len(args) >= 3:
			pointee[args[0]] = [2]uint32{args[1], args[2]}
		case op == opVariable && len(args) >= 3:
			vars[args[1]] = [2]uint32{args[0], args[2]}
		}
		i += n
	}
	var b Bindings
	for v, bind := range binding {
		vt, ok := vars[v]
		if !ok || bind >= 32 {
			continue
		}
		st := pointee[vt[0]][1]
		if vt[1] != storageBuffer && !(vt[1] == storageUniform && bufferBlock[st]) {
			continue
		}
		b.Used |= 1 << bind
		if !nonWritable[v] && !(members[st] > 0 && memberRO[st] == members[st]) {
			b.Written |= 1 << bind
		}
	}
	return b, nil
}
