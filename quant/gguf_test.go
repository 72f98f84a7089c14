package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

// A minimal GGUF v3 reader for the tests: header, metadata (every value type
// skipped, general.alignment kept), tensor infos and the data section.

// ggml type ids of the unquantized types in the test files.
const (
	ggmlF32  = 0
	ggmlF16  = 1
	ggmlBF16 = 30
)

type ggufTensor struct {
	name   string
	ne     []uint64 // ne[0] is the contiguous dimension (a row's length)
	typ    uint32   // ggml type id
	offset uint64   // from the start of the data section
	data   []byte
}

// rows and cols view the tensor as a matrix of rows of ne[0] values.
func (t *ggufTensor) cols() int { return int(t.ne[0]) }
func (t *ggufTensor) rows() int {
	n := 1
	for _, d := range t.ne[1:] {
		n *= int(d)
	}
	return n
}

type ggufFile struct {
	tensors []*ggufTensor
	byName  map[string]*ggufTensor
	meta    map[string]any // the scalar values only
}

type ggufReader struct {
	b   []byte
	off int
	err error
}

func (r *ggufReader) take(n int) []byte {
	if r.err != nil {
		return make([]byte, n)
	}
	if n < 0 || r.off+n > len(r.b) {
		r.err = fmt.Errorf("gguf: truncated at byte %d (want %d more)", r.off, n)
		return make([]byte, max(n, 0))
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *ggufReader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *ggufReader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *ggufReader) str() string { return string(r.take(int(r.u64()))) }

// value reads one value of GGUF type vt; scalars are returned, arrays and
// strings skipped (nil) except top-level strings.
func (r *ggufReader) value(vt uint32, depth int) any {
	sizes := map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	switch {
	case vt == 8:
		return r.str()
	case vt == 9:
		if depth > 8 {
			r.err = errors.New("gguf: arrays nested too deep")
			return nil
		}
		et, n := r.u32(), r.u64()
		if sz, ok := sizes[et]; ok {
			r.take(int(n) * sz)
			return nil
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.value(et, depth+1)
		}
		return nil
	}
	sz, ok := sizes[vt]
	if !ok {
		r.err = fmt.Errorf("gguf: unknown value type %d", vt)
		return nil
	}
	b := r.take(sz)
	switch vt {
	case 4:
		return binary.LittleEndian.Uint32(b)
	case 10:
		return binary.LittleEndian.Uint64(b)
	}
	return nil
}

func readGGUF(path string) (*ggufFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &ggufReader{b: b}
	if string(r.take(4)) != "GGUF" {
		return nil, fmt.Errorf("%s: not a GGUF file", path)
	}
	if v := r.u32(); v != 3 {
		return nil, fmt.Errorf("%s: GGUF version %d, want 3", path, v)
	}
	nt, nkv := r.u64(), r.u64()
	f := &ggufFile{byName: map[string]*ggufTensor{}, meta: map[string]any{}}
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		k := r.str()
		f.meta[k] = r.value(r.u32(), 0)
	}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		t := &ggufTensor{name: r.str()}
		nd := r.u32()
		if nd == 0 || nd > 4 {
			return nil, fmt.Errorf("%s: tensor %q has %d dimensions", path, t.name, nd)
		}
		for range nd {
			t.ne = append(t.ne, r.u64())
		}
		t.typ, t.offset = r.u32(), r.u64()
		f.tensors = append(f.tensors, t)
		f.byName[t.name] = t
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", path, r.err)
	}
	align := uint64(32)
	if a, ok := f.meta["general.alignment"].(uint32); ok && a > 0 {
		align = uint64(a)
	}
	data := (uint64(r.off) + align - 1) / align * align
	for _, t := range f.tensors {
		n, err := ggufBytes(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		start := data + t.offset
		if t.offset%align != 0 || start+uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("%s: tensor %q at %d+%d bytes outside the file (%d)", path, t.name, start, n, len(b))
		}
		t.data = b[start : start+uint64(n)]
	}
	return f, nil
}

// ggufBytes is the size of a tensor's data.
func ggufBytes(t *ggufTensor) (int, error) {
	switch t.typ {
	case ggmlF32:
		return 4 * t.rows() * t.cols(), nil
	case ggmlF16, ggmlBF16:
		return 2 * t.rows() * t.cols(), nil
	}
	q, ok := TypeFromGGML(t.typ)
	if !ok || !q.Fits(t.cols()) {
		return 0, fmt.Errorf("tensor %q: ggml type %d with rows of %d", t.name, t.typ, t.cols())
	}
	return t.rows() * q.RowBytes(t.cols()), nil
}

