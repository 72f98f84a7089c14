// Package safetensors reads and writes tensors in the safetensors format of
// Hugging Face checkpoints: single files and sharded checkpoints with a
// model.safetensors.index.json.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (plus an optional "__metadata__" object of strings), then the data region
// the offsets point into. Files are memory-mapped where the platform allows,
// and tensors are zero-copy views of the mapping. Every header is validated
// before any tensor is handed out: each tensor lies inside the data region,
// its byte length matches its dtype and shape, and the tensors tile the data
// region exactly. Bad input gives a *FormatError naming the file and tensor.
package safetensors

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sync/atomic"

	"github.com/govinfer/govinfer/internal/mmap"
)

// File is one memory-mapped .safetensors file. Its methods are safe for
// concurrent use; tensor views must not be used after Close.
type File struct {
	path    string
	mem     []byte             // the whole file: a mapping, or heap memory
	release func([]byte) error // unmaps mem; nil for heap memory
	data    []byte             // the data region of mem
	hdr     header
	closed  atomic.Bool
}

// Open maps the safetensors file at path and validates its header. The
// returned File must be closed to release the mapping. The file must not be
// truncated or rewritten in place while it is open.
//
// Where the file fits in memory, its mapping asks for huge pages
// (mmap.AdviseHugePages).
func Open(path string) (*File, error) {
	f, err := open(path)
	if err == nil && f.release != nil {
		mmap.AdviseHugePages(f.mem, int64(len(f.mem)))
	}
	return f, err
}

// open is Open without the advice on pages: a sharded checkpoint gives it
// for all its shards together.
func open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s is not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		// Too short to map usefully (and mapping 0 bytes fails); parse reports it.
		_, _, err := parse(path, make([]byte, size))
		return nil, err
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors: %s: %d bytes is too large for this platform", path, size)
	}
	mem, release, err := mapFile(fd, int(size))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f, err := newFile(path, mem)
	if err != nil {
		if release != nil {
			release(mem)
		}
		return nil, err
	}
	f.release = release
	return f, nil
}

// OpenBytes parses a safetensors file held in memory. Tensor views alias buf,
// which must not change while the File is in use; name is used in errors and
// returned by Path.
func OpenBytes(name string, buf []byte) (*File, error) {
	return newFile(name, buf)
}

func newFile(path string, mem []byte) (*File, error) {
	hdr, start, err := parse(path, mem)
	if err != nil {
		return nil, err
	}
	return &File{path: path, mem: mem, data: mem[start:len(mem):len(mem)], hdr: hdr}, nil
}

// Path returns the path the file was opened from.
func (f *File) Path() string { return f.path }

// Names returns the tensor names in sorted order.
func (f *File) Names() []string { return slices.Clone(f.hdr.names) }

// Len returns the number of tensors in the file.
func (f *File) Len() int { return len(f.hdr.names) }

// Tensor returns a zero-copy view of the named tensor, or false if the file
// has no such tensor or is closed.
func (f *File) Tensor(name string) (Tensor, bool) {
	e, ok := f.hdr.entries[name]
	if !ok || f.closed.Load() {
		return Tensor{}, false
	}
	return Tensor{
		Name:  name,
		DType: e.dtype,
		Shape: slices.Clone(e.shape),
		Data:  f.data[e.begin:e.end:e.end],
	}, true
}

// Info returns the dtype and shape of the named tensor without touching its
// data, or false if the file has no such tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	e, ok := f.hdr.entries[name]
	if !ok {
		return TensorInfo{}, false
	}
	return TensorInfo{Name: name, DType: e.dtype, Shape: slices.Clone(e.shape)}, true
}

// Metadata returns a copy of the header's "__metadata__" strings (nil if
// there are none).
func (f *File) Metadata() map[string]string { return maps.Clone(f.hdr.metadata) }

// DataSize returns the size of the data region in bytes: the sum of the
// tensors' sizes.
func (f *File) DataSize() int64 { return int64(len(f.data)) }

// Close releases the mapping. Tensor views obtained from f must not be used
// afterwards. Closing twice is a no-op.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	if f.release == nil {
		return nil
	}
	if err := f.release(f.mem); err != nil {
		return fmt.Errorf("safetensors: unmap %s: %w", f.path, err)
	}
	return nil
}
