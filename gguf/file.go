// Package gguf reads and writes GGUF files, the single-file model format of
// llama.cpp and ollama: version 3 (and 2, the same layout), little-endian.
//
// A file is the magic "GGUF", a version, the tensor and metadata counts,
// the metadata key/value pairs (every value type, arrays nested in arrays
// included), the tensor infos (name, ggml's dimensions innermost first,
// ggml type, offset) and, at the first multiple of general.alignment
// (default 32), the data section holding every tensor at an aligned offset.
// A model cut into NAME-00001-of-0000N.gguf files opens as one File.
//
// Files are memory-mapped and tensors are views of the mapping, used in
// place. The whole header is validated before anything is handed out:
// truncation, counts and lengths the file cannot hold, unknown value or
// tensor types, misaligned, out-of-range or overlapping tensors are each a
// *FormatError naming the file, the place and the key or tensor at fault;
// no input makes the reader panic or allocate much beyond the file's own
// size (FuzzParse).
//
// The package knows the container only; which model a file holds and what
// its names mean is for its readers (package model reads the qwen35
// architecture).
package gguf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/govinfer/govinfer/internal/mmap"
)

// Split-file metadata keys (llama.cpp's gguf-split).
const (
	KeySplitNo      = "split.no"
	KeySplitCount   = "split.count"
	KeySplitTensors = "split.tensors.count"
)

// File is an open GGUF model: one file, or every part of a split one. Its
// methods are safe for concurrent use; tensor views must not be used after
// Close.
type File struct {
	parts   []*part
	md      *Metadata
	tensors []TensorInfo
	where   map[string]loc
	closed  atomic.Bool
}

// part is one file of a model.
type part struct {
	path string
	m    *mmap.Map // nil for bytes given by the caller
	mem  []byte
	h    *header
}

// loc places a tensor: its part and its index there.
type loc struct{ part, index int }

// Tensor is a view of one tensor's bytes in its file.
type Tensor struct {
	TensorInfo
	Data []byte
}

// splitName matches the name of one part of a split model.
var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// SplitPath returns the name of part i (from 1) of n of the model whose
// parts start with prefix: PREFIX-0000i-of-0000n.gguf.
func SplitPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i, n)
}

// Open opens a GGUF model: a .gguf file, any part of a split model (all of
// its parts are opened), or a directory that Locate finds one in.
func Open(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.IsDir() {
		file, ok, err := Locate(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("gguf: no .gguf file in %s", path)
		}
		path = file
	}
	paths := []string{path}
	if m := splitName.FindStringSubmatch(filepath.Base(path)); m != nil {
		n, _ := strconv.Atoi(m[3])
		if n < 1 {
			return nil, fmt.Errorf("gguf: %s: a split model of %d parts", path, n)
		}
		prefix := filepath.Join(filepath.Dir(path), m[1])
		paths = paths[:0]
		for i := 1; i <= n; i++ {
			paths = append(paths, SplitPath(prefix, i, n))
		}
	}
	f := &File{}
	for _, p := range paths {
		m, err := mmap.Open(p)
		if err != nil {
			f.closeParts()
			if errors.Is(err, fs.ErrNotExist) && len(paths) > 1 {
				return nil, fmt.Errorf("gguf: part %s of the split model is missing: %w", p, err)
			}
			return nil, fmt.Errorf("gguf: %w", err)
		}
		f.parts = append(f.parts, &part{path: p, m: m, mem: m.Data})
	}
	var total int64
	for _, p := range f.parts {
		total += int64(len(p.mem))
	}
	for _, p := range f.parts {
		if p.m.Mapped() {
			mmap.AdviseHugePages(p.mem, total)
		}
	}
	if err := f.init(); err != nil {
		f.closeParts()
		return nil, err
	}
	return f, nil
}

// OpenBytes parses a single GGUF file held in memory. Tensor views alias
// buf, which must not change while the File is in use; name is used in
// errors.
func OpenBytes(name string, buf []byte) (*File, error) {
	f := &File{parts: []*part{{path: name, mem: buf}}}
	if err := f.init(); err != nil {
		return nil, err
	}
	return f, nil
}

// init parses every part and joins their tensors.
func (f *File) init() error {
	for _, p := range f.parts {
		h, err := parseHeader(p.path, p.mem)
		if err != nil {
			return err
		}
		p.h = h
	}
	f.md = f.parts[0].h.md
	if err := f.checkSplit(); err != nil {
		return err
	}
	f.where = map[string]loc{}
	for pi, p := range f.parts {
		for ti, t := range p.h.tensors {
			if _, dup := f.where[t.Name]; dup {
				return &FormatError{Path: p.path, Offset: -1, Tensor: t.Name, Msg: "tensor is also in an earlier part"}
			}
			f.where[t.Name] = loc{pi, ti}
			f.tensors = append(f.tensors, t)
		}
	}
	if n, err := f.md.Int(KeySplitTensors); err == nil && n != int64(len(f.tensors)) {
		return &FormatError{Path: f.parts[0].path, Offset: -1, Key: KeySplitTensors,
			Msg: fmt.Sprintf("says %d tensors, the parts hold %d", n, len(f.tensors))}
	}
	return nil
}

