package gguf

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/govinfer/govinfer/safetensors"
)

const testdata = "../testdata/gguf"

// llamaFiles are the files llama.cpp b10547's converter and llama-quantize
// wrote (testdata/gguf/README.md).
var llamaFiles = []string{"ksmall-bf16.gguf", "ksmall-q8_0.gguf", "ksmall-q6_k.gguf", "ksmall-q4_k_m.gguf"}

// TestLlamaCppFiles reads llama.cpp's own files and writes them back: the
// metadata and tensor infos read as llama.cpp wrote them, and Marshal
// reproduces every file byte for byte (ggml's layout, padding included).
func TestLlamaCppFiles(t *testing.T) {
	for _, name := range llamaFiles {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(testdata, name)
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			md := f.Metadata()
			if arch, err := md.String("general.architecture"); err != nil || arch != "qwen35" {
				t.Errorf("general.architecture = %q, %v", arch, err)
			}
			if n, err := md.Int("qwen35.block_count"); err != nil || n != 4 {
				t.Errorf("qwen35.block_count = %d, %v", n, err)
			}
			if s, err := md.Ints("qwen35.rope.dimension_sections"); err != nil || !slices.Equal(s, []int64{3, 3, 2, 0}) {
				t.Errorf("rope.dimension_sections = %v, %v", s, err)
			}
			if toks, err := md.Strings("tokenizer.ggml.tokens"); err != nil || len(toks) != 2048 || toks[2047] != "<|im_end|>" {
				t.Errorf("tokenizer.ggml.tokens: %d tokens, %v", len(toks), err)
			}
			if _, err := md.String("qwen35.block_count"); err == nil || !strings.Contains(err.Error(), "is a uint32, want a string") {
				t.Errorf("wrong-type access: %v", err)
			}
			if _, err := md.Int("no.such.key"); !errors.Is(err, ErrNoKey) {
				t.Errorf("missing key: %v", err)
			}
			if f.Version() != 3 || f.Alignment() != DefaultAlignment {
				t.Errorf("version %d alignment %d", f.Version(), f.Alignment())
			}
			info, err := f.Info("blk.0.ssm_conv1d.weight")
			if err != nil || info.Type != F32 || !slices.Equal(info.Dims, []int{4, 512}) || !slices.Equal(info.Shape(), []int{512, 4}) {
				t.Errorf("ssm_conv1d: %+v, %v", info, err)
			}
			var tensors []Tensor
			for _, ti := range f.Tensors() {
				x, err := f.Tensor(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				tensors = append(tensors, x)
			}
			out, err := Marshal(md, tensors)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, raw) {
				t.Errorf("Marshal of the parsed file differs from llama.cpp's bytes (%d vs %d bytes)", len(out), len(raw))
			}
		})
	}
}

