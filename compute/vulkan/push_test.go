package vulkan

import (
	"reflect"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/shaders"
)

// pushField is a flattened field of a push struct.
type pushField struct {
	offset int
	kind   byte // 'u', 'i', 'f' as shaders.Member
	name   string
}

// flatten lists the 32-bit scalar fields of t, nested structs inlined,
// with their byte offsets.
func flatten(t *testing.T, typ reflect.Type, base int, prefix string) []pushField {
	var out []pushField
	for i := range typ.NumField() {
		f := typ.Field(i)
		off := base + int(f.Offset)
		switch f.Type.Kind() {
		case reflect.Struct:
			out = append(out, flatten(t, f.Type, off, prefix+f.Name+".")...)
		case reflect.Uint32:
			out = append(out, pushField{off, 'u', prefix + f.Name})
		case reflect.Int32:
			out = append(out, pushField{off, 'i', prefix + f.Name})
		case reflect.Float32:
			out = append(out, pushField{off, 'f', prefix + f.Name})
		default:
			t.Errorf("%s%s is a %s, not a 32-bit scalar", prefix, f.Name, f.Type)
		}
	}
	return out
}

// TestPushStructsMatchSPIRV checks each shader's push-constant struct
// against the block its SPIR-V declares: the same size, and field for
// member the same offset and scalar type. Every shader with a block has a
// struct.
func TestPushStructsMatchSPIRV(t *testing.T) {
	for _, name := range shaders.Names() {
		code, err := shaders.Code(name)
		if err != nil {
			t.Fatal(err)
		}
		members, err := shaders.PushConstants(code)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		s, ok := pushStructs[name]
		if !ok {
			if len(members) > 0 {
				t.Errorf("%s declares %d push constants but has no struct in pushStructs", name, len(members))
			}
			continue
		}
		typ := reflect.TypeOf(s)
		fields := flatten(t, typ, 0, "")
		size := 0
		if len(members) > 0 {
			last := members[len(members)-1]
			size = last.Offset + last.Size
		}
		if int(typ.Size()) != size {
			t.Errorf("%s: %s is %d bytes, the shader's block %d", name, typ.Name(), typ.Size(), size)
		}
		if len(fields) != len(members) {
			t.Errorf("%s: %s has %d fields, the block %d members", name, typ.Name(), len(fields), len(members))
			continue
		}
		for i, m := range members {
			if f := fields[i]; f.offset != m.Offset || f.kind != m.Kind {
				t.Errorf("%s: %s.%s at offset %d of kind %c; member %d of the block is at %d of kind %c",
					name, typ.Name(), f.name, f.offset, f.kind, i, m.Offset, m.Kind)
			}
		}
	}
	for name := range pushStructs {
		if !slices.Contains(shaders.Names(), name) {
			t.Errorf("pushStructs names %s, which is not a shader", name)
		}
	}
}

// pushWords hands the struct's memory over unchanged.
func TestPushWords(t *testing.T) {
	p := addnormPush{N: 3, Dim: 7, Eps: 1}
	if got := pushWords(&p); !slices.Equal(got, []uint32{3, 7, 0x3f800000}) {
		t.Errorf("pushWords = %#x", got)
	}
}
