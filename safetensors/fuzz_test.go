package safetensors

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"testing"
	"unsafe"
)

// FuzzParseHeader feeds arbitrary headers and data regions to the parser.
// Whatever the input, parsing must not panic; an error must be a
// *FormatError; a file that parses must hand out only in-bounds views whose
// sizes match their dtypes and shapes and that tile the data region, and it
// must survive a round trip through Marshal. The seed corpus is in
// testdata/fuzz/FuzzParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{}`), []byte{})
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`), make([]byte, 8))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[0],"data_offsets":[4,4]}}    `), make([]byte, 4))
	f.Fuzz(func(t *testing.T, hdr, data []byte) {
		file := rawFile(string(hdr), data)
		fl, err := OpenBytes("fuzz", file)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			return
		}
		names := fl.Names()
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) || len(names) != fl.Len() {
			t.Fatalf("names not sorted and unique: %q", names)
		}
		if fl.DataSize() != int64(len(data)) {
			t.Fatalf("data region %d bytes, want %d", fl.DataSize(), len(data))
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(file))) + uintptr(8+len(hdr))
		hi := uintptr(unsafe.Pointer(unsafe.SliceData(file))) + uintptr(len(file))
		var total int64
		tensors := make([]Tensor, 0, len(names))
		for _, name := range names {
			tt, ok := fl.Tensor(name)
			if !ok {
				t.Fatalf("listed tensor %q missing", name)
			}
			if len(tt.Data) != tt.NumElements()*tt.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %s %v", name, len(tt.Data), tt.DType, tt.Shape)
			}
			if len(tt.Data) > 0 {
				p := uintptr(unsafe.Pointer(&tt.Data[0]))
				if p < lo || p+uintptr(cap(tt.Data)) > hi {
					t.Fatalf("tensor %q view outside the data region", name)
				}
			}
			total += int64(len(tt.Data))
			tensors = append(tensors, tt)
		}
		if total != int64(len(data)) {
			t.Fatalf("tensors cover %d bytes of %d", total, len(data))
		}
		again, err := Marshal(tensors, fl.Metadata())
		if err != nil {
			t.Fatalf("Marshal of a parsed file: %v", err)
		}
		fl2, err := OpenBytes("again", again)
		if err != nil {
			t.Fatalf("re-parse after Marshal: %v", err)
		}
		if !maps.Equal(fl2.Metadata(), fl.Metadata()) {
			t.Fatalf("metadata changed in the round trip")
		}
		if !slices.Equal(fl2.Names(), names) {
			t.Fatalf("names changed in the round trip")
		}
		for _, tt := range tensors {
			t2, _ := fl2.Tensor(tt.Name)
			if t2.DType != tt.DType || !slices.Equal(t2.Shape, tt.Shape) || !bytes.Equal(t2.Data, tt.Data) {
				t.Fatalf("tensor %q changed in the round trip", tt.Name)
			}
		}
	})
}