// TestTensorBytes checks tensor views against the checkpoint the BF16 file
// was converted from: the converter copies BF16 matrices unchanged.
func TestTensorBytes(t *testing.T) {
	f, err := Open(filepath.Join(testdata, "ksmall-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ck, err := safetensors.OpenCheckpoint(filepath.Join(testdata, "ksmall"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for gname, hf := range map[string]string{
		"token_embd.weight":        "model.language_model.embed_tokens.weight",
		"output.weight":            "lm_head.weight",
		"blk.1.ffn_down.weight":    "model.language_model.layers.1.mlp.down_proj.weight",
		"blk.3.attn_q.weight":      "model.language_model.layers.3.self_attn.q_proj.weight",
		"blk.3.attn_k.weight":      "model.language_model.layers.3.self_attn.k_proj.weight",
		"blk.2.ssm_norm.weight":    "model.language_model.layers.2.linear_attn.norm.weight",
		"blk.0.ffn_gate.weight":    "model.language_model.layers.0.mlp.gate_proj.weight",
		"blk.3.attn_output.weight": "model.language_model.layers.3.self_attn.o_proj.weight",
	} {
		g, err := f.Tensor(gname)
		if err != nil {
			t.Fatal(err)
		}
		h, err := ck.Tensor(hf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.Shape(), h.Shape) || !bytes.Equal(g.Data, h.Data) {
			t.Errorf("%s (%v %v) differs from %s (%s %v)", gname, g.Type, g.Shape(), hf, h.DType, h.Shape)
		}
	}
	if _, err := f.Tensor("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	f.Close()
	if _, err := f.Tensor("token_embd.weight"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// allValues holds one value of every type, arrays of every element type,
// empty arrays and arrays of arrays.
func allValues() []KV {
	return []KV{
		{"u8", uint8(200)}, {"i8", int8(-5)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(1.5)}, {"b", true}, {"bf", false},
		{"s", "héllo"}, {"empty", ""}, {"u64", uint64(math.MaxUint64)}, {"i64", int64(math.MinInt64)},
		{"f64", math.Pi},
		{"a.u8", []uint8{1, 2, 3}}, {"a.i8", []int8{-1, 2}}, {"a.u16", []uint16{1, 65535}}, {"a.i16", []int16{-1}},
		{"a.u32", []uint32{7}}, {"a.i32", []int32{-7, 7}}, {"a.f32", []float32{0.25, -3}}, {"a.b", []bool{true, false}},
		{"a.s", []string{"a b", "", "ĠĠ"}}, {"a.u64", []uint64{1 << 63}}, {"a.i64", []int64{-1}}, {"a.f64", []float64{1e300}},
		{"a.empty", []int32{}}, {"a.nested", []any{[]int32{1, 2}, []string{"x"}, []any{[]bool{true}}, []float64{}}},
	}
}

// TestRoundTrip writes every value type and a few tensors and reads them
// back.
func TestRoundTrip(t *testing.T) {
	md, err := NewMetadata(allValues()...)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tensors := []Tensor{
		randomTensor(rng, "a", F32, 3, 5),
		randomTensor(rng, "b", Q8_0, 64, 2),
		randomTensor(rng, "c", BF16, 7),
		randomTensor(rng, "d", Q4_K, 256, 3),
		randomTensor(rng, "e", IQ4_XS, 256),
	}
	raw, err := Marshal(md, tensors)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenBytes("mem", raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Metadata().KVs(), md.KVs()) {
		t.Errorf("metadata changed:\n got %v\nwant %v", f.Metadata().KVs(), md.KVs())
	}
	for _, want := range tensors {
		got, err := f.Tensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Type != want.Type || !slices.Equal(got.Dims, want.Dims) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("tensor %s changed", want.Name)
		}
		if got.Offset%DefaultAlignment != 0 {
			t.Errorf("tensor %s at unaligned offset %d", want.Name, got.Offset)
		}
	}
	// A wider alignment is honoured.
	md.Set(KeyAlignment, uint32(256))
	raw, err = Marshal(md, tensors)
	if err != nil {
		t.Fatal(err)
	}
	if f, err = OpenBytes("mem", raw); err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		if ti.Offset%256 != 0 {
			t.Errorf("tensor %s at offset %d with alignment 256", ti.Name, ti.Offset)
		}
	}
}

func randomTensor(rng *rand.Rand, name string, typ GGMLType, dims ...int) Tensor {
	t := Tensor{TensorInfo: TensorInfo{Name: name, Type: typ, Dims: dims}}
	t.Data = make([]byte, t.Elements()/int64(typ.BlockSize())*int64(typ.BlockBytes()))
	for i := range t.Data {
		t.Data[i] = byte(rng.Uint32())
	}
	return t
}

// smallFile is a valid file exercising every part of the format.
func smallFile(t testing.TB) []byte {
	md, err := NewMetadata(allValues()...)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	raw, err := Marshal(md, []Tensor{randomTensor(rng, "w", Q8_0, 32, 2), randomTensor(rng, "v", F16, 3)})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestTruncated cuts a valid file at every byte: each prefix is a clear
// error, never a panic.
func TestTruncated(t *testing.T) {
	raw := smallFile(t)
	f, err := OpenBytes("whole", raw)
	if err != nil {
		t.Fatal(err)
	}
	// ggml pads the last tensor too; cuts in that padding lose nothing.
	end := int(f.parts[0].h.dataEnd)
	if end >= len(raw) || len(raw)-end >= DefaultAlignment {
		t.Fatalf("data ends at %d of %d bytes: want some padding after it", end, len(raw))
	}
	for n := range len(raw) {
		_, err := OpenBytes("cut", raw[:n])
		if n >= end {
			if err != nil {
				t.Fatalf("cut at %d, in the padding after the data: %v", n, err)
			}
			continue
		}
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("cut at %d of %d bytes: %v, want a *FormatError", n, len(raw), err)
		}
	}
}

// builder writes raw headers, for files the Writer refuses to make.
type builder struct{ b []byte }

func (b *builder) u32(v uint32) *builder  { b.b = binary.LittleEndian.AppendUint32(b.b, v); return b }
func (b *builder) u64(v uint64) *builder  { b.b = binary.LittleEndian.AppendUint64(b.b, v); return b }
func (b *builder) str(s string) *builder  { b.u64(uint64(len(s))); b.b = append(b.b, s...); return b }
func (b *builder) raw(p ...byte) *builder { b.b = append(b.b, p...); return b }

// head starts a file with the given counts.
func head(tensors, kvs uint64) *builder {
	b := &builder{b: []byte(Magic)}
	return b.u32(3).u64(tensors).u64(kvs)
}

// tensor appends a tensor info.
func (b *builder) tensor(name string, typ uint32, off uint64, dims ...uint64) *builder {
	b.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		b.u64(d)
	}
	return b.u32(typ).u64(off)
}

// data pads to 32 bytes and appends n zero bytes.
func (b *builder) data(n int) []byte {
	for len(b.b)%32 != 0 {
		b.b = append(b.b, 0)
	}
	return append(b.b, make([]byte, n)...)
}

// badFile is a malformed file and what its error must say.
type badFile struct {
	name string
	file []byte
	want string
}

// badFiles returns one file for each way the format can be broken.
func badFiles() []badFile {
	return []badFile{
		{"empty", nil, "not a GGUF file"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), "not a GGUF file"},
		{"version 1", []byte("GGUF\x01\x00\x00\x00"), "version 1 is not supported"},
		{"big-endian", []byte("GGUF\x00\x00\x00\x03"), "big-endian"},
		{"version 9", []byte("GGUF\x09\x00\x00\x00"), "unknown GGUF version 9"},
		{"no counts", []byte("GGUF\x03\x00\x00\x00\x00"), "truncated"},
		{"kv count", head(0, 1<<60).b, "metadata pairs cannot fit"},
		{"tensor count", head(1<<40, 0).b, "tensor infos cannot fit"},
		{"long key", head(0, 1).u64(1 << 40).raw(make([]byte, 20)...).b, "truncated: the key of metadata pair 0 needs 1099511627776 bytes"},
		{"empty key", head(0, 1).str("").u32(0).raw(1).b, "empty key"},
		{"duplicate key", head(0, 2).str("k").u32(0).raw(1).str("k").u32(0).raw(1).b, `key "k": key given twice`},
		{"unknown type", head(0, 1).str("k").u32(13).raw(0, 0, 0, 0).b, `key "k": unknown value type 13`},
		{"long string", head(0, 1).str("k").u32(8).u64(1 << 62).b, "truncated: a string needs 4611686018427387904 bytes"},
		{"bool", head(0, 1).str("k").u32(7).raw(2).b, "bool byte is 2"},
		{"bool array", head(0, 1).str("k").u32(9).u32(7).u64(2).raw(1, 3).b, "bool byte at index 1 is 3"},
		{"array elem", head(0, 1).str("k").u32(9).u32(99).u64(0).b, "array of unknown value type 99"},
		{"array count", head(0, 1).str("k").u32(9).u32(12).u64(1 << 61).b, "an array of 2305843009213693952 float64 values"},
		{"array count overflow", head(0, 1).str("k").u32(9).u32(8).u64(math.MaxUint64).b, "longer than any file"},
		{"nested", nested(9), "nested more than 8 deep"},
		{"alignment", head(0, 1).str(KeyAlignment).u32(4).u32(48).b, "not a power of two"},
		{"alignment type", head(0, 1).str(KeyAlignment).u32(8).str("x").b, "not a power of two"},
		{"empty name", head(1, 0).tensor("", 0, 0, 1).data(4), "empty name"},
		{"long name", head(1, 0).tensor(strings.Repeat("n", 64), 0, 0, 1).data(4), "longer than 63"},
		{"dims", head(1, 0).tensor("t", 0, 0, 1, 1, 1, 1, 1).data(4), "5 dimensions, more than 4"},
		{"huge dims", head(1, 0).tensor("t", 0, 0, 1<<40, 1<<40).data(4), "more than 2^63 values"},
		{"dim sign", head(1, 0).tensor("t", 0, 0, 1<<63).data(4), "more than 2^63 values"},
		{"bytes overflow", head(1, 0).tensor("t", 0, 0, 1<<31, 1<<31).data(4), "more than 2^63 bytes"},
		{"unknown tensor type", head(1, 0).tensor("t", 4, 0, 1).data(4), `tensor "t": unknown ggml type 4`},
		{"block", head(1, 0).tensor("t", 8, 0, 33).data(64), "rows of 33 values are not whole Q8_0 blocks of 32"},
		{"misaligned", head(1, 0).tensor("t", 0, 4, 1).data(64), "data offset 4 is not a multiple of the alignment 32"},
		{"past end", head(1, 0).tensor("t", 0, 32, 1).data(32), "run past the end"},
		{"offset range", head(1, 0).tensor("t", 0, 1<<63, 1).data(32), "out of range"},
		{"truncated data", head(1, 0).tensor("t", 0, 0, 16).data(60), "truncated: 64 bytes at data offset 0"},
		{"overlap", head(2, 0).tensor("a", 0, 0, 16).tensor("b", 0, 32, 16).data(96), `tensor "b": bytes [32, 96) overlap those of tensor "a" [0, 64)`},
		{"duplicate tensor", head(2, 0).tensor("a", 0, 0, 1).tensor("a", 0, 32, 1).data(64), "given twice"},
		{"no data section", head(1, 0).tensor("a", 0, 0, 1).b, "truncated"},
	}
}

