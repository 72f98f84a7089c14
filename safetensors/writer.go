package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// layout is the planned shape of a file: its padded JSON header and where
// each tensor's bytes go in the data region.
type layout struct {
	header   []byte           // JSON padded with spaces so that data starts 8-byte aligned
	offsets  map[string]int64 // data-region offset of each tensor
	sizes    map[string]int64 // byte size of each tensor
	dataSize int64
}

// headerEntry is a tensor record as written to the JSON header.
type headerEntry struct {
	DType   DType    `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// plan validates infos and lays them out. Header keys are sorted by name;
// the data is ordered by element size (largest first), then name, so that
// every tensor starts aligned to its element size.
func plan(infos []TensorInfo, metadata map[string]string) (layout, error) {
	l := layout{offsets: make(map[string]int64, len(infos)), sizes: make(map[string]int64, len(infos))}
	for _, info := range infos {
		n, err := byteSize(info)
		if err != nil {
			return layout{}, err
		}
		if _, dup := l.sizes[info.Name]; dup {
			return layout{}, fmt.Errorf("safetensors: tensor %s given twice", quote(info.Name))
		}
		l.sizes[info.Name] = n
	}
	order := slices.Clone(infos)
	slices.SortFunc(order, func(a, b TensorInfo) int {
		if c := cmp.Compare(b.DType.Size(), a.DType.Size()); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	obj := make(map[string]any, len(infos)+1)
	if len(metadata) > 0 {
		obj[metadataKey] = metadata
	}
	for _, info := range order {
		shape := info.Shape
		if shape == nil {
			shape = []int{} // a scalar: "shape": [], never null
		}
		n := l.sizes[info.Name]
		l.offsets[info.Name] = l.dataSize
		obj[info.Name] = headerEntry{DType: info.DType, Shape: shape, Offsets: [2]int64{l.dataSize, l.dataSize + n}}
		l.dataSize += n
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil { // map keys come out sorted
		return layout{}, fmt.Errorf("safetensors: encode header: %w", err)
	}
	hdr := bytes.TrimRight(buf.Bytes(), "\n")
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	if len(hdr) > MaxHeaderSize {
		return layout{}, fmt.Errorf("safetensors: header of %d bytes exceeds the %d-byte limit", len(hdr), MaxHeaderSize)
	}
	l.header = hdr
	return l, nil
}

// prefix returns the 8-byte length and the header: the bytes before the data.
func (l layout) prefix() []byte {
	p := make([]byte, 8, 8+len(l.header))
	binary.LittleEndian.PutUint64(p, uint64(len(l.header)))
	return append(p, l.header...)
}

// tensorInfos checks that each tensor's data matches its dtype and shape and
// returns the tensors' infos.
func tensorInfos(tensors []Tensor) ([]TensorInfo, error) {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		if err := checkTensorSize(t.Name, t.DType, t.Shape, int64(len(t.Data))); err != nil {
			return nil, err
		}
		infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	return infos, nil
}

// Marshal returns the tensors and metadata encoded as one safetensors file,
// laid out as WriteFile lays it out.
func Marshal(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	infos, err := tensorInfos(tensors)
	if err != nil {
		return nil, err
	}
	l, err := plan(infos, metadata)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8+int64(len(l.header))+l.dataSize)
	out = append(out, l.prefix()...)
	out = out[:cap(out)]
	base := 8 + int64(len(l.header))
	for _, t := range tensors {
		copy(out[base+l.offsets[t.Name]:], t.Data)
	}
	return out, nil
}

// WriteFile writes the tensors and metadata (which may be nil) to a
// safetensors file at path. The file appears atomically: it is written to a
// temporary file in the same directory and renamed into place.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	infos, err := tensorInfos(tensors)
	if err != nil {
		return err
	}
	w, err := NewWriter(path, infos, metadata)
	if err != nil {
		return err
	}
	defer w.Abort()
	for _, t := range tensors {
		if err := w.WriteTensor(t.Name, t.Data); err != nil {
			return err
		}
	}
	return w.Close()
}

// Writer writes a safetensors file tensor by tensor, so that a checkpoint
// larger than memory can be written: the tensors' names, dtypes and shapes
// are given up front, their data afterwards, in any order. Close commits the
// file atomically; Abort (safe to defer) discards it. Different tensors may
// be written from different goroutines at once.
type Writer struct {
	path  string
	tmp   *os.File
	base  int64 // file offset of the data region
	lay   layout
	mu    sync.Mutex
	slots map[string]*slot
	done  bool
}

// slot tracks how much of one tensor has been written.
type slot struct {
	claimed bool
	written int64
}

// NewWriter starts writing a safetensors file at path holding tensors
// described by infos, with the given metadata (which may be nil).
func NewWriter(path string, infos []TensorInfo, metadata map[string]string) (*Writer, error) {
	l, err := plan(infos, metadata)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("safetensors: create %s: %w", path, err)
	}
	w := &Writer{path: path, tmp: tmp, base: 8 + int64(len(l.header)), lay: l, slots: make(map[string]*slot, len(infos))}
	for _, info := range infos {
		w.slots[info.Name] = &slot{}
	}
	if _, err := tmp.WriteAt(l.prefix(), 0); err != nil {
		w.Abort()
		return nil, fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	if err := tmp.Truncate(w.base + l.dataSize); err != nil {
		w.Abort()
		return nil, fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	return w, nil
}

// claim reserves the named tensor for one writer.
func (w *Writer) claim(name string) (*slot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("safetensors: write %s: %w", w.path, ErrClosed)
	}
	s, ok := w.slots[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: write %s: tensor %s was not declared", w.path, quote(name))
	}
	if s.claimed {
		return nil, fmt.Errorf("safetensors: write %s: tensor %s written twice", w.path, quote(name))
	}
	s.claimed = true
	return s, nil
}

// WriteTensor writes all the data of the named tensor at once.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if n, ok := w.lay.sizes[name]; ok && int64(len(data)) != n {
		return fmt.Errorf("safetensors: write %s: tensor %s needs %d bytes, got %d", w.path, quote(name), n, len(data))
	}
	s, err := w.claim(name)
	if err != nil {
		return err
	}
	if _, err := w.tmp.WriteAt(data, w.base+w.lay.offsets[name]); err != nil {
		return fmt.Errorf("safetensors: write %s: tensor %s: %w", w.path, quote(name), err)
	}
	w.mu.Lock()
	s.written = int64(len(data))
	w.mu.Unlock()
	return nil
}

// TensorWriter returns a writer for the data of the named tensor, to be
// written sequentially in pieces (for tensors too large to hold in memory).
// Exactly the tensor's byte size must be written before Close. The returned
// writer is not safe for concurrent use.
func (w *Writer) TensorWriter(name string) (io.Writer, error) {
	s, err := w.claim(name)
	if err != nil {
		return nil, err
	}
	return &tensorWriter{w: w, s: s, name: name, off: w.base + w.lay.offsets[name], size: w.lay.sizes[name]}, nil
}

// tensorWriter writes one tensor's bytes sequentially.
type tensorWriter struct {
	w         *Writer
	s         *slot
	name      string
	off, size int64
	n         int64 // bytes written so far
}

func (t *tensorWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > t.size-t.n {
		return 0, fmt.Errorf("safetensors: write %s: tensor %s: %d bytes would exceed its %d bytes", t.w.path, quote(t.name), t.n+int64(len(p)), t.size)
	}
	n, err := t.w.tmp.WriteAt(p, t.off+t.n)
	t.n += int64(n)
	t.w.mu.Lock()
	t.s.written = t.n
	t.w.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("safetensors: write %s: tensor %s: %w", t.w.path, quote(t.name), err)
	}
	return n, nil
}

// Close checks that every tensor was written in full, then syncs the file
// and renames it into place. If any tensor is incomplete the file is
// discarded and the error names the tensor.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return fmt.Errorf("safetensors: close %s: %w", w.path, ErrClosed)
	}
	missing, first, firstWritten := 0, "", int64(0)
	for name, s := range w.slots {
		if s.written != w.lay.sizes[name] {
			missing++
			if first == "" || name < first {
				first, firstWritten = name, s.written
			}
		}
	}
	w.mu.Unlock()
	if missing > 0 {
		w.Abort()
		return fmt.Errorf("safetensors: write %s: tensor %s has %d of its %d bytes (%d tensors incomplete); file discarded",
			w.path, quote(first), firstWritten, w.lay.sizes[first], missing)
	}
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	tmpName := w.tmp.Name()
	err := w.tmp.Sync()
	if cerr := w.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmpName, 0o644)
	}
	if err == nil {
		err = os.Rename(tmpName, w.path)
	}
	if err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("safetensors: write %s: %w", w.path, err)
	}
	syncDir(filepath.Dir(w.path))
	return nil
}

// Abort discards the file being written. It does nothing after Close, so it
// is safe to defer.
func (w *Writer) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	err := w.tmp.Close()
	if rerr := os.Remove(w.tmp.Name()); err == nil {
		err = rerr
	}
	return err
}

// syncDir makes a rename in dir durable where the platform supports it; it
// is best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// writeFileAtomic writes data to path through a temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if serr := tmp.Sync(); err == nil {
		err = serr
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}
