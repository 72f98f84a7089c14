package prefixdisk

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// checkpointSamples is the number of evenly spaced 64 KiB pieces of each
// weight file hashed by CheckpointID.
const checkpointSamples = 33

// CheckpointID identifies a checkpoint's numbers: for each of its weight
// files (*.safetensors, *.gguf) and config.json, the name, the size and 33
// evenly spaced 64 KiB pieces of the content (the first and the last
// included), hashed with SHA-256. A fine-tune of the same shapes changes
// the bytes of nearly every tensor and so the pieces, at the cost of a few
// MiB read per file. path is a checkpoint directory or a GGUF file.
func CheckpointID(path string) ([32]byte, error) {
	var files []string
	info, err := os.Stat(path)
	if err != nil {
		return [32]byte{}, fmt.Errorf("prefixdisk: %w", err)
	}
	if info.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return [32]byte{}, fmt.Errorf("prefixdisk: %w", err)
		}
		for _, e := range ents {
			n := e.Name()
			if !e.IsDir() && (strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".gguf") || n == "config.json") {
				files = append(files, filepath.Join(path, n))
			}
		}
	} else {
		files = []string{path}
	}
	slices.Sort(files)
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for _, name := range files {
		if err := hashFile(h, name, buf); err != nil {
			return [32]byte{}, fmt.Errorf("prefixdisk: identifying %s: %w", name, err)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

func hashFile(h io.Writer, name string, buf []byte) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(size))
	io.WriteString(h, filepath.Base(name))
	h.Write(n[:])
	piece := int64(len(buf))
	if size <= checkpointSamples*piece {
		_, err := io.Copy(h, f)
		return err
	}
	for i := range int64(checkpointSamples) {
		off := (size - piece) * i / (checkpointSamples - 1)
		if _, err := f.ReadAt(buf, off); err != nil {
			return err
		}
		h.Write(buf)
	}
	return nil
}