// TestBadFiles checks that malformed files give a *FormatError saying what
// is wrong.
func TestBadFiles(t *testing.T) {
	for _, c := range badFiles() {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenBytes("bad.gguf", c.file)
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want a *FormatError", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "gguf: bad.gguf: ") {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// nested returns a file whose one key holds arrays nested depth deep.
func nested(depth int) []byte {
	b := head(0, 1).str("k").u32(uint32(TypeArray))
	for range depth - 1 {
		b.u32(uint32(TypeArray)).u64(1)
	}
	return b.u32(uint32(TypeUint8)).u64(0).b
}

// TestNestingLimit accepts arrays nested as deep as the limit.
func TestNestingLimit(t *testing.T) {
	f, err := OpenBytes("deep", nested(maxArrayDepth))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Metadata().Get("k")
	for range maxArrayDepth - 1 {
		a, ok := v.([]any)
		if !ok || len(a) != 1 {
			t.Fatalf("not a one-element array of arrays: %T %v", v, v)
		}
		v = a[0]
	}
	if a, ok := v.([]uint8); !ok || len(a) != 0 {
		t.Fatalf("innermost: %T %v", v, v)
	}
	if _, err := Marshal(f.Metadata(), nil); err != nil {
		t.Fatal(err)
	}
	too, _ := NewMetadata(KV{"k", []any{v}})
	for range maxArrayDepth - 1 {
		v, _ := too.Get("k")
		too.Set("k", []any{v})
	}
	if _, err := Marshal(too, nil); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("writing arrays nested too deep: %v", err)
	}
}

// TestWriter streams tensors in pieces, out of order, and checks what it
// refuses.
func TestWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.gguf")
	md, _ := NewMetadata(KV{"general.architecture", "test"})
	rng := rand.New(rand.NewPCG(5, 6))
	want := []Tensor{randomTensor(rng, "x", Q6_K, 256, 4), randomTensor(rng, "y", F32, 10)}
	infos := []TensorInfo{want[0].TensorInfo, want[1].TensorInfo}
	w, err := NewWriter(path, md, infos)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.WriteTensor("y", want[1].Data); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("y", want[1].Data); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Errorf("second write: %v", err)
	}
	if err := w.WriteTensor("z", nil); err == nil || !strings.Contains(err.Error(), "not declared") {
		t.Errorf("undeclared: %v", err)
	}
	tw, err := w.TensorWriter("x")
	if err != nil {
		t.Fatal(err)
	}
	for p := want[0].Data; len(p) > 0; p = p[min(len(p), 100):] {
		if _, err := tw.Write(p[:min(len(p), 100)]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write([]byte{0}); err == nil {
		t.Error("writing past the tensor's size succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, x := range want {
		got, err := f.Tensor(x.Name)
		if err != nil || !bytes.Equal(got.Data, x.Data) {
			t.Errorf("tensor %s: %v", x.Name, err)
		}
	}
	same, err := Marshal(md, want)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(path); !bytes.Equal(raw, same) {
		t.Error("the Writer's file differs from Marshal's bytes")
	}

	// An incomplete file is discarded.
	w, err = NewWriter(filepath.Join(dir, "partial.gguf"), md, infos)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "x" has 0 of its 840 bytes`) {
		t.Errorf("closing an incomplete file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	for _, bad := range [][]TensorInfo{
		{{Name: "q", Type: Q4_K, Dims: []int{100}}},
		{{Name: strings.Repeat("n", 64), Type: F32, Dims: []int{1}}},
		{{Name: "a", Type: F32, Dims: []int{1}}, {Name: "a", Type: F32, Dims: []int{1}}},
		{{Name: "u", Type: 5, Dims: []int{1}}},
	} {
		if _, err := NewWriter(filepath.Join(dir, "bad.gguf"), md, bad); err == nil {
			t.Errorf("NewWriter accepted %+v", bad)
		}
	}
}

// TestSplit opens a model cut into three files by any of its parts, and
// refuses inconsistent sets.
func TestSplit(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	tensors := []Tensor{randomTensor(rng, "a", F32, 4), randomTensor(rng, "b", Q8_0, 32), randomTensor(rng, "c", F16, 2, 2)}
	write := func(i, n int, md *Metadata, ts []Tensor) {
		raw, err := Marshal(md, ts)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(SplitPath(filepath.Join(dir, "m"), i, n), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	splitMD := func(no, count uint16, kvs ...KV) *Metadata {
		md, _ := NewMetadata(append([]KV{{KeySplitNo, no}, {KeySplitCount, count}, {KeySplitTensors, int32(3)}}, kvs...)...)
		return md
	}
	write(1, 3, splitMD(0, 3, KV{"general.name", "split"}), tensors[:1])
	write(2, 3, splitMD(1, 3), tensors[1:2])
	write(3, 3, splitMD(2, 3), tensors[2:])
	for _, open := range []string{SplitPath(filepath.Join(dir, "m"), 1, 3), SplitPath(filepath.Join(dir, "m"), 3, 3), dir} {
		f, err := Open(open)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Paths()) != 3 || len(f.Tensors()) != 3 {
			t.Errorf("%s: %d parts, %d tensors", open, len(f.Paths()), len(f.Tensors()))
		}
		if name, _ := f.Metadata().String("general.name"); name != "split" {
			t.Errorf("metadata from part %q", name)
		}
		for _, want := range tensors {
			if got, err := f.Tensor(want.Name); err != nil || !bytes.Equal(got.Data, want.Data) {
				t.Errorf("tensor %s: %v", want.Name, err)
			}
		}
		f.Close()
	}
	write(2, 3, splitMD(2, 3), tensors[1:2])
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "split.no is 2, but this is part 1") {
		t.Errorf("wrong split.no: %v", err)
	}
	write(2, 3, splitMD(1, 3), tensors[:1])
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "also in an earlier part") {
		t.Errorf("tensor in two parts: %v", err)
	}
	write(2, 3, splitMD(1, 3), nil)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "says 3 tensors, the parts hold 2") {
		t.Errorf("tensor count: %v", err)
	}
	os.Remove(SplitPath(filepath.Join(dir, "m"), 2, 3))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("missing part: %v", err)
	}
	// One part renamed to look whole is refused.
	raw, _ := Marshal(splitMD(0, 3), tensors[:1])
	lone := filepath.Join(t.TempDir(), "lone.gguf")
	os.WriteFile(lone, raw, 0o644)
	if _, err := Open(lone); err == nil || !strings.Contains(err.Error(), "part of a split model of 3 files") {
		t.Errorf("lone part: %v", err)
	}
}

// TestLocate finds the model file of a path.
func TestLocate(t *testing.T) {
	dir := t.TempDir()
	raw := smallFile(t)
	mk := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, ok, err := Locate(dir); ok || err != nil {
		t.Errorf("empty directory: %v %v", ok, err)
	}
	model := mk("model.gguf", raw)
	mk("mmproj-model.gguf", raw)
	if got, ok, err := Locate(dir); !ok || err != nil || got != model {
		t.Errorf("Locate(dir) = %q %v %v", got, ok, err)
	}
	if got, ok, err := Locate(model); !ok || err != nil || got != model {
		t.Errorf("Locate(file) = %q %v %v", got, ok, err)
	}
	if _, ok, err := Locate(mk("x.safetensors", []byte("{}"))); ok || err != nil {
		t.Errorf("a safetensors file: %v %v", ok, err)
	}
	mk("other-00001-of-00002.gguf", raw)
	mk("other-00002-of-00002.gguf", raw)
	if _, _, err := Locate(dir); err == nil || !strings.Contains(err.Error(), "holds 2 GGUF models (model.gguf, other-00001-of-00002.gguf)") {
		t.Errorf("two models: %v", err)
	}
	os.Remove(model)
	if got, ok, _ := Locate(dir); !ok || filepath.Base(got) != "other-00001-of-00002.gguf" {
		t.Errorf("split model: %q %v", got, ok)
	}
	mk("config.json", []byte("{}"))
	if _, ok, err := Locate(dir); ok || err != nil {
		t.Errorf("a checkpoint directory: %v %v", ok, err)
	}
}

// FuzzParse feeds arbitrary bytes to the parser. Whatever the input,
// parsing must not panic; an error must be a *FormatError; a file that
// parses must hand out only in-bounds, non-overlapping, aligned tensor
// views whose sizes match their types and dimensions, and must survive a
// round trip through Marshal. The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add(smallFile(f))
	f.Add(head(1, 1).str("general.alignment").u32(4).u32(64).tensor("t", 0, 0, 2, 3).data(64))
	f.Add(nested(3))
	for _, c := range badFiles() {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := OpenBytes("fuzz", data)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			return
		}
		var tensors []Tensor
		type span struct{ lo, hi int64 }
		var spans []span
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		hi := lo + uintptr(len(data))
		for _, ti := range fl.Tensors() {
			x, err := fl.Tensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			if want := x.Elements() / int64(x.Type.BlockSize()) * int64(x.Type.BlockBytes()); int64(len(x.Data)) != want || x.Size != want {
				t.Fatalf("tensor %q: %d bytes for %v %v", x.Name, len(x.Data), x.Type, x.Dims)
			}
			if x.Offset%int64(fl.Alignment()) != 0 {
				t.Fatalf("tensor %q at unaligned offset %d", x.Name, x.Offset)
			}
			if len(x.Data) > 0 {
				p := uintptr(unsafe.Pointer(&x.Data[0]))
				if p < lo || p+uintptr(cap(x.Data)) > hi {
					t.Fatalf("tensor %q view outside the file", x.Name)
				}
				spans = append(spans, span{x.Offset, x.Offset + x.Size})
			}
			tensors = append(tensors, x)
		}
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(spans); i++ {
			if spans[i].lo < spans[i-1].hi {
				t.Fatalf("overlapping tensors accepted: %v", spans)
			}
		}
		// Marshal lays the tensors out afresh, with the alignment as a
		// uint32 (the parser also takes other integer types).
		md := fl.Metadata()
		if v, ok := md.Get(KeyAlignment); ok {
			if _, isU32 := v.(uint32); !isU32 {
				md.Set(KeyAlignment, uint32(fl.Alignment()))
			}
		}
		again, err := Marshal(md, tensors)
		if err != nil {
			t.Fatalf("Marshal of a parsed file: %v", err)
		}
		fl2, err := OpenBytes("again", again)
		if err != nil {
			t.Fatalf("re-parse after Marshal: %v", err)
		}
		var tensors2 []Tensor
		for _, ti := range fl2.Tensors() {
			y, err := fl2.Tensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			tensors2 = append(tensors2, y)
		}
		// Compared as bytes: metadata may hold NaNs.
		third, err := Marshal(fl2.Metadata(), tensors2)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("the file changed in a second round trip (%v)", err)
		}
		if fl2.Metadata().Len() != md.Len() || len(tensors2) != len(tensors) {
			t.Fatalf("round trip kept %d of %d keys, %d of %d tensors", fl2.Metadata().Len(), md.Len(), len(tensors2), len(tensors))
		}
		for i, x := range tensors {
			y := tensors2[i]
			if y.Name != x.Name || y.Type != x.Type || !slices.Equal(y.Dims, x.Dims) || !bytes.Equal(y.Data, x.Data) {
				t.Fatalf("tensor %q changed in the round trip", x.Name)
			}
		}
	})
}
