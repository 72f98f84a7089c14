package gguf

import "fmt"

// ValueType is the type code of a metadata value.
type ValueType uint32

// Metadata value types, as numbered by the format.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7 // one byte, 0 or 1
	TypeString  ValueType = 8 // uint64 length + UTF-8 bytes
	TypeArray   ValueType = 9 // uint32 element type + uint64 count + elements
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"}

// String returns the type's name (uint8, ..., array, float64).
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// size returns the encoded size of a fixed-size value type, 0 for strings,
// arrays and unknown types.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize returns the fewest bytes a value of type t takes: what bounds
// the element count an array of them may claim.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.size()
}

// GGMLType is the element type of a tensor (ggml's type id).
type GGMLType uint32

// The ggml tensor types. Ids missing from the list (4, 5, 31-33, 36-38)
// were removed from ggml and are invalid in files.
const (
	F32     GGMLType = 0
	F16     GGMLType = 1
	Q4_0    GGMLType = 2
	Q4_1    GGMLType = 3
	Q5_0    GGMLType = 6
	Q5_1    GGMLType = 7
	Q8_0    GGMLType = 8
	Q8_1    GGMLType = 9
	Q2_K    GGMLType = 10
	Q3_K    GGMLType = 11
	Q4_K    GGMLType = 12
	Q5_K    GGMLType = 13
	Q6_K    GGMLType = 14
	Q8_K    GGMLType = 15
	IQ2_XXS GGMLType = 16
	IQ2_XS  GGMLType = 17
	IQ3_XXS GGMLType = 18
	IQ1_S   GGMLType = 19
	IQ4_NL  GGMLType = 20
	IQ3_S   GGMLType = 21
	IQ2_S   GGMLType = 22
	IQ4_XS  GGMLType = 23
	I8      GGMLType = 24
	I16     GGMLType = 25
	I32     GGMLType = 26
	I64     GGMLType = 27
	F64     GGMLType = 28
	IQ1_M   GGMLType = 29
	BF16    GGMLType = 30
	TQ1_0   GGMLType = 34
	TQ2_0   GGMLType = 35
	MXFP4   GGMLType = 39
	NVFP4   GGMLType = 40
	Q1_0    GGMLType = 41
	Q2_0    GGMLType = 42
)

// typeTraits gives each ggml type's name, values per block and bytes per
// block (ggml's type_traits; gguf-py's GGML_QUANT_SIZES).
var typeTraits = map[GGMLType]struct {
	name        string
	block, size int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 40},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144}, Q5_K: {"Q5_K", 256, 176},
	Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
	IQ2_XXS: {"IQ2_XXS", 256, 66}, IQ2_XS: {"IQ2_XS", 256, 74}, IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ1_S: {"IQ1_S", 256, 50}, IQ4_NL: {"IQ4_NL", 32, 18}, IQ3_S: {"IQ3_S", 256, 110},
	IQ2_S: {"IQ2_S", 256, 82}, IQ4_XS: {"IQ4_XS", 256, 136},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8}, F64: {"F64", 1, 8},
	IQ1_M: {"IQ1_M", 256, 56}, BF16: {"BF16", 1, 2},
	TQ1_0: {"TQ1_0", 256, 54}, TQ2_0: {"TQ2_0", 256, 66},
	MXFP4: {"MXFP4", 32, 17}, NVFP4: {"NVFP4", 64, 36}, Q1_0: {"Q1_0", 128, 18}, Q2_0: {"Q2_0", 64, 18},
}

// Known reports whether t is a ggml type this package knows the layout of.
func (t GGMLType) Known() bool {
	_, ok := typeTraits[t]
	return ok
}

// String returns ggml's name of the type (F32, Q4_K, BF16, ...).
func (t GGMLType) String() string {
	if tr, ok := typeTraits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// BlockSize returns the number of values per block (1 for plain types), 0
// for an unknown type.
func (t GGMLType) BlockSize() int { return typeTraits[t].block }

// BlockBytes returns the bytes per block (the element size for plain
// types), 0 for an unknown type.
func (t GGMLType) BlockBytes() int { return typeTraits[t].size }

// RowBytes returns the bytes of a row of n values, or 0 when the type is
// unknown or n is not a whole number of its blocks.
func (t GGMLType) RowBytes(n int) int {
	tr, ok := typeTraits[t]
	if !ok || n < 0 || n%tr.block != 0 {
		return 0
	}
	return n / tr.block * tr.size
}

// File types (general.file_type), as llama.cpp labels a file by its main
// tensor type or mix.
const (
	FileTypeF32    = 0
	FileTypeF16    = 1
	FileTypeQ8_0   = 7
	FileTypeQ4_K_M = 15
	FileTypeQ5_K_M = 17
	FileTypeQ6_K   = 18
	FileTypeBF16   = 32
)
