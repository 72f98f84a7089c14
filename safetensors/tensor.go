package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/govinfer/govinfer/internal/half"
)

// Tensor is a view of one tensor. For tensors read from a file, Data aliases
// the memory map (zero-copy, read-only: writing to it faults) and must not be
// used after the file is closed. Data is little-endian, row-major.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// TensorInfo describes a tensor without its data: what a Writer needs up
// front to lay out a file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
}

// NumElements returns the product of the dimensions (1 for a scalar).
func (t Tensor) NumElements() int { return numElements(t.Shape) }

// Info returns the name, dtype and shape of t.
func (t Tensor) Info() TensorInfo {
	return TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape)}
}

func numElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// littleEndian reports whether the host stores numbers little-endian, so
// that file bytes can be viewed as numbers in place.
func littleEndian() bool {
	return binary.NativeEndian.Uint16([]byte{1, 0}) == 1
}

// Float32s returns the elements of an F32 tensor. The slice aliases t.Data
// (zero-copy, read-only) when the host is little-endian and the data is
// 4-byte aligned; otherwise it is a copy.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.checkView(F32); err != nil {
		return nil, err
	}
	n := len(t.Data) / 4
	if n == 0 {
		return []float32{}, nil
	}
	if littleEndian() && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// Uint16s returns the raw 16-bit elements of a BF16, F16, I16 or U16 tensor
// (bit patterns; see internal/half to convert). The slice aliases t.Data
// (zero-copy, read-only) when the host is little-endian and the data is
// 2-byte aligned; otherwise it is a copy.
func (t Tensor) Uint16s() ([]uint16, error) {
	if err := t.checkView(BF16, F16, I16, U16); err != nil {
		return nil, err
	}
	n := len(t.Data) / 2
	if n == 0 {
		return []uint16{}, nil
	}
	if littleEndian() && uintptr(unsafe.Pointer(&t.Data[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out, nil
}

// ToFloat32 returns a new slice with the elements of a floating-point tensor
// (F32, F16, BF16 or F64) converted to float32.
func (t Tensor) ToFloat32() ([]float32, error) {
	if err := t.checkView(F32, F16, BF16, F64); err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Data)/t.DType.Size())
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = half.F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = half.BF16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:])))
		}
	}
	return out, nil
}

// checkView verifies that t has one of the wanted dtypes and that its data
// length matches its shape.
func (t Tensor) checkView(want ...DType) error {
	if !slices.Contains(want, t.DType) {
		return fmt.Errorf("safetensors: tensor %s is %s, want one of %v", quote(t.Name), t.DType, want)
	}
	return checkTensorSize(t.Name, t.DType, t.Shape, int64(len(t.Data)))
}

// FromFloat32 builds a tensor of dtype F32, BF16 or F16 from values,
// rounding to nearest even for the 16-bit types. len(values) must equal the
// product of shape.
func FromFloat32(name string, dtype DType, shape []int, values []float32) (Tensor, error) {
	n, err := byteSize(TensorInfo{Name: name, DType: dtype, Shape: shape})
	if err != nil {
		return Tensor{}, err
	}
	if int64(len(values))*int64(dtype.Size()) != n {
		return Tensor{}, fmt.Errorf("safetensors: tensor %s: %d values for shape %v", quote(name), len(values), shape)
	}
	t := Tensor{Name: name, DType: dtype, Shape: slices.Clone(shape), Data: make([]byte, n)}
	switch dtype {
	case F32:
		for i, v := range values {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
		}
	case BF16:
		err = half.EncodeBF16(t.Data, values)
	case F16:
		err = half.EncodeF16(t.Data, values)
	default:
		return Tensor{}, fmt.Errorf("safetensors: tensor %s: FromFloat32 cannot make dtype %s", quote(name), dtype)
	}
	if err != nil {
		return Tensor{}, fmt.Errorf("safetensors: tensor %s: %w", quote(name), err)
	}
	return t, nil
}

// byteSize validates info (name, dtype, shape) and returns the number of
// data bytes the tensor takes.
func byteSize(info TensorInfo) (int64, error) {
	if info.Name == "" {
		return 0, fmt.Errorf("safetensors: tensor with an empty name")
	}
	if info.Name == metadataKey {
		return 0, fmt.Errorf("safetensors: %s is reserved and cannot name a tensor", metadataKey)
	}
	size := info.DType.Size()
	if size == 0 {
		return 0, fmt.Errorf("safetensors: tensor %s: unsupported dtype %s", quote(info.Name), quote(string(info.DType)))
	}
	n := int64(size)
	for _, d := range info.Shape {
		if d < 0 {
			return 0, fmt.Errorf("safetensors: tensor %s: negative dimension in shape %v", quote(info.Name), info.Shape)
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, fmt.Errorf("safetensors: tensor %s: shape %v is too large", quote(info.Name), info.Shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// checkTensorSize verifies that dataLen bytes is what dtype and shape need.
func checkTensorSize(name string, dtype DType, shape []int, dataLen int64) error {
	n, err := byteSize(TensorInfo{Name: name, DType: dtype, Shape: shape})
	if err != nil {
		return err
	}
	if n != dataLen {
		return fmt.Errorf("safetensors: tensor %s: dtype %s with shape %v needs %d bytes, data has %d", quote(name), dtype, shape, n, dataLen)
	}
	return nil
}
