package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File names of a checkpoint directory, as Hugging Face writes them.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// shardName is the Hugging Face name of shard i (0-based) of n.
func shardName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// index is the JSON of model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// WriteSharded writes the tensors as a checkpoint in dir (created if
// needed), splitting them in name order into shards of at most
// maxShardBytes bytes of tensor data (a tensor larger than that gets a shard
// of its own). Shards are named model-0000i-of-0000n.safetensors and listed
// in model.safetensors.index.json; if everything fits in one shard it is
// written as model.safetensors with no index. Shards carry the metadata
// {"format": "pt"} that Hugging Face loaders expect.
func WriteSharded(dir string, tensors []Tensor, maxShardBytes int64) error {
	infos, err := tensorInfos(tensors)
	if err != nil {
		return err
	}
	w, err := NewShardedWriter(dir, infos, maxShardBytes, map[string]string{"format": "pt"})
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

// ShardedWriter writes a checkpoint directory tensor by tensor, like Writer
// does for one file; see WriteSharded for the layout.
type ShardedWriter struct {
	dir     string
	shards  []*Writer
	files   []string       // shard file names
	shardOf map[string]int // tensor name -> shard
	total   int64          // bytes of tensor data
}

// NewShardedWriter starts writing a checkpoint in dir for the tensors
// described by infos; each shard gets the given metadata (which may be nil).
func NewShardedWriter(dir string, infos []TensorInfo, maxShardBytes int64, metadata map[string]string) (*ShardedWriter, error) {
	if maxShardBytes <= 0 {
		return nil, fmt.Errorf("safetensors: shard size limit %d is not positive", maxShardBytes)
	}
	sorted := slices.Clone(infos)
	slices.SortFunc(sorted, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	var groups [][]TensorInfo
	var groupBytes int64
	w := &ShardedWriter{dir: dir, shardOf: make(map[string]int, len(infos))}
	for i, info := range sorted {
		n, err := byteSize(info)
		if err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Name == info.Name {
			return nil, fmt.Errorf("safetensors: tensor %s given twice", quote(info.Name))
		}
		if len(groups) == 0 || (groupBytes+n > maxShardBytes && groupBytes > 0) {
			groups = append(groups, nil)
			groupBytes = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], info)
		groupBytes += n
		w.total += n
		w.shardOf[info.Name] = len(groups) - 1
	}
	if len(groups) == 0 {
		groups = append(groups, nil) // an empty checkpoint is one empty file
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	for i, g := range groups {
		name := SingleFileName
		if len(groups) > 1 {
			name = shardName(i, len(groups))
		}
		sw, err := NewWriter(filepath.Join(dir, name), g, metadata)
		if err != nil {
			w.Abort()
			return nil, err
		}
		w.shards = append(w.shards, sw)
		w.files = append(w.files, name)
	}
	return w, nil
}

// WriteTensor writes all the data of the named tensor at once.
func (w *ShardedWriter) WriteTensor(name string, data []byte) error {
	i, ok := w.shardOf[name]
	if !ok {
		return fmt.Errorf("safetensors: write %s: tensor %s was not declared", w.dir, quote(name))
	}
	return w.shards[i].WriteTensor(name, data)
}

// TensorWriter returns a sequential writer for the data of the named tensor;
// see Writer.TensorWriter.
func (w *ShardedWriter) TensorWriter(name string) (io.Writer, error) {
	i, ok := w.shardOf[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: write %s: tensor %s was not declared", w.dir, quote(name))
	}
	return w.shards[i].TensorWriter(name)
}

// Close commits every shard, then the index (or, for a single file, removes
// a stale index that would otherwise shadow it).
func (w *ShardedWriter) Close() error {
	for i, s := range w.shards {
		if err := s.Close(); err != nil {
			for _, rest := range w.shards[i+1:] {
				rest.Abort()
			}
			return err
		}
	}
	indexPath := filepath.Join(w.dir, IndexFileName)
	if len(w.shards) == 1 {
		if err := os.Remove(indexPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("safetensors: remove stale index: %w", err)
		}
		return nil
	}
	idx := index{Metadata: map[string]any{"total_size": w.total}, WeightMap: make(map[string]string, len(w.shardOf))}
	for name, i := range w.shardOf {
		idx.WeightMap[name] = w.files[i]
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: encode index: %w", err)
	}
	if err := writeFileAtomic(indexPath, append(data, '\n')); err != nil {
		return fmt.Errorf("safetensors: write index: %w", err)
	}
	return nil
}

// Abort discards every shard not yet committed. It is safe to defer.
func (w *ShardedWriter) Abort() error {
	var errs []error
	for _, s := range w.shards {
		errs = append(errs, s.Abort())
	}
	return errors.Join(errs...)
}
