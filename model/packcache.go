package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/compute"
)

// The packed-weight cache. A backend that packs weights at load into
// layouts of its own (compute.Packer: the CPU backend's tile layout of
// bf16 matrices, its interleaved quantized blocks) spends seconds a
// gigabyte doing it, and the packed copy is anonymous memory. So the first
// start packs them into a file beside the checkpoint (or, where that
// folder is read-only, under the user cache directory), and every later
// start maps that file: the weights are then read from the page cache, or
// the disk, exactly as the stored layout's are, and the process's packed
// weights are clean file pages the kernel can drop and share.
//
// The file: a 4 KiB header (packCacheMagic, the index's offset, length and
// SHA-256), the packed weights each at a 4 KiB boundary, and the index
// (JSON) after them. The index holds the key of the checkpoint it was made
// from (packKey: size, modification time and first MiB of each of its
// files) and, per weight, its name, dtype, shape and layout, and a hash of
// the stored bytes at both ends of the weight: a weight is taken from the
// file only where all of them match. A file that does not read back so is
// ignored and made again; one whose weights are not all found (another
// layout, a new layout version) is removed after the load, so the next
// start makes it again. The file is written under a temporary name, synced
// and renamed when the load is complete, so that a file under the final
// name is always whole.

// PackCacheEnv is the environment variable that moves or turns off the
// packed-weight cache: "off" (or "0", "false", "no") packs at every start
// as before, a directory keeps the cache files there instead of beside
// the checkpoints.
const PackCacheEnv = "GOVINFER_PACK_CACHE"

const (
	packCacheMagic  = "govinfer-packed\x01" // 16 bytes, the last the format's version
	packCacheAlign  = 4096                  // of the header and of every weight
	packCacheSuffix = ".govinfer-packed"
	packSampleBytes = 256 // at each end of a weight's stored bytes, hashed
)

// packCacheMinBytes is the smallest checkpoint (bytes of its files) whose
// packed weights are cached: smaller ones pack in well under a second.
var packCacheMinBytes int64 = 1 << 30

// packCacheSpare is the free space a file system must keep beyond the
// cache file for the cache to be written there.
var packCacheSpare int64 = 1 << 30

// packIndex is the cache file's index.
type packIndex struct {
	Key     string      `json:"key"`
	Entries []packEntry `json:"entries"`
}

// packEntry is one packed weight of the cache file.
type packEntry struct {
	Name   string `json:"name"`
	Part   int    `json:"part,omitempty"` // of the weights loaded under Name, in order
	DType  string `json:"dtype"`
	Rows   int    `json:"rows"`
	Cols   int    `json:"cols"`
	Layout string `json:"layout"`
	Sample string `json:"sample"` // packSample of the stored bytes
	Off    int64  `json:"off"`
	Size   int64  `json:"size"`
}

// id returns what a weight must match to be taken from the file.
func (e packEntry) id() string {
	return strings.Join([]string{e.Name, strconv.Itoa(e.Part), e.DType, strconv.Itoa(e.Rows), strconv.Itoa(e.Cols), e.Layout, e.Sample}, "\x00")
}

// newPackEntry describes a weight about to be packed.
func newPackEntry(name string, dt compute.DType, rows, cols int, layout string, size int, data []byte) packEntry {
	return packEntry{Name: name, DType: dt.String(), Rows: rows, Cols: cols, Layout: layout, Sample: packSample(data), Size: int64(size)}
}

