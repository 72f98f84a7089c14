package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/govinfer/govinfer/internal/mmap"
)

// Checkpoint is the set of tensors of a model directory: one
// model.safetensors, or the shards listed by model.safetensors.index.json.
// Its methods are safe for concurrent use; tensor views must not be used
// after Close.
type Checkpoint struct {
	dir    string
	files  []*File
	where  map[string]*File // tensor name -> the file holding it
	names  []string         // sorted
	total  int64
	closed atomic.Bool
}

// OpenCheckpoint opens the checkpoint in dir. It reads, in order of
// preference: the shards listed by model.safetensors.index.json;
// model.safetensors; the only *.safetensors file in dir. dir may also be
// the path of a single .safetensors file.
//
// With an index, the checkpoint holds exactly the tensors its "weight_map"
// lists (as Hugging Face loaders do, tensors a shard holds but the index
// does not list are ignored). A shard that is missing or malformed, or that
// lacks a tensor the index puts in it, is an error naming the shard and the
// tensor.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	if st.Mode().IsRegular() {
		return openSingle(dir, dir)
	}
	indexPath := filepath.Join(dir, IndexFileName)
	if _, err := os.Stat(indexPath); err == nil {
		return openSharded(dir, indexPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	single := filepath.Join(dir, SingleFileName)
	if _, err := os.Stat(single); err == nil {
		return openSingle(dir, single)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint %s: %w", dir, err)
	}
	switch len(matches) {
	case 1:
		return openSingle(dir, matches[0])
	case 0:
		return nil, fmt.Errorf("safetensors: open checkpoint %s: no %s, %s or other .safetensors file", dir, IndexFileName, SingleFileName)
	}
	return nil, fmt.Errorf("safetensors: open checkpoint %s: %d .safetensors files but no %s or %s to say which to use",
		dir, len(matches), IndexFileName, SingleFileName)
}

func openSingle(dir, path string) (*Checkpoint, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{dir: dir, files: []*File{f}, where: make(map[string]*File, f.Len()), names: f.Names(), total: f.DataSize()}
	for _, name := range c.names {
		c.where[name] = f
	}
	return c, nil
}

func openSharded(dir, indexPath string) (_ *Checkpoint, err error) {
	raw, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	weightMap, err := parseIndex(raw)
	if err != nil {
		return nil, &FormatError{Path: indexPath, Msg: err.Error()}
	}
	byShard := make(map[string][]string)
	for name, shard := range weightMap {
		if shard == "" || !filepath.IsLocal(shard) || strings.ContainsAny(shard, `/\`) {
			return nil, &FormatError{Path: indexPath, Tensor: name, Msg: fmt.Sprintf("shard %s is not a plain file name in the checkpoint directory", quote(shard))}
		}
		byShard[shard] = append(byShard[shard], name)
	}
	c := &Checkpoint{dir: dir, where: make(map[string]*File, len(weightMap))}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	shards := make([]string, 0, len(byShard))
	for shard := range byShard {
		shards = append(shards, shard)
	}
	slices.Sort(shards)
	for _, shard := range shards {
		tensors := byShard[shard]
		slices.Sort(tensors)
		f, err := open(filepath.Join(dir, shard))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("safetensors: checkpoint %s: shard %s, listed in %s for %d tensors (%s first), is missing: %w",
					dir, quote(shard), IndexFileName, len(tensors), quote(tensors[0]), err)
			}
			return nil, err
		}
		c.files = append(c.files, f)
		for _, name := range tensors {
			e, ok := f.hdr.entries[name]
			if !ok {
				return nil, &FormatError{Path: indexPath, Tensor: name, Msg: fmt.Sprintf("listed in shard %s, which does not contain it", quote(shard))}
			}
			c.where[name] = f
			c.total += e.end - e.begin
		}
	}
	c.names = make([]string, 0, len(c.where))
	for name := range c.where {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	// Huge pages where the shards together fit in memory.
	var size int64
	for _, f := range c.files {
		size += int64(len(f.mem))
	}
	for _, f := range c.files {
		if f.release != nil {
			mmap.AdviseHugePages(f.mem, size)
		}
	}
	return c, nil
}

// parseIndex returns the weight_map of an index file, rejecting a map that
// names a tensor twice.
func parseIndex(raw []byte) (map[string]string, error) {
	var idx struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("index is not JSON: %w", err)
	}
	if len(idx.WeightMap) == 0 || string(idx.WeightMap) == "null" {
		return nil, errors.New(`index has no "weight_map"`)
	}
	dec := json.NewDecoder(bytes.NewReader(idx.WeightMap))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New(`"weight_map" is not an object`)
	}
	m := make(map[string]string)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf(`"weight_map": %w`, err)
		}
		name, _ := tok.(string)
		var shard string
		if err := dec.Decode(&shard); err != nil {
			return nil, fmt.Errorf(`"weight_map": tensor %s: shard is not a string: %w`, quote(name), err)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf(`"weight_map" lists tensor %s twice`, quote(name))
		}
		m[name] = shard
	}
	if len(m) == 0 {
		return nil, errors.New(`"weight_map" lists no tensors`)
	}
	return m, nil
}

// Dir returns the directory (or file) the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// Files returns the paths of the files the checkpoint reads.
func (c *Checkpoint) Files() []string {
	paths := make([]string, len(c.files))
	for i, f := range c.files {
		paths[i] = f.Path()
	}
	return paths
}

// Names returns the tensor names in sorted order.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Has reports whether the checkpoint holds the named tensor.
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.where[name]
	return ok
}

// Info returns the dtype and shape of the named tensor; the error wraps
// ErrNotFound if there is no such tensor.
func (c *Checkpoint) Info(name string) (TensorInfo, error) {
	f, ok := c.where[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %s in %s: %w", quote(name), c.dir, ErrNotFound)
	}
	info, _ := f.Info(name)
	return info, nil
}

// Tensor returns a zero-copy view of the named tensor. The error wraps
// ErrNotFound, naming the tensor and the checkpoint, if there is no such
// tensor, and ErrClosed after Close.
func (c *Checkpoint) Tensor(name string) (Tensor, error) {
	if c.closed.Load() {
		return Tensor{}, fmt.Errorf("safetensors: tensor %s in %s: %w", quote(name), c.dir, ErrClosed)
	}
	f, ok := c.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: tensor %s in %s: %w", quote(name), c.dir, ErrNotFound)
	}
	t, ok := f.Tensor(name)
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: tensor %s in %s: %w", quote(name), c.dir, ErrClosed)
	}
	return t, nil
}

// Evict tells the operating system that tensor name's data is not needed
// for now: where the file is memory-mapped, its pages leave the process's
// resident memory and are read again from the file if the tensor is used
// later. A loader that converts a tensor (quantizing it, say) evicts the
// original so that only the converted copy stays resident. Unknown names
// and files read into memory are left alone.
func (c *Checkpoint) Evict(name string) {
	f := c.where[name]
	if f == nil || f.release == nil {
		return
	}
	if t, ok := f.Tensor(name); ok {
		evict(t.Data)
	}
}

// TotalBytes returns the number of bytes of tensor data in the checkpoint.
func (c *Checkpoint) TotalBytes() int64 { return c.total }

// Close releases every file. Tensor views must not be used afterwards.
func (c *Checkpoint) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
