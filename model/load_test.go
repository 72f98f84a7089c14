package model

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/safetensors"
)

// cacheEveryCheckpoint makes the packed-weight cache take the test
// checkpoints, however small, and whatever the free space.
func cacheEveryCheckpoint(t *testing.T) {
	t.Helper()
	minBytes, spare := packCacheMinBytes, packCacheSpare
	packCacheMinBytes, packCacheSpare = 0, 0
	t.Setenv(PackCacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Cleanup(func() { packCacheMinBytes, packCacheSpare = minBytes, spare })
}

// packingCPU returns a CPU backend, skipping the test where it packs no
// bf16 matrices (no tile products on this CPU or with these kernels).
func packingCPU(t *testing.T) *cpu.Backend {
	t.Helper()
	be := cpu.New(cpu.Options{})
	t.Cleanup(func() { be.Close() })
	if layout, _ := be.Packing(compute.BF16, 16, 32); layout == "" {
		t.Skipf("%s packs no bf16 weights", be.Name())
	}
	return be
}

// copyFiles copies the files of testdata's dir into a new directory.
func copyFiles(t *testing.T, dir string, names ...string) string {
	t.Helper()
	out := t.TempDir()
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// smallCopy returns a copy of testdata's small checkpoint.
func smallCopy(t *testing.T) string {
	return copyFiles(t, filepath.Join("..", "testdata", "models", "small"), "config.json", "model.safetensors")
}

// cacheState opens the model at path, runs a prompt, and returns its
// logits and how the weights were loaded: "read" from a cache file,
// "made" into one, or "" without a cache.
func cacheState(t *testing.T, be compute.Backend, path string) ([]float32, string) {
	t.Helper()
	m, err := OpenContext(context.Background(), path, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	state := ""
	if cs, ok := m.file.(closers); ok {
		c := cs[1].(*loader).cache
		switch {
		case c.mem != nil:
			state = "read"
		case c.build != nil:
			state = "made"
		}
	}
	_, logits := prefillSeq(t, m, []int{3, 17, 251, 9, 88, 1000, 5, 77})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	return logits, state
}

// sameBits fails unless got and want are the same float32 values, bit for
// bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: logit %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestPackCache checks the packed-weight cache on bf16 checkpoints (a
// dense one, and a MoE one whose experts load as parts of one tensor),
// with the best kernel set and the AVX2 one (whose outer-product kernel
// reads the same tile layout): the first start makes the file beside the
// checkpoint, the next reads it, and both compute the logits of weights
// packed in memory (New, which has no cache) bit for bit.
func TestPackCache(t *testing.T) {
	for _, k := range []*asm.Kernels{asm.Detect(), asm.New(asm.Features{AVX2: true})} {
		be := cpu.New(cpu.Options{Kernels: k})
		defer be.Close()
		if layout, _ := be.Packing(compute.BF16, 16, 32); layout == "" {
			t.Logf("%s packs no bf16 weights", be.Name())
			continue
		}
		for _, name := range []string{"small", "moe-tiny"} {
			t.Run(k.Name()+"/"+name, func(t *testing.T) {
				checkPackCache(t, be, copyFiles(t, filepath.Join("..", "testdata", "models", name), "config.json", "model.safetensors"))
			})
		}
	}
}

func checkPackCache(t *testing.T, be *cpu.Backend, dir string) {
	cacheEveryCheckpoint(t)

	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := New(cfg, ck, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	_, want := prefillSeq(t, mem, []int{3, 17, 251, 9, 88, 1000, 5, 77})
	mem.Close()
	ck.Close()

	got, state := cacheState(t, be, dir)
	if state != "made" {
		t.Fatalf("first start: cache %q, want made", state)
	}
	sameBits(t, "first start", got, want)
	path := filepath.Join(dir, "model.safetensors"+packCacheSuffix)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no cache file beside the checkpoint: %v", err)
	}
	got, state = cacheState(t, be, dir)
	if state != "read" {
		t.Fatalf("second start: cache %q, want read", state)
	}
	sameBits(t, "second start", got, want)
	if tmps, _ := filepath.Glob(path + ".tmp*"); len(tmps) > 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
	checkPackFileEnds(t, path)

	// The stored layout's results differ (the tile products sum in
	// another order) only where a backend without tiles runs.
	t.Setenv(PackCacheEnv, "off")
	if _, state := cacheState(t, be, dir); state != "" {
		t.Fatalf("%s=off: cache %q", PackCacheEnv, state)
	}
}

// checkPackFileEnds checks that the cache file at path ends with its
// index: the blocks reserved for it up front at its estimated size
// (reservePackFile) are cut to what it holds.
func checkPackFileEnds(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < packCacheAlign {
		t.Fatalf("cache file of %d bytes", len(raw))
	}
	off, n := binary.LittleEndian.Uint64(raw[16:]), binary.LittleEndian.Uint64(raw[24:])
	if end := off + n; end != uint64(len(raw)) {
		t.Fatalf("cache file of %d bytes; its index ends at %d", len(raw), end)
	}
}

// TestPackCacheRebuilt checks that a cache file that does not match is
// ignored and made again: damaged, truncated, made from another
// checkpoint, or older than a checkpoint file rewritten since.
func TestPackCacheRebuilt(t *testing.T) {
	cacheEveryCheckpoint(t)
	be := packingCPU(t)
	dir := smallCopy(t)
	path := filepath.Join(dir, "model.safetensors"+packCacheSuffix)
	want, _ := cacheState(t, be, dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// A cache of another checkpoint (tiny) under this one's name.
	tiny := copyFiles(t, filepath.Join("..", "testdata", "models", "tiny"), "config.json", "model.safetensors")
	cacheState(t, be, tiny)
	foreign, err := os.ReadFile(filepath.Join(tiny, "model.safetensors"+packCacheSuffix))
	if err != nil {
		t.Fatal(err)
	}

	flip := func(b []byte, i int) []byte {
		b = append([]byte(nil), b...)
		b[i] ^= 0x40
		return b
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"damaged magic", flip(good, 3)},
		{"damaged index", flip(good, len(good)-10)},
		{"truncated", good[:len(good)/2]},
		{"empty", nil},
		{"another checkpoint's", foreign},
	} {
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, state := cacheState(t, be, dir)
		if state != "made" {
			t.Fatalf("%s cache file: cache %q, want made", c.name, state)
		}
		sameBits(t, c.name+" cache file", got, want)
		if _, state := cacheState(t, be, dir); state != "read" {
			t.Fatalf("after a %s cache file was made again: cache %q, want read", c.name, state)
		}
	}

	// The key follows the checkpoint's files: a new modification time
	// makes the cache again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "model.safetensors"), later, later); err != nil {
		t.Fatal(err)
	}
	if _, state := cacheState(t, be, dir); state != "made" {
		t.Fatalf("checkpoint modified: cache %q, want made", state)
	}
}

// TestPackCacheElsewhere checks that PackCacheEnv can name the cache's
// directory, and that a folder that cannot take the file sends it under
// the user cache directory.
func TestPackCacheElsewhere(t *testing.T) {
	cacheEveryCheckpoint(t)
	be := packingCPU(t)
	dir := smallCopy(t)
	want, _ := cacheState(t, be, dir)
	os.Remove(filepath.Join(dir, "model.safetensors"+packCacheSuffix))

	away := t.TempDir()
	t.Setenv(PackCacheEnv, away)
	if _, state := cacheState(t, be, dir); state != "made" {
		t.Fatalf("%s=DIR: cache %q, want made", PackCacheEnv, state)
	}
	got, state := cacheState(t, be, dir)
	if state != "read" {
		t.Fatalf("%s=DIR, second start: cache %q, want read", PackCacheEnv, state)
	}
	sameBits(t, "cache in "+PackCacheEnv, got, want)
	if files, _ := filepath.Glob(filepath.Join(away, "*"+packCacheSuffix)); len(files) != 1 {
		t.Fatalf("%s=DIR holds %v", PackCacheEnv, files)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors"+packCacheSuffix)); err == nil {
		t.Fatal("a cache file beside the checkpoint, with the cache elsewhere")
	}

	// Nowhere with room for the file: no cache.
	t.Setenv(PackCacheEnv, "")
	packCacheSpare = math.MaxInt64 / 4
	if _, state := cacheState(t, be, dir); state != "" {
		t.Fatalf("no room anywhere: cache %q", state)
	}
	packCacheSpare = 0

	// A checkpoint folder that cannot take the file (as one read-only):
	// the user cache directory does.
	beside := besidePlace
	besidePlace = func(string) string { return "/proc/govinfer-read-only/model" + packCacheSuffix }
	defer func() { besidePlace = beside }()
	if _, state := cacheState(t, be, dir); state != "made" {
		t.Fatalf("read-only checkpoint folder: cache %q, want made", state)
	}
	got, state = cacheState(t, be, dir)
	if state != "read" {
		t.Fatalf("read-only checkpoint folder, second start: cache %q, want read", state)
	}
	sameBits(t, "cache in the user cache directory", got, want)
	user := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "govinfer", "packed", "*"+packCacheSuffix)
	if files, _ := filepath.Glob(user); len(files) != 1 {
		t.Fatalf("the user cache directory holds %v", files)
	}
}

// TestPackCacheGGUF checks the cache on a Q8_0 GGUF file, whose blocks the
// packed-quantized kernels interleave.
func TestPackCacheGGUF(t *testing.T) {
	cacheEveryCheckpoint(t)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	if layout, _ := be.Packing(compute.Q8_0, 16, 32); layout == "" {
		t.Skipf("%s keeps Q8_0 blocks as stored", be.Name())
	}
	dir := copyFiles(t, ggufDir, "ksmall-q8_0.gguf")
	path := filepath.Join(dir, "ksmall-q8_0.gguf")
	t.Setenv(PackCacheEnv, "off")
	want, _ := cacheState(t, be, path)
	t.Setenv(PackCacheEnv, "")
	for _, state := range []string{"made", "read"} {
		got, s := cacheState(t, be, path)
		if s != state {
			t.Fatalf("cache %q, want %s", s, state)
		}
		sameBits(t, "GGUF, cache "+state, got, want)
	}
}

// TestOpenCancelled checks that a load whose context is cancelled midway
// stops at the next weight with an error wrapping context.Canceled, leaves
// no cache file, and keeps nothing it loaded.
func TestOpenCancelled(t *testing.T) {
	for _, cached := range []bool{false, true} {
		name := map[bool]string{false: "memory", true: "cache"}[cached]
		t.Run(name, func(t *testing.T) {
			if cached {
				cacheEveryCheckpoint(t)
			} else {
				t.Setenv(PackCacheEnv, "off")
			}
			be := cpu.New(cpu.Options{})
			defer be.Close()
			dir := smallCopy(t)
			heap := func() uint64 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			before := heap()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var loaded int
			var total int64
			m, err := OpenContext(ctx, dir, Options{Backend: be, Progress: func(p Progress) {
				loaded, total = p.Tensors, p.TotalBytes
				if p.Tensors == p.TotalTensors/2 {
					cancel()
				}
			}})
			if err == nil {
				m.Close()
				t.Fatal("a cancelled load succeeded")
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled load: %v", err)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "*"+packCacheSuffix+"*")); len(files) > 0 {
				t.Fatalf("cache files left by a cancelled load: %v", files)
			}
			if grown := int64(heap()) - int64(before); grown > total/8 {
				t.Fatalf("after a load cancelled at tensor %d, the heap kept %d bytes (the checkpoint has %d)", loaded, grown, total)
			}
		})
	}
}

var _ io.Closer = closers(nil)

// slowPacker is a CPU backend whose packing takes a while.
type slowPacker struct{ *cpu.Backend }

func (s slowPacker) Pack(ctx context.Context, dst []byte, dt compute.DType, rows, cols int, data []byte) error {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Backend.Pack(ctx, dst, dt, rows, cols, data)
}

// TestOpenHeartbeat checks that Options.Progress hears from a load while a
// weight packs, with the counts of the weights loaded before it, and that
// a load cancelled while a weight packs returns at once.
func TestOpenHeartbeat(t *testing.T) {
	be := slowPacker{packingCPU(t)}
	t.Setenv(PackCacheEnv, "off")
	every := heartbeatEvery
	heartbeatEvery = 2 * time.Millisecond
	defer func() { heartbeatEvery = every }()
	var calls []Progress
	m, err := OpenContext(context.Background(), filepath.Join("..", "testdata", "models", "tiny"), Options{Backend: be, Progress: func(p Progress) {
		calls = append(calls, p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	beats, done := 0, 0
	for _, p := range calls {
		if p.Tensors != done {
			done = p.Tensors // a weight loaded
			continue
		}
		beats++ // the same count: a heartbeat while the next weight packs
		if p.Name == "" || p.Tensors >= p.TotalTensors {
			t.Fatalf("heartbeat %+v", p)
		}
	}
	if beats == 0 || done != calls[len(calls)-1].TotalTensors {
		t.Fatalf("%d heartbeats among %d calls, %d weights loaded", beats, len(calls), done)
	}

	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err = OpenContext(ctx, filepath.Join("..", "testdata", "models", "tiny"), Options{Backend: be, Progress: func(p Progress) {
		if p.Tensors == p.TotalTensors/2 {
			cancel() // while the next weight packs, from its heartbeat or the last weight's report
		}
	}})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Fatalf("cancelled load: %v after %v", err, time.Since(start))
	}
}

// TestPackCacheNote checks that the start that makes the cache file says
// where it goes, in one progress note, and the starts that read it say
// nothing.
func TestPackCacheNote(t *testing.T) {
	cacheEveryCheckpoint(t)
	be := packingCPU(t)
	dir := smallCopy(t)
	for i, want := range []int{1, 0} {
		notes := 0
		m, err := OpenContext(context.Background(), dir, Options{Backend: be, Progress: func(p Progress) {
			if strings.Contains(p.Note, filepath.Join(dir, "model.safetensors"+packCacheSuffix)) {
				notes++
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		if notes != want {
			t.Fatalf("start %d: %d notes of the cache file, want %d", i+1, notes, want)
		}
	}
}

// TestPackCacheMTP checks that the MTP head's weights go into the cache
// with the model's, and that a start with the head after one without it
// makes the file again (the head's weights were missing).
func TestPackCacheMTP(t *testing.T) {
	cacheEveryCheckpoint(t)
	be := packingCPU(t)
	dir := copyFiles(t, filepath.Join("..", "testdata", "models", "moe-tiny"), "config.json", "model.safetensors")
	open := func(mtp bool) (state string, mtpEntries, misses int) {
		m, err := OpenContext(context.Background(), dir, Options{Backend: be, MTP: mtp})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		c := m.file.(closers)[1].(*loader).cache
		if c.mem != nil {
			state = "read"
			for _, e := range c.entries {
				if strings.HasPrefix(e.Name, "mtp.") {
					mtpEntries++
				}
			}
		} else if c.build != nil {
			state = "made"
		}
		return state, mtpEntries, c.misses
	}
	for i, want := range []struct {
		mtp        bool
		state      string
		mtpEntries bool
		misses     bool
	}{
		{false, "made", false, false},
		{true, "read", false, true}, // the head's weights missing: the file is removed
		{true, "made", false, false},
		{true, "read", true, false},
		{false, "read", true, false},
	} {
		state, n, misses := open(want.mtp)
		if state != want.state || (n > 0) != want.mtpEntries || (misses > 0) != want.misses {
			t.Fatalf("start %d (MTP %v): cache %q with %d MTP weights, %d missing; want %+v", i+1, want.mtp, state, n, misses, want)
		}
	}
}