// packSample hashes the length of data and its first and last
// packSampleBytes: it tells weights of one shape apart without reading
// them whole.
func packSample(data []byte) string {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	h.Write(n[:])
	if len(data) <= 2*packSampleBytes {
		h.Write(data)
	} else {
		h.Write(data[:packSampleBytes])
		h.Write(data[len(data)-packSampleBytes:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// packCache is the cache of one load: it either reads a file made before
// (mem set) or makes one (build set, from the first weight packed).
type packCache struct {
	key string
	// places are where the file may be, in order: beside the checkpoint,
	// then under the user cache directory; path is the one read or made.
	places []string
	path   string
	need   int64 // the file's estimated size

	// Reading.
	mem     []byte               // the whole file, mapped
	entries map[string]packEntry // by id
	misses  int                  // weights packed that the file lacked

	parts map[string]int // the weights loaded so far under each name

	// Making.
	build *packBuild
	off   bool   // making failed: the rest packs into memory
	note  string // says where the file goes, until reported
}

// packBuild is a cache file being written.
type packBuild struct {
	f       *os.File
	tmp     string // its temporary name
	end     int64  // the end of the last weight
	maps    [][]byte
	entries []packEntry
	done    chan struct{} // closed when commit has finished
}

// packFiles returns the files the weights of src come from and the
// directory they are in, or nil for a source no file backs.
func packFiles(src source) []string {
	switch s := src.(type) {
	case ckSource:
		return s.ck.Files()
	case *ggufSource:
		return s.f.Paths()
	}
	return nil
}

// packCacheDisabled reports whether PackCacheEnv turns the cache off.
func packCacheDisabled() bool {
	switch strings.ToLower(os.Getenv(PackCacheEnv)) {
	case "off", "0", "false", "no":
		return true
	}
	return false
}

// newPackCache returns the cache for the weights of src, or nil when they
// are not cached: the cache is off, the files are small, or the system
// cannot map files for writing. A valid file found is mapped for reading.
func newPackCache(src source) *packCache {
	files := packFiles(src)
	if len(files) == 0 || packCacheDisabled() || !packCacheSupported {
		return nil
	}
	key, total, err := packKey(files)
	if err != nil || total < packCacheMinBytes {
		return nil
	}
	c := &packCache{key: key, places: packPlaces(files[0]), need: total, parts: map[string]int{}}
	for _, p := range c.places {
		if err := c.read(p); err == nil {
			c.path = p
			return c
		}
	}
	return c
}

// packPlaces returns where the cache of the checkpoint whose first file
// is first may be kept: beside it, then under the user cache directory
// (or, when PackCacheEnv names a directory, only there).
func packPlaces(first string) []string {
	abs, err := filepath.Abs(first)
	if err != nil {
		abs = first
	}
	sum := sha256.Sum256([]byte(abs))
	away := hex.EncodeToString(sum[:8]) + "-" + filepath.Base(first) + packCacheSuffix
	if dir := os.Getenv(PackCacheEnv); dir != "" {
		return []string{filepath.Join(dir, away)}
	}
	places := []string{besidePlace(first)}
	if dir, err := os.UserCacheDir(); err == nil {
		places = append(places, filepath.Join(dir, "govinfer", "packed", away))
	}
	return places
}

// besidePlace returns the place of the cache beside the checkpoint
// whose first file is first (a variable for tests).
var besidePlace = func(first string) string { return first + packCacheSuffix }

// packKey returns the key of a checkpoint's files (their sizes,
// modification times and first MiB) and their total size.
func packKey(files []string) (string, int64, error) {
	h := sha256.New()
	h.Write([]byte(packCacheMagic))
	var total int64
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return "", 0, err
		}
		st, err := f.Stat()
		if err == nil {
			fmt.Fprintf(h, "%d %d\n", st.Size(), st.ModTime().UnixNano())
			total += st.Size()
			_, err = io.Copy(h, io.LimitReader(f, 1<<20))
		}
		f.Close()
		if err != nil {
			return "", 0, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), total, nil
}

// read maps the cache file at path when it is whole and made from the
// same checkpoint.
func (c *packCache) read(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	var hdr [packCacheAlign]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return err
	}
	idx, err := readPackIndex(f, hdr[:], size)
	if err != nil {
		return err
	}
	if idx.Key != c.key {
		return errors.New("made from another checkpoint")
	}
	mem, err := mapPackFile(f, size)
	if err != nil {
		return err
	}
	c.mem, c.entries = mem, make(map[string]packEntry, len(idx.Entries))
	for _, e := range idx.Entries {
		c.entries[e.id()] = e
	}
	return nil
}

// readPackIndex reads and checks the index of a cache file of size bytes
// whose header is hdr.
func readPackIndex(f io.ReaderAt, hdr []byte, size int64) (*packIndex, error) {
	if string(hdr[:16]) != packCacheMagic {
		return nil, errors.New("not a packed-weight cache of this version")
	}
	off, n := int64(binary.LittleEndian.Uint64(hdr[16:])), int64(binary.LittleEndian.Uint64(hdr[24:]))
	if off < packCacheAlign || n <= 0 || n > 1<<30 || off > size-n {
		return nil, errors.New("index out of the file")
	}
	raw := make([]byte, n)
	if _, err := f.ReadAt(raw, off); err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(raw); !bytes.Equal(sum[:], hdr[32:64]) {
		return nil, errors.New("index damaged")
	}
	var idx packIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, err
	}
	for _, e := range idx.Entries {
		if e.Off < packCacheAlign || e.Off%packCacheAlign != 0 || e.Size <= 0 || e.Off+e.Size > off {
			return nil, fmt.Errorf("weight %s out of the file", e.Name)
		}
	}
	return &idx, nil
}

// get returns the packed bytes of e from the file read, if it has them.
func (c *packCache) get(e packEntry) ([]byte, bool) {
	if c.mem == nil {
		return nil, false
	}
	f, ok := c.entries[e.id()]
	if !ok || f.Size != e.Size {
		c.misses++
		return nil, false
	}
	return c.mem[f.Off : f.Off+f.Size : f.Off+f.Size], true
}

// alloc returns where to pack e in the file being made (starting it on the
// first weight); an error means the weight packs into memory instead, as
// do all after it.
func (c *packCache) alloc(e packEntry) ([]byte, error) {
	if c.mem != nil || c.off {
		return nil, errors.New("no cache being made")
	}
	if c.build == nil {
		if c.build = c.start(); c.build == nil {
			c.off = true
			return nil, errors.New("no place for the cache")
		}
	}
	b := c.build
	e.Off = (b.end + packCacheAlign - 1) / packCacheAlign * packCacheAlign
	mem, err := allocPackRegion(b.f, e.Off, e.Size, c.need)
	if err != nil {
		c.off = true
		return nil, err
	}
	b.end = e.Off + e.Size
	b.maps = append(b.maps, mem)
	b.entries = append(b.entries, e)
	return mem, nil
}

// start creates the file to make in the first place with room for it.
func (c *packCache) start() *packBuild {
	for _, p := range c.places {
		dir := filepath.Dir(p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			continue
		}
		if free, err := freeBytes(dir); err != nil || free < c.need+packCacheSpare {
			continue
		}
		removeStaleTemps(p)
		tmp := fmt.Sprintf("%s.tmp%d-%d", p, os.Getpid(), time.Now().UnixNano())
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			continue
		}
		reservePackFile(f, c.need)
		c.path = p
		c.note = fmt.Sprintf("packing the weights for the CPU kernels into %s, once: later starts map it (%s=off: pack at every start)", p, PackCacheEnv)
		return &packBuild{f: f, tmp: tmp, end: packCacheAlign}
	}
	return nil
}

