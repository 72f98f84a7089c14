package gguf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Format constants.
const (
	// Magic opens every GGUF file.
	Magic = "GGUF"
	// Version is the format version this package writes; it reads 2 and 3,
	// which share one layout.
	Version = 3
	// DefaultAlignment aligns the data section and every tensor when
	// general.alignment is absent.
	DefaultAlignment = 32
	// MaxHeaderBytes bounds the metadata and tensor infos: they must end
	// within this many bytes of the start of a file. Real files need a few
	// megabytes (a 250k-token vocabulary with its merges is about 8 MB).
	MaxHeaderBytes = 256 << 20
	// MaxNameLen is the longest tensor name, in bytes (ggml's GGML_MAX_NAME
	// less its terminator).
	MaxNameLen = 63
	// MaxDims is the most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
	MaxDims = 4
	// maxArrayDepth bounds arrays nested in arrays.
	maxArrayDepth = 8
	// maxPrealloc bounds the elements an array's count reserves before they
	// are read, so a count that the data does not back allocates nothing
	// much.
	maxPrealloc = 1 << 16
)

// KeyAlignment is the metadata key of the data alignment.
const KeyAlignment = "general.alignment"

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	Type GGMLType
	// Dims are ggml's ne, innermost first: Dims[0] is the length of a row
	// (Hugging Face's last dimension), so a [rows, cols] matrix has Dims
	// [cols, rows]. Trailing dimensions of 1 are kept as the file has them.
	Dims []int
	// Offset is where the tensor starts in its file's data section.
	Offset int64
	// Size is the tensor's size in bytes.
	Size int64
}

// Elements returns the number of values of the tensor.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= int64(d)
	}
	return n
}

// Shape returns the dimensions outermost first, as Hugging Face and
// row-major code write them, with ggml's trailing 1s dropped: Dims [cols,
// rows] give [rows, cols], and a vector [n].
func (t TensorInfo) Shape() []int {
	d := t.Dims
	for len(d) > 1 && d[len(d)-1] == 1 {
		d = d[:len(d)-1]
	}
	s := slices.Clone(d)
	slices.Reverse(s)
	return s
}

// header is a validated file header.
type header struct {
	version   uint32
	md        *Metadata
	tensors   []TensorInfo
	alignment int
	dataStart int64 // file offset of the data section
	dataEnd   int64 // end of the last tensor's bytes
}

// decoder reads the header from the start of a file's bytes.
type decoder struct {
	path string
	buf  []byte // the header window: at most MaxHeaderBytes
	full int64  // the whole file's length
	off  int
}