// checkSplit checks that each part knows its place in a split model.
func (f *File) checkSplit() error {
	n := len(f.parts)
	for i, p := range f.parts {
		no, errNo := p.h.md.Int(KeySplitNo)
		count, errCount := p.h.md.Int(KeySplitCount)
		if n == 1 && errors.Is(errNo, ErrNoKey) && errors.Is(errCount, ErrNoKey) {
			return nil
		}
		fail := func(format string, args ...any) error {
			return &FormatError{Path: p.path, Offset: -1, Msg: fmt.Sprintf(format, args...)}
		}
		switch {
		case errCount != nil && n > 1:
			return fail("part %d of %d has no usable %s: %v", i+1, n, KeySplitCount, errCount)
		case errCount == nil && count != int64(n):
			if n == 1 {
				return fail("is part of a split model of %d files (%s = %d): open it by its NAME-%05d-of-%05d.gguf name",
					count, KeySplitCount, count, 1, count)
			}
			return fail("%s is %d, but the model has %d parts", KeySplitCount, count, n)
		case errNo == nil && no != int64(i):
			return fail("%s is %d, but this is part %d (from 0)", KeySplitNo, no, i)
		}
	}
	return nil
}

// Metadata returns the model's key/value pairs (those of the first part of
// a split model).
func (f *File) Metadata() *Metadata { return f.md }

// Paths returns the files of the model, in part order.
func (f *File) Paths() []string {
	out := make([]string, len(f.parts))
	for i, p := range f.parts {
		out[i] = p.path
	}
	return out
}

// Version returns the format version of the (first) file.
func (f *File) Version() int { return int(f.parts[0].h.version) }

// Alignment returns the data alignment of the (first) file.
func (f *File) Alignment() int { return f.parts[0].h.alignment }

// Tensors returns the infos of every tensor, in file (and part) order.
func (f *File) Tensors() []TensorInfo {
	out := slices.Clone(f.tensors)
	for i := range out {
		out[i].Dims = slices.Clone(out[i].Dims)
	}
	return out
}

// Has reports whether the model holds the named tensor.
func (f *File) Has(name string) bool {
	_, ok := f.where[name]
	return ok
}

// Info returns the named tensor's info; the error wraps ErrNotFound if the
// model has no such tensor.
func (f *File) Info(name string) (TensorInfo, error) {
	l, ok := f.where[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("gguf: tensor %s in %s: %w", quote(name), f.parts[0].path, ErrNotFound)
	}
	t := f.parts[l.part].h.tensors[l.index]
	t.Dims = slices.Clone(t.Dims)
	return t, nil
}

// Tensor returns a zero-copy view of the named tensor's bytes. The error
// wraps ErrNotFound if there is no such tensor and ErrClosed after Close.
func (f *File) Tensor(name string) (Tensor, error) {
	t, err := f.Info(name)
	if err != nil {
		return Tensor{}, err
	}
	if f.closed.Load() {
		return Tensor{}, fmt.Errorf("gguf: tensor %s in %s: %w", quote(name), f.parts[0].path, ErrClosed)
	}
	p := f.parts[f.where[name].part]
	start := p.h.dataStart + t.Offset
	return Tensor{TensorInfo: t, Data: p.mem[start : start+t.Size : start+t.Size]}, nil
}

// Evict tells the operating system that the named tensor's bytes are not
// needed for now: where the file is memory-mapped, its pages leave the
// process's resident memory and are read again from the file if the tensor
// is used later. A loader that converts a tensor evicts the original so
// that only the converted copy stays resident. Unknown names are ignored.
func (f *File) Evict(name string) {
	l, ok := f.where[name]
	if !ok || f.closed.Load() {
		return
	}
	p := f.parts[l.part]
	if p.m == nil {
		return
	}
	t := p.h.tensors[l.index]
	start := p.h.dataStart + t.Offset
	p.m.Evict(p.mem[start : start+t.Size])
}

// TensorBytes returns the total size of the tensors.
func (f *File) TensorBytes() int64 {
	var n int64
	for _, t := range f.tensors {
		n += t.Size
	}
	return n
}

// Close releases the files. Tensor views must not be used afterwards.
// Closing twice is a no-op.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	return f.closeParts()
}

func (f *File) closeParts() error {
	var errs []error
	for _, p := range f.parts {
		if p.m != nil {
			if err := p.m.Close(); err != nil {
				errs = append(errs, fmt.Errorf("gguf: unmap %s: %w", p.path, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Locate reports whether path names a GGUF model and returns the file to
// Open: path itself when it is a file starting with the GGUF magic; for a
// directory, its one model's .gguf file (the first part of a split one),
// unless the directory holds a Hugging Face checkpoint (config.json), which
// takes precedence. Files named mmproj* (vision projectors) are not models.
// A directory holding several GGUF models is an error naming them.
func Locate(path string) (string, bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", false, fmt.Errorf("gguf: %w", err)
	}
	if !st.IsDir() {
		ok, err := hasMagic(path)
		return path, ok, err
	}
	if _, err := os.Stat(filepath.Join(path, "config.json")); err == nil {
		return "", false, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", false, fmt.Errorf("gguf: %w", err)
	}
	models := map[string]string{} // model key -> file to open
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.EqualFold(filepath.Ext(name), ".gguf") || strings.HasPrefix(strings.ToLower(name), "mmproj") {
			continue
		}
		key, file := name, name
		if m := splitName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[3])
			key, file = m[1], filepath.Base(SplitPath(m[1], 1, n))
		}
		models[key] = file
	}
	switch len(models) {
	case 0:
		return "", false, nil
	case 1:
		for _, file := range models {
			return filepath.Join(path, file), true, nil
		}
	}
	files := make([]string, 0, len(models))
	for _, file := range models {
		files = append(files, file)
	}
	slices.Sort(files)
	return "", false, fmt.Errorf("gguf: %s holds %d GGUF models (%s): name the file to use", path, len(files), strings.Join(files, ", "))
}

// hasMagic reports whether the file at path starts with the GGUF magic.
func hasMagic(path string) (bool, error) {
	fd, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("gguf: %w", err)
	}
	defer fd.Close()
	var magic [4]byte
	if _, err := io.ReadFull(fd, magic[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		return false, fmt.Errorf("gguf: %w", err)
	}
	return string(magic[:]) == Magic, nil
}