// removeStaleTemps removes the temporary files of loads of path that
// ended without finishing theirs (a day old: a load in progress writes to
// its file all along).
func removeStaleTemps(path string) {
	olds, _ := filepath.Glob(path + ".tmp*")
	for _, o := range olds {
		if st, err := os.Stat(o); err == nil && time.Since(st.ModTime()) > 24*time.Hour {
			os.Remove(o)
		}
	}
}

// finish ends a load that succeeded: the file being made is completed in
// the background (index, sync, rename; close waits for it), and a file
// read that lacked weights is removed, to be made again next time.
func (c *packCache) finish() {
	if c.mem != nil && c.misses > 0 {
		os.Remove(c.path)
	}
	b := c.build
	if b == nil {
		return
	}
	if len(b.entries) == 0 || c.off {
		c.discard()
		return
	}
	b.done = make(chan struct{})
	go func() {
		defer close(b.done)
		if err := b.commit(c.key, c.path); err != nil {
			os.Remove(b.tmp)
		}
		b.f.Close()
	}()
}

// commit writes the index and the header of a file whose weights are
// packed, syncs it, and gives it its final name.
func (b *packBuild) commit(key, path string) error {
	raw, err := json.Marshal(packIndex{Key: key, Entries: b.entries})
	if err != nil {
		return err
	}
	var hdr [packCacheAlign]byte
	copy(hdr[:], packCacheMagic)
	binary.LittleEndian.PutUint64(hdr[16:], uint64(b.end))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(len(raw)))
	sum := sha256.Sum256(raw)
	copy(hdr[32:], sum[:])
	if _, err := b.f.WriteAt(raw, b.end); err != nil {
		return err
	}
	// The file was reserved at its estimated size (reservePackFile).
	if err := b.f.Truncate(b.end + int64(len(raw))); err != nil {
		return err
	}
	if _, err := b.f.WriteAt(hdr[:], 0); err != nil {
		return err
	}
	if err := b.f.Sync(); err != nil {
		return err
	}
	return os.Rename(b.tmp, path)
}

// discard drops the file being made.
func (c *packCache) discard() {
	if b := c.build; b != nil && b.done == nil {
		b.f.Close()
		os.Remove(b.tmp)
		b.done = make(chan struct{})
		close(b.done)
	}
}

// close waits for the file being made, and unmaps every weight: the
// weights must no longer be used. A file not completed is removed.
func (c *packCache) close() error {
	var err error
	if b := c.build; b != nil {
		c.discard() // when finish did not start a commit
		<-b.done
		for _, m := range b.maps {
			err = errors.Join(err, unmapPack(m))
		}
		b.maps = nil
	}
	if c.mem != nil {
		err = errors.Join(err, unmapPack(c.mem))
		c.mem = nil
	}
	return err
}