func (d *decoder) fail(off int, key, tensor, format string, args ...any) error {
	return &FormatError{Path: d.path, Offset: int64(off), Key: key, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
}

// need checks that n more bytes are in the header window.
func (d *decoder) need(n uint64, key, tensor, what string) error {
	left := uint64(len(d.buf) - d.off)
	if n <= left {
		return nil
	}
	if int64(len(d.buf)) < d.full {
		return d.fail(d.off, key, tensor, "%s (%d bytes) runs past the %d-byte limit on metadata and tensor infos", what, n, MaxHeaderBytes)
	}
	return d.fail(d.off, key, tensor, "truncated: %s needs %d bytes, %d remain in the file", what, n, left)
}

func (d *decoder) u8() byte {
	v := d.buf[d.off]
	d.off++
	return v
}

func (d *decoder) u16() uint16 {
	v := binary.LittleEndian.Uint16(d.buf[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32() uint32 {
	v := binary.LittleEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64() uint64 {
	v := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v
}

func (d *decoder) readU32(key, tensor, what string) (uint32, error) {
	if err := d.need(4, key, tensor, what); err != nil {
		return 0, err
	}
	return d.u32(), nil
}

func (d *decoder) readU64(key, tensor, what string) (uint64, error) {
	if err := d.need(8, key, tensor, what); err != nil {
		return 0, err
	}
	return d.u64(), nil
}

// str reads a length-prefixed string.
func (d *decoder) str(key, tensor, what string) (string, error) {
	n, err := d.readU64(key, tensor, "the length of "+what)
	if err != nil {
		return "", err
	}
	start := d.off
	if err := d.need(n, key, tensor, what); err != nil {
		return "", err
	}
	d.off += int(n)
	return string(d.buf[start:d.off]), nil
}

// parseHeader validates the header of a file whose bytes are buf (only the
// first MaxHeaderBytes are read) and the layout of its tensors.
func parseHeader(path string, buf []byte) (*header, error) {
	d := &decoder{path: path, buf: buf[:min(len(buf), MaxHeaderBytes)], full: int64(len(buf))}
	if len(buf) < 4 || string(buf[:4]) != Magic {
		n := min(len(buf), 4)
		return nil, d.fail(0, "", "", "not a GGUF file: starts with %q, not %q", buf[:n], Magic)
	}
	d.off = 4
	version, err := d.readU32("", "", "the version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, d.fail(4, "", "", "GGUF version 1 is not supported (only 2 and 3)")
	case version != 2 && version != 3 && bswap32(version) <= 3:
		return nil, d.fail(4, "", "", "a big-endian GGUF file is not supported")
	case version != 2 && version != 3:
		return nil, d.fail(4, "", "", "unknown GGUF version %d (want 3)", version)
	}
	nTensors, err := d.readU64("", "", "the tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.readU64("", "", "the metadata count")
	if err != nil {
		return nil, err
	}
	// Each pair takes at least 13 bytes, each tensor info 24 (name length,
	// dimension count, type, offset).
	if left := uint64(len(d.buf) - d.off); nKV > left/13 {
		return nil, d.fail(16, "", "", "%d metadata pairs cannot fit in the %d bytes that follow", nKV, left)
	}
	if left := uint64(len(d.buf) - d.off); nTensors > left/24 {
		return nil, d.fail(8, "", "", "%d tensor infos cannot fit in the %d bytes that follow", nTensors, left)
	}
	h := &header{version: version, md: &Metadata{index: make(map[string]int, nKV)}, alignment: DefaultAlignment}
	h.md.kvs = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		at := d.off
		key, err := d.str("", "", fmt.Sprintf("the key of metadata pair %d", i))
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.fail(at, "", "", "metadata pair %d has an empty key", i)
		}
		if h.md.Has(key) {
			return nil, d.fail(at, key, "", "key given twice")
		}
		t, err := d.readU32(key, "", "the value type")
		if err != nil {
			return nil, err
		}
		v, err := d.value(key, ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		h.md.index[key] = len(h.md.kvs)
		h.md.kvs = append(h.md.kvs, KV{key, v})
	}
	if v, ok := h.md.Get(KeyAlignment); ok {
		a, ok := toInt(v)
		if !ok || a <= 0 || a > 1<<30 || a&(a-1) != 0 {
			return nil, d.fail(-1, KeyAlignment, "", "alignment %v is not a power of two up to 2^30", v)
		}
		h.alignment = int(a)
	}
	h.tensors = make([]TensorInfo, 0, nTensors)
	names := make(map[string]bool, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, d.fail(-1, "", t.Name, "tensor given twice")
		}
		names[t.Name] = true
		h.tensors = append(h.tensors, t)
	}
	h.dataStart = int64(d.off)
	if nTensors > 0 {
		h.dataStart = alignUp(h.dataStart, int64(h.alignment))
	}
	if err := h.checkLayout(d); err != nil {
		return nil, err
	}
	return h, nil
}

// bswap32 reverses the bytes of v (a version read from a big-endian file).
func bswap32(v uint32) uint32 {
	return v>>24 | (v>>8)&0xff00 | (v<<8)&0xff0000 | v<<24
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// tensorInfo reads and checks one tensor info (not its place in the data
// section, which checkLayout does).
func (d *decoder) tensorInfo(i uint64) (TensorInfo, error) {
	at := d.off
	name, err := d.str("", "", fmt.Sprintf("the name of tensor %d", i))
	if err != nil {
		return TensorInfo{}, err
	}
	switch {
	case name == "":
		return TensorInfo{}, d.fail(at, "", "", "tensor %d has an empty name", i)
	case len(name) > MaxNameLen:
		return TensorInfo{}, d.fail(at, "", name, "name of %d bytes is longer than %d", len(name), MaxNameLen)
	}
	nd, err := d.readU32("", name, "the dimension count")
	if err != nil {
		return TensorInfo{}, err
	}
	if nd > MaxDims {
		return TensorInfo{}, d.fail(d.off-4, "", name, "%d dimensions, more than %d", nd, MaxDims)
	}
	t := TensorInfo{Name: name, Dims: make([]int, nd)}
	elems := uint64(1)
	for j := range t.Dims {
		n, err := d.readU64("", name, "a dimension")
		if err != nil {
			return TensorInfo{}, err
		}
		if n > math.MaxInt64 || (n > 0 && elems > math.MaxInt64/n) {
			return TensorInfo{}, d.fail(d.off-8, "", name, "dimensions %v... hold more than 2^63 values", append(t.Dims[:j:j], int(min(n, math.MaxInt64))))
		}
		t.Dims[j] = int(n)
		elems *= n
	}
	typ, err := d.readU32("", name, "the type")
	if err != nil {
		return TensorInfo{}, err
	}
	t.Type = GGMLType(typ)
	if !t.Type.Known() {
		return TensorInfo{}, d.fail(d.off-4, "", name, "unknown ggml type %d", typ)
	}
	block, bsize := uint64(t.Type.BlockSize()), uint64(t.Type.BlockBytes())
	row := uint64(1)
	if nd > 0 {
		row = uint64(t.Dims[0])
	}
	if row%block != 0 {
		return TensorInfo{}, d.fail(d.off-4, "", name, "rows of %d values are not whole %v blocks of %d", row, t.Type, block)
	}
	if elems/block > math.MaxInt64/bsize {
		return TensorInfo{}, d.fail(d.off-4, "", name, "%d %v values take more than 2^63 bytes", elems, t.Type)
	}
	t.Size = int64(elems / block * bsize)
	off, err := d.readU64("", name, "the data offset")
	if err != nil {
		return TensorInfo{}, err
	}
	if off > math.MaxInt64 {
		return TensorInfo{}, d.fail(d.off-8, "", name, "data offset %d is out of range", off)
	}
	t.Offset = int64(off)
	return t, nil
}

// checkLayout checks that every tensor is aligned, inside the file and
// apart from the others.
func (h *header) checkLayout(d *decoder) error {
	dataLen := d.full - h.dataStart
	if len(h.tensors) > 0 && dataLen < 0 {
		return d.fail(-1, "", "", "truncated: the data section would start at byte %d of a %d-byte file", h.dataStart, d.full)
	}
	order := make([]int, len(h.tensors))
	for i := range order {
		order[i] = i
	}
	for _, t := range h.tensors {
		if t.Offset%int64(h.alignment) != 0 {
			return d.fail(-1, "", t.Name, "data offset %d is not a multiple of the alignment %d", t.Offset, h.alignment)
		}
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return d.fail(-1, "", t.Name, "truncated: %d bytes at data offset %d run past the end of the %d-byte data section",
				t.Size, t.Offset, dataLen)
		}
		h.dataEnd = max(h.dataEnd, h.dataStart+t.Offset+t.Size)
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := h.tensors[a], h.tensors[b]
		if c := cmp.Compare(ta.Offset, tb.Offset); c != 0 {
			return c
		}
		return cmp.Compare(ta.Size, tb.Size)
	})
	var prev *TensorInfo
	for _, i := range order {
		t := &h.tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return d.fail(-1, "", t.Name, "bytes [%d, %d) overlap those of tensor %s [%d, %d)",
				t.Offset, t.Offset+t.Size, quote(prev.Name), prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return nil
}

// value reads a value of type t; depth counts the arrays it is inside.
func (d *decoder) value(key string, t ValueType, depth int) (any, error) {
	if t == TypeArray {
		return d.array(key, depth+1)
	}
	if t == TypeString {
		return d.str(key, "", "a string")
	}
	size := t.size()
	if size == 0 {
		return nil, d.fail(d.off-4, key, "", "unknown value type %d", uint32(t))
	}
	if err := d.need(uint64(size), key, "", "a "+t.String()); err != nil {
		return nil, err
	}
	switch t {
	case TypeUint8:
		return d.u8(), nil
	case TypeInt8:
		return int8(d.u8()), nil
	case TypeUint16:
		return d.u16(), nil
	case TypeInt16:
		return int16(d.u16()), nil
	case TypeUint32:
		return d.u32(), nil
	case TypeInt32:
		return int32(d.u32()), nil
	case TypeFloat32:
		return math.Float32frombits(d.u32()), nil
	case TypeBool:
		return d.boolean(key)
	case TypeUint64:
		return d.u64(), nil
	case TypeInt64:
		return int64(d.u64()), nil
	default: // TypeFloat64
		return math.Float64frombits(d.u64()), nil
	}
}

func (d *decoder) boolean(key string) (bool, error) {
	switch b := d.u8(); b {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, d.fail(d.off-1, key, "", "bool byte is %d, not 0 or 1", b)
	}
}

// array reads an array's element type, count and elements.
func (d *decoder) array(key string, depth int) (any, error) {
	if depth > maxArrayDepth {
		return nil, d.fail(d.off, key, "", "arrays nested more than %d deep", maxArrayDepth)
	}
	at := d.off
	et, err := d.readU32(key, "", "an array's element type")
	if err != nil {
		return nil, err
	}
	n, err := d.readU64(key, "", "an array's length")
	if err != nil {
		return nil, err
	}
	t := ValueType(et)
	least := t.minSize()
	if least == 0 {
		return nil, d.fail(at, key, "", "array of unknown value type %d", et)
	}
	if left := uint64(len(d.buf) - d.off); n > left/uint64(least) {
		return nil, d.tooLong(n, least, key, t)
	}
	count := int(n)
	if size := t.size(); size > 0 {
		// The bytes are all there: read the elements in one pass.
		raw := d.buf[d.off : d.off+count*size]
		d.off += count * size
		return decodeFixed(t, raw, count, func(i int) error {
			return d.fail(d.off-count+i, key, "", "bool byte at index %d is %d, not 0 or 1", i, raw[i])
		})
	}
	if t == TypeString {
		out := make([]string, 0, min(count, maxPrealloc))
		for range count {
			s, err := d.str(key, "", "a string")
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	out := make([]any, 0, min(count, maxPrealloc))
	for range count {
		v, err := d.array(key, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// tooLong reports an array whose n elements of at least least bytes each
// cannot fit in what is left of the header window.
func (d *decoder) tooLong(n uint64, least int, key string, t ValueType) error {
	what := fmt.Sprintf("an array of %d %v values", n, t)
	if n > math.MaxInt64/uint64(least) {
		return d.fail(d.off, key, "", "%s is longer than any file", what)
	}
	return d.need(n*uint64(least), key, "", what)
}

// decodeFixed decodes count little-endian values of a fixed-size type.
func decodeFixed(t ValueType, raw []byte, count int, badBool func(int) error) (any, error) {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return slices.Clone(raw), nil
	case TypeInt8:
		out := make([]int8, count)
		for i := range out {
			out[i] = int8(raw[i])
		}
		return out, nil
	case TypeUint16:
		out := make([]uint16, count)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		return out, nil
	case TypeInt16:
		out := make([]int16, count)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		return out, nil
	case TypeUint32:
		out := make([]uint32, count)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		return out, nil
	case TypeInt32:
		out := make([]int32, count)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		return out, nil
	case TypeFloat32:
		out := make([]float32, count)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return out, nil
	case TypeBool:
		out := make([]bool, count)
		for i, b := range raw {
			if b > 1 {
				return nil, badBool(i)
			}
			out[i] = b == 1
		}
		return out, nil
	case TypeUint64:
		out := make([]uint64, count)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		return out, nil
	case TypeInt64:
		out := make([]int64, count)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		return out, nil
	default: // TypeFloat64
		out := make([]float64, count)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return out, nil
	}
}
