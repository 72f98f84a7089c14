package safetensors

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile builds file bytes from a literal header and data region.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// withLength builds file bytes whose length prefix is n whatever follows.
func withLength(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

func TestParseErrors(t *testing.T) {
	f32x2 := `"dtype":"F32","shape":[2]`
	cases := []struct {
		name   string
		file   []byte
		tensor string // the tensor the error must name, if any
		msg    string // a part of the message
	}{
		{"empty file", nil, "", "truncated: 0 bytes"},
		{"short file", []byte{1, 2, 3, 4, 5}, "", "truncated: 5 bytes"},
		{"huge header length", withLength(1<<63, "{}"), "", "exceeds the 104857600-byte limit"},
		{"header length over the cap", withLength(MaxHeaderSize+1, "{}"), "", "exceeds"},
		{"header longer than file", withLength(100, "{}"), "", "truncated: header length 100 but only 2 bytes"},
		{"empty header", rawFile("", nil), "", "does not start with '{'"},
		{"header not an object", rawFile("[1,2]", nil), "", "does not start with '{'"},
		{"header not JSON", rawFile(`{"a": `, nil), "", "not JSON"},
		{"header not UTF-8", rawFile("{\"\xff\": 1}", nil), "", "not valid UTF-8"},
		{"trailing garbage", rawFile(`{} x`, nil), "", "trailing data"},
		{"two objects", rawFile(`{}{}`, nil), "", "trailing data"},
		{"entry not an object", rawFile(`{"w": 5}`, nil), "w", "bad header entry"},
		{"missing dtype", rawFile(`{"w":{"shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "missing dtype"},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,8]}}`, make([]byte, 8)), "w", "missing shape"},
		{"null shape", rawFile(`{"w":{"dtype":"F32","shape":null,"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "missing shape"},
		{"missing offsets", rawFile(`{"w":{`+f32x2+`}}`, make([]byte, 8)), "w", "missing data_offsets"},
		{"unknown dtype", rawFile(`{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", `unsupported dtype "Q4_K"`},
		{"sub-byte dtype", rawFile(`{"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, make([]byte, 1)), "w", "unsupported dtype"},
		{"negative dimension", rawFile(`{"w":{"dtype":"F32","shape":[-2,-1],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "negative dimension"},
		{"fractional dimension", rawFile(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "bad header entry"},
		{"dimension beyond int64", rawFile(`{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "bad header entry"},
		{"element count overflow", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "too many elements"},
		{"byte count overflow", rawFile(`{"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}}`, make([]byte, 8)), "w", "too many elements"},
		{"three offsets", rawFile(`{"w":{`+f32x2+`,"data_offsets":[0,8,16]}}`, make([]byte, 8)), "w", "has 3 values"},
		{"negative offsets", rawFile(`{"w":{`+f32x2+`,"data_offsets":[-8,0]}}`, make([]byte, 8)), "w", "negative data_offsets"},
		{"begin after end", rawFile(`{"w":{`+f32x2+`,"data_offsets":[8,0]}}`, make([]byte, 8)), "w", "begin after they end"},
		{"offsets past the data", rawFile(`{"w":{`+f32x2+`,"data_offsets":[0,8]}}`, make([]byte, 6)), "w", "past the end of the 6-byte data region"},
		{"size mismatch", rawFile(`{"w":{`+f32x2+`,"data_offsets":[0,4]}}`, make([]byte, 4)), "w", "needs 8 bytes, but data_offsets [0 4] hold 4"},
		{"overlap", rawFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"b":{`+f32x2+`,"data_offsets":[4,12]}}`, make([]byte, 12)), "b", `overlap tensor "a"`},
		{"same offsets", rawFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"b":{`+f32x2+`,"data_offsets":[0,8]}}`, make([]byte, 8)), "b", `overlap tensor "a"`},
		{"gap", rawFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"b":{`+f32x2+`,"data_offsets":[12,20]}}`, make([]byte, 20)), "b", "gap of 4 unused bytes"},
		{"hole at start", rawFile(`{"a":{`+f32x2+`,"data_offsets":[4,12]}}`, make([]byte, 12)), "a", "gap of 4"},
		{"unused tail", rawFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]}}`, make([]byte, 10)), "", "cover 8 bytes of the 10-byte data region"},
		{"duplicate tensor", rawFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"a":{`+f32x2+`,"data_offsets":[8,16]}}`, make([]byte, 16)), "a", "listed twice"},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), "", "duplicate __metadata__"},
		{"metadata not strings", rawFile(`{"__metadata__":{"format":1}}`, nil), "", "__metadata__: bad header entry"},
		{"empty tensor name", rawFile(`{"":{`+f32x2+`,"data_offsets":[0,8]}}`, make([]byte, 8)), "", "empty name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenBytes("bad.safetensors", c.file)
			if err == nil {
				f.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", err)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, "bad.safetensors") {
				t.Errorf("error %q does not name the file", msg)
			}
			if c.tensor != "" && !strings.Contains(msg, `tensor "`+c.tensor+`"`) {
				t.Errorf("error %q does not name tensor %q", msg, c.tensor)
			}
			if !strings.Contains(msg, c.msg) {
				t.Errorf("error %q does not say %q", msg, c.msg)
			}
		})
	}
}

func TestParseValidEdgeCases(t *testing.T) {
	cases := []struct {
		name  string
		file  []byte
		check func(t *testing.T, f *File)
	}{
		{"no tensors", rawFile(`{}`, nil), func(t *testing.T, f *File) {
			if f.Len() != 0 || f.DataSize() != 0 {
				t.Errorf("got %d tensors, %d data bytes", f.Len(), f.DataSize())
			}
		}},
		{"padded header", rawFile(`{"__metadata__":{"format":"pt"}}      `, nil), func(t *testing.T, f *File) {
			if f.Metadata()["format"] != "pt" {
				t.Errorf("metadata %v", f.Metadata())
			}
		}},
		{"scalar and empty tensors", rawFile(`{"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,7],"data_offsets":[4,4]},"z":{"dtype":"U8","shape":[3,0],"data_offsets":[4,4]}}`, []byte{7, 0, 0, 0}), func(t *testing.T, f *File) {
			s, ok := f.Tensor("s")
			if !ok || s.NumElements() != 1 || len(s.Shape) != 0 || binary.LittleEndian.Uint32(s.Data) != 7 {
				t.Errorf("scalar: %+v", s)
			}
			e, ok := f.Tensor("e")
			if !ok || e.NumElements() != 0 || len(e.Data) != 0 {
				t.Errorf("empty: %+v", e)
			}
		}},
		{"unknown entry fields ignored", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":true}}`, []byte{9}), func(t *testing.T, f *File) {
			if w, ok := f.Tensor("w"); !ok || w.Data[0] != 9 {
				t.Errorf("w: %+v", w)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenBytes("ok.safetensors", c.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c.check(t, f)
		})
	}
}

// TestOpenErrorsNameThePath checks the on-disk path of Open, including a
// file shorter than the length prefix and a truncated data region.
func TestOpenErrorsNameThePath(t *testing.T) {
	dir := t.TempDir()
	good, err := Marshal([]Tensor{{Name: "w", DType: F32, Shape: []int{4}, Data: make([]byte, 16)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, msg string
		data      []byte
	}{
		{"short.safetensors", "truncated: 3 bytes", []byte{1, 2, 3}},
		{"empty.safetensors", "truncated: 0 bytes", nil},
		{"cut.safetensors", `tensor "w": data_offsets [0 16] reach past the end`, good[:len(good)-1]},
		{"nojson.safetensors", "not JSON", rawFile(`{"w`, nil)},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Open(%s) = %v, want an ErrInvalid naming the path and saying %q", c.name, err, c.msg)
		}
	}
	if _, err := Open(filepath.Join(dir, "absent.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(absent) = %v, want ErrNotExist", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open(dir) = %v, want not a regular file", err)
	}
}
