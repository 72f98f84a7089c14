package prefixdisk

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var testLim = Limits{BlockTokens: 4, KVFloats: 24, StateFloats: 10, MaxEnd: 1 << 20}

func testKey(b byte) [32]byte { return [32]byte{b, 1, 2, 3} }

func kvItem(r *rand.Rand, hash, parent uint64, end int) *Item {
	it := &Item{Kind: KindKV, Hash: hash, Parent: parent, End: end, Tokens: make([]int, testLim.BlockTokens), Data: make([]float32, testLim.KVFloats)}
	for i := range it.Tokens {
		it.Tokens[i] = r.IntN(1000) - 3
	}
	for i := range it.Data {
		it.Data[i] = r.Float32()
	}
	return it
}

func stateItem(r *rand.Rand, hash uint64, end, delta int) *Item {
	it := &Item{Kind: KindState, Hash: hash, End: end, Delta: delta, Data: make([]float32, testLim.StateFloats)}
	for i := range it.Data {
		it.Data[i] = r.Float32()
	}
	return it
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func open(t *testing.T, dir string, key [32]byte, budget int64, log *logBuf) *Store {
	t.Helper()
	o := Options{Budget: budget}
	if log != nil {
		o.Logf = log.logf
	}
	s, err := Open(dir, key, testLim, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameItem(t *testing.T, got, want *Item) {
	t.Helper()
	if got.Kind != want.Kind || got.Hash != want.Hash || got.Parent != want.Parent || got.End != want.End || got.Delta != want.Delta ||
		fmt.Sprint(got.Tokens) != fmt.Sprint(want.Tokens) || !bytes.Equal(floatBytes(got.Data), floatBytes(want.Data)) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}

// TestRoundTripAcrossReopen writes a chain and a state, reopens the
// directory (a restart) and reads them back bit for bit.
func TestRoundTripAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	s := open(t, dir, testKey(1), 1<<20, nil)
	a, b := kvItem(r, 11, 0, 4), kvItem(r, 12, 11, 8)
	st := stateItem(r, 12, 8, -3)
	for _, it := range []*Item{a, b, st} {
		if !s.Put(it, false) {
			t.Fatal("Put refused")
		}
	}
	if !s.HasKV(11, 0) || !s.HasState(12, 8) {
		t.Fatal("a queued item is not held")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, testKey(1), 1<<20, nil)
	defer s.Close()
	if !s.HasKV(11, 0) || !s.HasKV(12, 11) || s.HasKV(12, 99) || !s.HasState(12, 8) || s.HasState(12, 4) {
		t.Fatal("the index rebuilt at open is wrong")
	}
	got, err := s.Get(KindKV, 12, 11, 8, b.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	sameItem(t, got, b)
	if got, err = s.Get(KindState, 12, 0, 8, nil); err != nil {
		t.Fatal(err)
	}
	sameItem(t, got, st)
	if _, err := s.Get(KindKV, 11, 0, 4, []int{1, 2, 3, 4}); err == nil {
		t.Fatal("a block read with other tokens (a hash collision) was returned")
	}
	if st := s.Stats(); st.KVFiles != 2 || st.States != 1 || st.Reads != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBadFilesSkipped damages files in each way a disk or another writer
// can and checks that each is skipped, logged with its name, removed, and
// never returned.
func TestBadFilesSkipped(t *testing.T) {
	damage := map[string]func(path string){
		"truncated": func(p string) {
			info, _ := os.Stat(p)
			os.Truncate(p, info.Size()-5)
		},
		"payload bit": func(p string) {
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 0x10
			os.WriteFile(p, b, 0o644)
		},
		"header bit": func(p string) {
			b, _ := os.ReadFile(p)
			b[70] ^= 1
			os.WriteFile(p, b, 0o644)
		},
		"garbage": func(p string) { os.WriteFile(p, []byte("not a prefix state"), 0o644) },
		"empty":   func(p string) { os.WriteFile(p, nil, 0o644) },
	}
	for name, f := range damage {
		for _, atOpen := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/at open %v", name, atOpen), func(t *testing.T) {
				dir := t.TempDir()
				r := rand.New(rand.NewPCG(3, 4))
				s := open(t, dir, testKey(1), 1<<20, nil)
				it := kvItem(r, 21, 0, 4)
				s.Put(it, false)
				s.Put(stateItem(r, 21, 4, 0), false) // keeps the block
				s.Close()
				var log logBuf
				path := filepath.Join(s.Dir(), fmt.Sprintf("%016x.kv", 21))
				if atOpen {
					f(path)
				}
				s = open(t, dir, testKey(1), 1<<20, &log)
				defer s.Close()
				if !atOpen {
					f(path)
				}
				_, err := s.Get(KindKV, 21, 0, 4, it.Tokens)
				if err == nil {
					t.Fatal("a damaged file was read")
				}
				if s.HasKV(21, 0) {
					t.Fatal("a damaged file stays in the index")
				}
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatalf("the damaged file was not removed: %v", err)
				}
				if l := log.String(); !strings.Contains(l, "corrupt") || !strings.Contains(l, "skipped") || !strings.Contains(l, path) {
					t.Fatalf("log %q does not name the file as skipped and corrupt", l)
				}
				if s.Stats().Corrupt != 1 {
					t.Fatalf("corrupt count %d", s.Stats().Corrupt)
				}
			})
		}
	}
}

