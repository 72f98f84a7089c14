package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
)

// layout is the planned shape of a file: its header bytes and where each
// tensor goes in the data section.
type layout struct {
	header    []byte // everything before the data section, padded to the alignment
	alignment int64
	index     map[string]int // tensor name -> position in infos
	infos     []TensorInfo   // with Offset and Size filled in
	dataSize  int64          // the data section, the last tensor's padding included
}

// plan validates the metadata and tensor infos and lays them out as ggml
// does: tensors in the order given, each at the next aligned offset.
func plan(md *Metadata, tensors []TensorInfo) (*layout, error) {
	if md == nil {
		md = &Metadata{}
	}
	l := &layout{alignment: DefaultAlignment, index: make(map[string]int, len(tensors))}
	if v, ok := md.Get(KeyAlignment); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a > 1<<30 || a&(a-1) != 0 {
			return nil, fmt.Errorf("gguf: %s must be a uint32 power of two up to 2^30, got %T %v", KeyAlignment, v, v)
		}
		l.alignment = int64(a)
	}
	var off int64
	for i, t := range tensors {
		if err := checkInfo(t); err != nil {
			return nil, err
		}
		if _, dup := l.index[t.Name]; dup {
			return nil, fmt.Errorf("gguf: tensor %s given twice", quote(t.Name))
		}
		t.Dims = append([]int(nil), t.Dims...)
		t.Size = t.Elements() / int64(t.Type.BlockSize()) * int64(t.Type.BlockBytes())
		t.Offset = off
		if t.Size > math.MaxInt64/2-off {
			return nil, fmt.Errorf("gguf: tensor %s: the file would exceed 2^62 bytes", quote(t.Name))
		}
		off = alignUp(off+t.Size, l.alignment)
		l.index[t.Name] = i
		l.infos = append(l.infos, t)
	}
	l.dataSize = off
	hdr, err := encodeHeader(md, l.infos)
	if err != nil {
		return nil, err
	}
	if len(hdr) > MaxHeaderBytes {
		return nil, fmt.Errorf("gguf: metadata and tensor infos of %d bytes exceed the %d-byte limit", len(hdr), MaxHeaderBytes)
	}
	if len(tensors) > 0 {
		for int64(len(hdr))%l.alignment != 0 {
			hdr = append(hdr, 0)
		}
	}
	l.header = hdr
	return l, nil
}

// checkInfo checks a tensor info given to the writer.
func checkInfo(t TensorInfo) error {
	switch {
	case t.Name == "":
		return fmt.Errorf("gguf: a tensor has an empty name")
	case len(t.Name) > MaxNameLen:
		return fmt.Errorf("gguf: tensor %s: name of %d bytes is longer than %d", quote(t.Name), len(t.Name), MaxNameLen)
	case len(t.Dims) > MaxDims:
		return fmt.Errorf("gguf: tensor %s: %d dimensions, more than %d", quote(t.Name), len(t.Dims), MaxDims)
	case !t.Type.Known():
		return fmt.Errorf("gguf: tensor %s: unknown ggml type %d", quote(t.Name), uint32(t.Type))
	}
	n := int64(1)
	for _, d := range t.Dims {
		if d < 0 || (d > 0 && n > math.MaxInt64/4/int64(d)) {
			return fmt.Errorf("gguf: tensor %s: bad dimensions %v", quote(t.Name), t.Dims)
		}
		n *= int64(d)
	}
	if len(t.Dims) > 0 && t.Dims[0]%t.Type.BlockSize() != 0 {
		return fmt.Errorf("gguf: tensor %s: rows of %d values are not whole %v blocks of %d", quote(t.Name), t.Dims[0], t.Type, t.Type.BlockSize())
	}
	if len(t.Dims) == 0 && t.Type.BlockSize() != 1 {
		return fmt.Errorf("gguf: tensor %s: a scalar cannot be %v", quote(t.Name), t.Type)
	}
	return nil
}