// floats returns an F32, F16 or BF16 tensor's values.
func (t *ggufTensor) floats(tb testing.TB) []float32 {
	tb.Helper()
	x := make([]float32, t.rows()*t.cols())
	var err error
	switch t.typ {
	case ggmlF32:
		err = (&ggufReader{b: t.data}).floats32(x)
	case ggmlBF16:
		err = half.DecodeBF16(x, t.data)
	default:
		tb.Fatalf("tensor %q: ggml type %d is not a float type", t.name, t.typ)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return x
}

func (r *ggufReader) floats32(x []float32) error {
	for i := range x {
		x[i] = math.Float32frombits(r.u32())
	}
	return r.err
}

func openGGUF(tb testing.TB, name string) *ggufFile {
	tb.Helper()
	f, err := readGGUF("../testdata/gguf/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func TestReadGGUF(t *testing.T) {
	f := openGGUF(t, "ksmall-bf16.gguf")
	if a, _ := f.meta["general.architecture"].(string); a != "qwen35" {
		t.Errorf("general.architecture = %q, want qwen35", a)
	}
	emb := f.byName["token_embd.weight"]
	if emb == nil || emb.cols() != 256 || emb.rows() != 2048 || emb.typ != ggmlBF16 {
		t.Fatalf("token_embd.weight = %+v, want BF16 {256, 2048}", emb)
	}
	if n := f.byName["blk.0.ssm_a"]; n == nil || n.typ != ggmlF32 || n.cols() != 4 {
		t.Errorf("blk.0.ssm_a = %+v, want F32 {4}", n)
	}
	// ssm_a = −exp(A_log) with A ~ U(1, 16): every value in [−16, −1].
	for _, v := range f.byName["blk.0.ssm_a"].floats(t) {
		if !(v <= -1 && v >= -16) {
			t.Errorf("blk.0.ssm_a value %v outside [-16, -1]: data offset wrong?", v)
		}
	}
	t.Logf("%d tensors", len(f.tensors))
}

// TestReadGGUFSynthetic checks the reader on a file built here: every
// metadata value type, nested arrays, a non-default alignment.
func TestReadGGUFSynthetic(t *testing.T) {
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	b = append(b, "GGUF"...)
	u32(3)
	u64(2)  // tensors
	u64(15) // key/values
	scalars := []struct {
		typ  uint32
		size int
	}{{0, 1}, {1, 1}, {2, 2}, {3, 2}, {5, 4}, {6, 4}, {7, 1}, {10, 8}, {11, 8}, {12, 8}}
	for i, s := range scalars {
		str(fmt.Sprintf("k.scalar%d", i))
		u32(s.typ)
		b = append(b, make([]byte, s.size)...)
	}
	str("k.string")
	u32(8)
	str("hello")
	str("k.strings") // array of strings
	u32(9)
	u32(8)
	u64(2)
	str("a")
	str("bc")
	str("k.nested") // array of arrays of int32
	u32(9)
	u32(9)
	u64(2)
	for n := range 2 {
		u32(5)
		u64(uint64(n + 1))
		b = append(b, make([]byte, 4*(n+1))...)
	}
	str("general.alignment")
	u32(4)
	u32(64)
	str("k.last")
	u32(4)
	u32(7)
	// Two F32 tensors {3} and {2, 2}; the second at offset 64.
	str("a")
	u32(1)
	u64(3)
	u32(ggmlF32)
	u64(0)
	str("b")
	u32(2)
	u64(2)
	u64(2)
	u32(ggmlF32)
	u64(64)
	for len(b)%64 != 0 {
		b = append(b, 0xee)
	}
	data := make([]byte, 64+16)
	for i, v := range []float32{1, 2, 3} {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	for i, v := range []float32{4, 5, 6, 7} {
		binary.LittleEndian.PutUint32(data[64+4*i:], math.Float32bits(v))
	}
	b = append(b, data...)
	f, err := readGGUF(writeTemp(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if f.meta["k.string"] != "hello" || f.meta["k.last"] != uint32(7) || f.meta["general.alignment"] != uint32(64) {
		t.Errorf("metadata %v", f.meta)
	}
	for name, want := range map[string][]float32{"a": {1, 2, 3}, "b": {4, 5, 6, 7}} {
		got := f.byName[name].floats(t)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("tensor %s = %v, want %v", name, got, want)
		}
	}
	if _, err := readGGUF(writeTemp(t, b[:len(b)-1])); err == nil {
		t.Error("a truncated file read without error")
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	path := t.TempDir() + "/t.gguf"
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
