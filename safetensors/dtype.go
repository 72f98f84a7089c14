package safetensors

// DType names a tensor element type as written in safetensors headers.
type DType string

// The element types this package reads and writes. Sub-byte types (F4, F6_*)
// are not supported: their Size is 0 and files using them are rejected.
const (
	F64    DType = "F64"     // IEEE binary64
	F32    DType = "F32"     // IEEE binary32
	F16    DType = "F16"     // IEEE binary16
	BF16   DType = "BF16"    // bfloat16: the top half of a binary32
	F8E4M3 DType = "F8_E4M3" // 8-bit float, 4 exponent and 3 mantissa bits
	F8E5M2 DType = "F8_E5M2" // 8-bit float, 5 exponent and 2 mantissa bits
	F8E8M0 DType = "F8_E8M0" // 8-bit power of two (a scale)
	C64    DType = "C64"     // complex64: two binary32
	I64    DType = "I64"     // signed integers
	I32    DType = "I32"     //
	I16    DType = "I16"     //
	I8     DType = "I8"      //
	U64    DType = "U64"     // unsigned integers
	U32    DType = "U32"     //
	U16    DType = "U16"     //
	U8     DType = "U8"      //
	BOOL   DType = "BOOL"    // one byte per element, 0 or 1
)

// Size returns the number of bytes per element of d, or 0 if d is unknown or
// not byte-sized.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64, C64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case F8E4M3, F8E5M2, F8E8M0, I8, U8, BOOL:
		return 1
	}
	return 0
}