// encodeHeader encodes magic, version, counts, metadata and tensor infos.
func encodeHeader(md *Metadata, infos []TensorInfo) ([]byte, error) {
	le := binary.LittleEndian
	b := []byte(Magic)
	b = le.AppendUint32(b, Version)
	b = le.AppendUint64(b, uint64(len(infos)))
	b = le.AppendUint64(b, uint64(md.Len()))
	for _, kv := range md.kvs {
		t, err := TypeOf(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
		b = appendString(b, kv.Key)
		b = le.AppendUint32(b, uint32(t))
		if b, err = appendValue(b, kv.Value, 0); err != nil {
			return nil, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
	}
	for _, t := range infos {
		b = appendString(b, t.Name)
		b = le.AppendUint32(b, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			b = le.AppendUint64(b, uint64(d))
		}
		b = le.AppendUint32(b, uint32(t.Type))
		b = le.AppendUint64(b, uint64(t.Offset))
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue encodes a value (without its type code); depth counts the
// arrays it is inside.
func appendValue(b []byte, v any, depth int) ([]byte, error) {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		return append(b, x), nil
	case int8:
		return append(b, byte(x)), nil
	case uint16:
		return le.AppendUint16(b, x), nil
	case int16:
		return le.AppendUint16(b, uint16(x)), nil
	case uint32:
		return le.AppendUint32(b, x), nil
	case int32:
		return le.AppendUint32(b, uint32(x)), nil
	case float32:
		return le.AppendUint32(b, math.Float32bits(x)), nil
	case bool:
		if x {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case string:
		return appendString(b, x), nil
	case uint64:
		return le.AppendUint64(b, x), nil
	case int64:
		return le.AppendUint64(b, uint64(x)), nil
	case float64:
		return le.AppendUint64(b, math.Float64bits(x)), nil
	}
	if depth >= maxArrayDepth {
		return nil, fmt.Errorf("arrays nested more than %d deep", maxArrayDepth)
	}
	et, err := elemType(v)
	if err != nil {
		return nil, err
	}
	b = le.AppendUint32(b, uint32(et))
	switch x := v.(type) {
	case []uint8:
		b = le.AppendUint64(b, uint64(len(x)))
		return append(b, x...), nil
	case []string:
		b = le.AppendUint64(b, uint64(len(x)))
		for _, s := range x {
			b = appendString(b, s)
		}
		return b, nil
	case []any:
		b = le.AppendUint64(b, uint64(len(x)))
		for _, e := range x {
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return appendFixed(b, v), nil
}

// appendFixed encodes the count and elements of an array of a fixed-size
// type other than uint8.
func appendFixed(b []byte, v any) []byte {
	le := binary.LittleEndian
	each := func(n int, put func(int)) {
		b = le.AppendUint64(b, uint64(n))
		for i := range n {
			put(i)
		}
	}
	switch x := v.(type) {
	case []int8:
		each(len(x), func(i int) { b = append(b, byte(x[i])) })
	case []uint16:
		each(len(x), func(i int) { b = le.AppendUint16(b, x[i]) })
	case []int16:
		each(len(x), func(i int) { b = le.AppendUint16(b, uint16(x[i])) })
	case []uint32:
		each(len(x), func(i int) { b = le.AppendUint32(b, x[i]) })
	case []int32:
		each(len(x), func(i int) { b = le.AppendUint32(b, uint32(x[i])) })
	case []float32:
		each(len(x), func(i int) { b = le.AppendUint32(b, math.Float32bits(x[i])) })
	case []bool:
		each(len(x), func(i int) {
			if x[i] {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		})
	case []uint64:
		each(len(x), func(i int) { b = le.AppendUint64(b, x[i]) })
	case []int64:
		each(len(x), func(i int) { b = le.AppendUint64(b, uint64(x[i])) })
	case []float64:
		each(len(x), func(i int) { b = le.AppendUint64(b, math.Float64bits(x[i])) })
	}
	return b
}

// Marshal returns the metadata and tensors encoded as one GGUF file, laid
// out as a Writer lays it out.
func Marshal(md *Metadata, tensors []Tensor) ([]byte, error) {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = t.TensorInfo
	}
	l, err := plan(md, infos)
	if err != nil {
		return nil, err
	}
	out := make([]byte, int64(len(l.header))+l.dataSize)
	copy(out, l.header)
	for i, t := range tensors {
		info := l.infos[i]
		if int64(len(t.Data)) != info.Size {
			return nil, fmt.Errorf("gguf: tensor %s needs %d bytes, got %d", quote(t.Name), info.Size, len(t.Data))
		}
		copy(out[int64(len(l.header))+info.Offset:], t.Data)
	}
	return out, nil
}

// Writer writes a GGUF file tensor by tensor, so that a model larger than
// memory can be written: the metadata and the tensors' names, types and
// dimensions are given up front, their data afterwards, in any order. Close
// commits the file atomically; Abort (safe to defer) discards it. Different
// tensors may be written from different goroutines at once.
type Writer struct {
	path  string
	tmp   *os.File
	base  int64 // file offset of the data section
	lay   *layout
	mu    sync.Mutex
	slots []slot
	done  bool
}

// slot tracks how much of one tensor has been written.
type slot struct {
	claimed bool
	written int64
}

// NewWriter starts writing a GGUF file at path with the given metadata
// (which may be nil) and tensors, whose Offset and Size are ignored: the
// writer lays the tensors out in the order given, each aligned.
func NewWriter(path string, md *Metadata, tensors []TensorInfo) (*Writer, error) {
	l, err := plan(md, tensors)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("gguf: create %s: %w", path, err)
	}
	w := &Writer{path: path, tmp: tmp, base: int64(len(l.header)), lay: l, slots: make([]slot, len(l.infos))}
	if _, err := tmp.WriteAt(l.header, 0); err != nil {
		w.Abort()
		return nil, fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := tmp.Truncate(w.base + l.dataSize); err != nil {
		w.Abort()
		return nil, fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return w, nil
}

// Tensors returns the planned tensor infos, with their offsets and sizes.
func (w *Writer) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(w.lay.infos))
	for i, t := range w.lay.infos {
		t.Dims = append([]int(nil), t.Dims...)
		out[i] = t
	}
	return out
}

// claim reserves the named tensor for one writer.
func (w *Writer) claim(name string) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return 0, fmt.Errorf("gguf: write %s: %w", w.path, ErrClosed)
	}
	i, ok := w.lay.index[name]
	if !ok {
		return 0, fmt.Errorf("gguf: write %s: tensor %s was not declared", w.path, quote(name))
	}
	if w.slots[i].claimed {
		return 0, fmt.Errorf("gguf: write %s: tensor %s written twice", w.path, quote(name))
	}
	w.slots[i].claimed = true
	return i, nil
}

// WriteTensor writes all the data of the named tensor at once.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if i, ok := w.lay.index[name]; ok && int64(len(data)) != w.lay.infos[i].Size {
		return fmt.Errorf("gguf: write %s: tensor %s needs %d bytes, got %d", w.path, quote(name), w.lay.infos[i].Size, len(data))
	}
	i, err := w.claim(name)
	if err != nil {
		return err
	}
	if _, err := w.tmp.WriteAt(data, w.base+w.lay.infos[i].Offset); err != nil {
		return fmt.Errorf("gguf: write %s: tensor %s: %w", w.path, quote(name), err)
	}
	w.mu.Lock()
	w.slots[i].written = int64(len(data))
	w.mu.Unlock()
	return nil
}

// TensorWriter returns a writer for the data of the named tensor, to be
// written sequentially in pieces. Exactly the tensor's size must be written
// before Close. The returned writer is not safe for concurrent use.
func (w *Writer) TensorWriter(name string) (io.Writer, error) {
	i, err := w.claim(name)
	if err != nil {
		return nil, err
	}
	info := w.lay.infos[i]
	return &tensorWriter{w: w, i: i, name: name, off: w.base + info.Offset, size: info.Size}, nil
}

// tensorWriter writes one tensor's bytes sequentially.
type tensorWriter struct {
	w         *Writer
	i         int
	name      string
	off, size int64
	n         int64 // bytes written so far
}

func (t *tensorWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > t.size-t.n {
		return 0, fmt.Errorf("gguf: write %s: tensor %s: %d bytes would exceed its %d bytes", t.w.path, quote(t.name), t.n+int64(len(p)), t.size)
	}
	n, err := t.w.tmp.WriteAt(p, t.off+t.n)
	t.n += int64(n)
	t.w.mu.Lock()
	t.w.slots[t.i].written = t.n
	t.w.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("gguf: write %s: tensor %s: %w", t.w.path, quote(t.name), err)
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
		return fmt.Errorf("gguf: close %s: %w", w.path, ErrClosed)
	}
	missing, first := 0, -1
	for i, s := range w.slots {
		if s.written != w.lay.infos[i].Size {
			missing++
			if first < 0 {
				first = i
			}
		}
	}
	w.mu.Unlock()
	if missing > 0 {
		w.Abort()
		t := w.lay.infos[first]
		return fmt.Errorf("gguf: write %s: tensor %s has %d of its %d bytes (%d tensors incomplete); file discarded",
			w.path, quote(t.Name), w.slots[first].written, t.Size, missing)
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
		return fmt.Errorf("gguf: write %s: %w", w.path, err)
	}
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		d.Sync() // best effort: make the rename durable
		d.Close()
	}
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