// TestForeignModel: a file of another model in this model's directory is
// skipped; another model's directory is not touched.
func TestForeignModel(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	other := open(t, dir, testKey(2), 1<<20, nil)
	it := kvItem(r, 31, 0, 4)
	other.Put(it, false)
	other.Put(stateItem(r, 31, 4, 0), false)
	other.Close()
	src := filepath.Join(other.Dir(), fmt.Sprintf("%016x.kv", 31))
	var log logBuf
	s := open(t, dir, testKey(1), 1<<20, &log)
	b, _ := os.ReadFile(src)
	s.Close()
	os.WriteFile(filepath.Join(s.Dir(), fmt.Sprintf("%016x.kv", 31)), b, 0o644)
	s = open(t, dir, testKey(1), 1<<20, &log)
	defer s.Close()
	if s.HasKV(31, 0) || !strings.Contains(log.String(), "another model") {
		t.Fatalf("a foreign file was indexed; log %q", log.String())
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("the other model's file was touched: %v", err)
	}
}

// TestSecondProcessRefused: one directory, one model, one holder.
func TestSecondProcessRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testKey(1), 1<<20, nil)
	_, err := Open(dir, testKey(1), testLim, Options{Budget: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "in use by another govinfer process") {
		t.Fatalf("second Open: %v", err)
	}
	o, err := Open(dir, testKey(2), testLim, Options{Budget: 1 << 20})
	if err != nil {
		t.Fatalf("another model on the same directory: %v", err)
	}
	o.Close()
	s.Close()
	s = open(t, dir, testKey(1), 1<<20, nil)
	s.Close()
}

// TestBudget: the least recently used states go first, with the blocks
// only they needed; blocks a kept state needs stay.
func TestBudget(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 8))
	kvSize := (&Item{Tokens: make([]int, 4), Data: make([]float32, 24)}).bytes()
	stSize := (&Item{Data: make([]float32, 10)}).bytes()
	budget := 3*kvSize + 2*stSize - 1
	s := open(t, dir, testKey(1), budget, nil)
	defer s.Close()
	shared := kvItem(r, 1, 0, 4)
	s.Put(shared, false)
	// Session a: shared + a1, state at a1. Session b: shared + b1, state at b1.
	s.Put(kvItem(r, 2, 1, 8), false)
	s.Put(stateItem(r, 2, 8, 0), false)
	s.Flush()
	s.Put(kvItem(r, 3, 1, 8), false)
	s.Put(stateItem(r, 3, 8, 0), false)
	s.Flush()
	if st := s.Stats(); st.Bytes > budget {
		t.Fatalf("%d bytes over the budget %d", st.Bytes, budget)
	}
	if s.HasState(2, 8) || s.HasKV(2, 1) {
		t.Fatal("the older session's state and block stayed")
	}
	if !s.HasState(3, 8) || !s.HasKV(3, 1) || !s.HasKV(1, 0) {
		t.Fatal("the newer session or the shared block was removed")
	}
}

// TestPutNeverBlocks: past the queue's bound Put drops and counts.
func TestPutNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(9, 10))
	s, err := Open(dir, testKey(1), testLim, Options{Budget: 1 << 30, QueueBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock() // the writer cannot take anything off the queue
	s.queue = append(s.queue, stateItem(r, 99, 4, 0))
	s.stats.Queued = 1
	s.mu.Unlock()
	if s.Put(kvItem(r, 5, 0, 4), false) {
		t.Fatal("Put queued past the bound")
	}
	if s.Stats().Dropped != 1 {
		t.Fatal("the drop was not counted")
	}
}

func TestCheckpointID(t *testing.T) {
	dir := t.TempDir()
	w := make([]byte, 5<<20)
	for i := range w {
		w[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), w, 0o644)
	a, err := CheckpointID(dir)
	if err != nil {
		t.Fatal(err)
	}
	w[len(w)/2] ^= 1 // a fine-tune of the same shapes
	os.WriteFile(filepath.Join(dir, "model.safetensors"), w, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{}`), 0o644)
	b, _ := CheckpointID(dir)
	if a == b {
		t.Fatal("changed weights kept the checkpoint's identity")
	}
}

// TestTakeRemoved: the KV blocks the budget removes are reported, with a
// notification, and taken once; states are not reported.
func TestTakeRemoved(t *testing.T) {
	lim := Limits{BlockTokens: 2, KVFloats: 8, StateFloats: 4, MaxEnd: 100}
	var notified atomic.Int32
	kv := func(h, parent uint64, end int) *Item {
		return &Item{Kind: KindKV, Hash: h, Parent: parent, End: end, Tokens: []int{1, 2}, Data: make([]float32, 8)}
	}
	one := kv(1, 0, 2).bytes() + (&Item{Kind: KindState, Data: make([]float32, 4)}).bytes()
	s, err := Open(t.TempDir(), [32]byte{7}, lim, Options{Budget: one + one/2, Notify: func() { notified.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Put(kv(1, 0, 2), false)
	s.Put(&Item{Kind: KindState, Hash: 1, End: 2, Data: make([]float32, 4)}, false)
	s.Flush()
	if got := s.TakeRemoved(); len(got) != 0 {
		t.Fatalf("removed %v before anything left", got)
	}
	s.Put(kv(5, 0, 2), false)
	s.Put(&Item{Kind: KindState, Hash: 5, End: 2, Data: make([]float32, 4)}, false)
	s.Flush()
	if got := s.TakeRemoved(); !slices.Equal(got, []uint64{1}) || notified.Load() == 0 {
		t.Errorf("removed %v (notified %d), want block 1", got, notified.Load())
	}
	if got := s.TakeRemoved(); len(got) != 0 {
		t.Errorf("taken twice: %v", got)
	}
	if s.HasKV(1, 0) || !s.HasKV(5, 0) {
		t.Error("the budget kept the wrong block")
	}
}
