// Package quant holds govinfer's GGML-compatible quantized block formats:
// Q8_0, Q4_K and Q6_K weights (Q5_K's layout is known too), their
// dequantizers and reference quantizers, pure-Go dot products that the
// assembly kernels are tested against, 8-bit activation blocks (Q8_0, Q8_K)
// with ggml's integer dot products, and the tensor mixes that decide which
// Qwen3.5 tensor gets which format.
//
// The byte layouts are ggml's (ggml-common.h), so a block written here and a
// block read from a GGUF file are the same bytes. A row of a weight matrix
// (its input dimension: HF's second axis, GGUF's ne[0]) is cut into
// consecutive blocks; rows never share a block, so a matrix of r rows is r
// rows of RowBytes(cols) bytes, one after the other.
//
// The quantizers follow ggml's reference ones without an importance matrix
// (quantize_row_q8_0_ref, quantize_row_q4_K_ref, quantize_row_q6_K_ref),
// operation for operation in float32, so on finite inputs they write the
// blocks llama-quantize writes.
//
// The package is a leaf: it imports only the standard library and
// internal/half.
package quant

import "fmt"

// Type is a quantized block format. The zero value, Keep, is no format at
// all: the tensor stays as stored (what Plan returns for norms, biases and
// other tensors that are not quantized).
type Type uint8

// The formats. Their numeric values are govinfer's own; GGMLType and
// TypeFromGGML convert to and from ggml's type ids.
const (
	// Keep means not quantized: the tensor keeps its stored type.
	Keep Type = iota
	// Q8_0 is 32 values per 34-byte block: fp16 d, then 32 int8; x = d·q.
	Q8_0
	// Q4_K is 256 values per 144-byte super-block of 8 sub-blocks of 32
	// with 6-bit scales and mins: x = d·sc·q − dmin·m, q in 0..15.
	Q4_K
	// Q5_K is Q4_K with a fifth bit per value (176 bytes per 256 values).
	Q5_K
	// Q6_K is 256 values per 210-byte super-block of 16 sub-blocks of 16
	// with int8 scales: x = d·sc·(q − 32), q in 0..63.
	Q6_K
)

// Block sizes shared by the code: values per block and bytes per block.
const (
	q80Block = 32  // values in a Q8_0 block
	q80Bytes = 34  // bytes in a Q8_0 block
	qkK      = 256 // values in a K-quant super-block
	q4KBytes = 144 // bytes in a Q4_K block
	q5KBytes = 176 // bytes in a Q5_K block
	q6KBytes = 210 // bytes in a Q6_K block
)

var typeInfo = [...]struct {
	name        string
	block, size int
	ggml        uint32
}{
	Keep: {"keep", 0, 0, 0},
	Q8_0: {"Q8_0", q80Block, q80Bytes, 8},
	Q4_K: {"Q4_K", qkK, q4KBytes, 12},
	Q5_K: {"Q5_K", qkK, q5KBytes, 13},
	Q6_K: {"Q6_K", qkK, q6KBytes, 14},
}

func (t Type) known() bool { return t > Keep && int(t) < len(typeInfo) }

// String returns ggml's name of the format ("Q8_0", "Q4_K", "Q5_K",
// "Q6_K"), "keep" for Keep, and "Type(n)" for anything else.
func (t Type) String() string {
	if int(t) < len(typeInfo) {
		return typeInfo[t].name
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// BlockSize returns the number of values in one block: 32 for Q8_0, 256 for
// the K-quants, 0 for Keep and unknown types.
func (t Type) BlockSize() int {
	if !t.known() {
		return 0
	}
	return typeInfo[t].block
}

// BlockBytes returns the bytes of one block: 34 for Q8_0, 144 for Q4_K, 176
// for Q5_K, 210 for Q6_K, 0 for Keep and unknown types.
func (t Type) BlockBytes() int {
	if !t.known() {
		return 0
	}
	return typeInfo[t].size
}

// Fits reports whether a row of cols values can be stored in t: cols is a
// positive multiple of t's block size. It is false for Keep.
func (t Type) Fits(cols int) bool {
	return t.known() && cols > 0 && cols%typeInfo[t].block == 0
}

// RowBytes returns the bytes of a row of cols values stored in t. It panics
// unless t.Fits(cols): a row that does not fill whole blocks has no size.
func (t Type) RowBytes(cols int) int {
	if !t.Fits(cols) {
		panic(fmt.Sprintf("quant: a row of %d values does not fit %v blocks", cols, t))
	}
	return cols / typeInfo[t].block * typeInfo[t].size
}

// GGMLType returns ggml's type id of t (Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14),
// as written in GGUF tensor infos. ok is false for Keep and unknown types.
func (t Type) GGMLType() (id uint32, ok bool) {
	if !t.known() {
		return 0, false
	}
	return typeInfo[t].ggml, true
}

// TypeFromGGML returns the Type whose ggml type id is id; ok is false when
// the package does not know that format (F32, BF16 and F16 included).
func TypeFromGGML(id uint32) (t Type, ok bool) {
	for i := range typeInfo {
		if Type(i).known() && typeInfo[i].ggml == id {
			return Type(i), true
		}
	}
	return Keep, false
}
