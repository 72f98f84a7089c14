// Package prefixdisk is the disk tier of the engine's prefix cache: a
// directory of files, one per KV block and one per recurrent state of a
// cached prefix, named by the prefix's chained block hash (see
// engine.BlockHashes) and keyed by everything that changes the numbers
// (Open's key). A state leaving memory is handed to a Store, which writes
// it in the background; a later request, or a later process, reads it
// back bit for bit.
//
// Every file is checked when read: its header (magic, version, the
// model's key, sizes within Limits, a CRC-32C of its own) and a CRC-32C of
// its payload. A file that fails is logged once as skipped and corrupt,
// with its name, and removed; the caller recomputes what it held. Writes
// go to a temporary name and are renamed when whole.
//
// Writes never block the caller: Put queues the item and returns, and
// when the queue holds more than its bound (the disk slower than
// eviction) the item is dropped and counted (Stats.Dropped); the prefix
// is then recomputed when asked for again. The store stays within its
// byte budget by removing the least recently used states, then the KV
// blocks no remaining state needs.
package prefixdisk

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Item is a KV block or a recurrent state of a cached prefix.
type Item struct {
	Kind Kind
	// Hash is the chained hash of the prefix's blocks up to End; Parent
	// that of the prefix before the block (KV blocks; 0 at the start).
	Hash, Parent uint64
	// End is the position after the block, or the state's position.
	End int
	// Delta is a state's rope delta.
	Delta int
	// Tokens are a KV block's cache-key tokens.
	Tokens []int
	// Data are the float32 slots (model.KVBlock.Floats,
	// model.RecurrentState.Floats).
	Data []float32
}

func (it *Item) bytes() int64 { return headerSize + 8*int64(len(it.Tokens)) + 4*int64(len(it.Data)) }

// Stats are a store's counters.
type Stats struct {
	Bytes, Budget    int64  // on disk (written files), and the budget
	KVFiles, States  int    // files on disk
	Writes, Reads    uint64 // files written and read
	WriteBytes       uint64
	ReadBytes        uint64
	WriteSeconds     float64
	ReadSeconds      float64
	Dropped          uint64 // items dropped: the queue was full (the disk slower than eviction) or a write failed
	Corrupt          uint64 // files skipped as corrupt or foreign, and removed
	Evicted          uint64 // files removed to stay within the budget
	Queued           int64  // bytes waiting to be written
	QueueLimit       int64
	DroppedOversized uint64 // items larger than the whole budget
}

type id struct {
	kind Kind
	hash uint64
}

type entry struct {
	parent  uint64
	end     int
	size    int64
	lastUse int64 // unix nanoseconds: the file's modification time
}

// Store is a directory of prefix states of one model. Its methods are
// safe for concurrent use.
type Store struct {
	dir    string
	key    [32]byte
	lim    Limits
	logf   func(format string, args ...any)
	unlock func()

	mu      sync.Mutex
	cond    *sync.Cond
	index   map[id]*entry
	pending map[id]*Item // queued or being written
	queue   []*Item
	stats   Stats
	closed  bool
	logged  map[string]bool
	done    chan struct{}
	notify  func()
	removed []uint64 // KV blocks that left the store since TakeRemoved
}

// DefaultQueueBytes is the bound of the write queue when Options leaves
// it 0.
const DefaultQueueBytes = 1 << 30

// Options configure Open.
type Options struct {
	// Budget bounds the bytes of the store's files. It must be positive.
	Budget int64
	// QueueBytes bounds the bytes waiting to be written (DefaultQueueBytes
	// when 0): Put drops an item past it.
	QueueBytes int64
	// Logf reports skipped files and dropped writes (nil: silent).
	Logf func(format string, args ...any)
	// Notify, when set, is called when KV blocks have left the store
	// (TakeRemoved has some), from whichever goroutine removed them, with
	// the store's lock held: it must return at once and not call the
	// store.
	Notify func()
}

// Open opens (creating it) the store of the model with the given key under
// dir: a subdirectory named by the key, locked for this process. Another
// process using the same directory for the same model makes Open fail.
// The index is rebuilt from the files' headers; temporary files of an
// interrupted write, and files that are not whole, are removed.
func Open(dir string, key [32]byte, lim Limits, o Options) (*Store, error) {
	if o.Budget <= 0 {
		return nil, fmt.Errorf("prefixdisk: the disk budget must be positive, got %d", o.Budget)
	}
	if lim.BlockTokens <= 0 || lim.KVFloats < 0 || lim.StateFloats < 0 || lim.MaxEnd <= 0 {
		return nil, fmt.Errorf("prefixdisk: invalid limits %+v", lim)
	}
	sub := filepath.Join(dir, hex.EncodeToString(key[:8]))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return nil, fmt.Errorf("prefixdisk: %w", err)
	}
	unlock, err := lockDir(sub)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: sub, key: key, lim: lim, logf: o.Logf, notify: o.Notify, unlock: unlock, index: map[id]*entry{},
		pending: map[id]*Item{}, logged: map[string]bool{}, done: make(chan struct{})}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	s.cond = sync.NewCond(&s.mu)
	s.stats.Budget = o.Budget
	s.stats.QueueLimit = cmp.Or(o.QueueBytes, DefaultQueueBytes)
	if err := s.scan(); err != nil {
		unlock()
		return nil, err
	}
	s.mu.Lock()
	s.collect()
	s.mu.Unlock()
	go s.writer()
	return s, nil
}

// Dir returns the directory the store's files are in.
func (s *Store) Dir() string { return s.dir }

func (s *Store) name(i id) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016x%s", i.hash, i.kind.ext()))
}

// scan rebuilds the index from the files' headers.
func (s *Store) scan() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("prefixdisk: %w", err)
	}
	for _, de := range ents {
		name := de.Name()
		path := filepath.Join(s.dir, name)
		if name == lockName || de.IsDir() {
			continue
		}
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(path)
			continue
		}
		var kind Kind
		switch filepath.Ext(name) {
		case ".kv":
			kind = KindKV
		case ".st":
			kind = KindState
		default:
			continue // not ours: left alone
		}
		hash, perr := strconv.ParseUint(strings.TrimSuffix(name, filepath.Ext(name)), 16, 64)
		h, info, err := readHeader(path, s.key, s.lim)
		switch {
		case perr != nil:
			err = corrupt("a name that is not a block hash")
		case err == nil && (h.kind != kind || h.hash != hash):
			err = corrupt("the header names another entry")
		case err == nil && info.Size() != h.fileSize():
			err = corrupt("%d bytes, the header says %d (truncated?)", info.Size(), h.fileSize())
		}
		if err != nil {
			s.skip(path, err)
			continue
		}
		s.index[id{kind, hash}] = &entry{parent: h.parent, end: h.end, size: info.Size(), lastUse: info.ModTime().UnixNano()}
		s.stats.Bytes += info.Size()
	}
	return nil
}

func readHeader(path string, key [32]byte, lim Limits) (header, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return header{}, nil, err
	}
	var b [headerSize]byte
	n, _ := f.ReadAt(b[:], 0)
	h, err := decodeHeader(b[:n], key, lim)
	return h, info, err
}

// skip logs a bad file once and removes it. The caller may hold s.mu.
func (s *Store) skip(path string, err error) {
	s.stats.Corrupt++
	if !s.logged[path] {
		s.logged[path] = true
		s.logf("prefix cache: skipped %s: %v; removed, its prefix is recomputed", path, err)
	}
	os.Remove(path)
}

// HasKV reports whether the store holds (or is writing) the KV block of
// the prefix ending with the block hash, after the block parent.
func (s *Store) HasKV(hash, parent uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.pending[id{KindKV, hash}]; it != nil {
		return it.Parent == parent
	}
	e := s.index[id{KindKV, hash}]
	return e != nil && e.parent == parent
}

// HasState reports whether the store holds (or is writing) the recurrent
// state at end of the prefix ending with the block hash.
func (s *Store) HasState(hash uint64, end int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.pending[id{KindState, hash}]; it != nil {
		return it.End == end
	}
	e := s.index[id{KindState, hash}]
	return e != nil && e.end == end
}

// Block is a KV block the store holds (Blocks).
type Block struct {
	// Hash is the chained hash of the prefix the block ends, Parent that
	// of the prefix before it (0 at the start), End the position after
	// it.
	Hash, Parent uint64
	End          int
	// Point says the store holds the state at End too.
	Point bool
}

// Blocks returns the KV blocks the store holds or is writing, in no
// particular order.
func (s *Store) Blocks() []Block {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Block
	point := func(hash uint64, end int) bool {
		if it := s.pending[id{KindState, hash}]; it != nil {
			return it.End == end
		}
		e := s.index[id{KindState, hash}]
		return e != nil && e.end == end
	}
	for i, e := range s.index {
		if i.kind == KindKV && s.pending[i] == nil {
			out = append(out, Block{Hash: i.hash, Parent: e.parent, End: e.end, Point: point(i.hash, e.end)})
		}
	}
	for i, it := range s.pending {
		if i.kind == KindKV {
			out = append(out, Block{Hash: i.hash, Parent: it.Parent, End: it.End, Point: point(i.hash, it.End)})
		}
	}
	return out
}

// Tokens returns the cache-key tokens of the KV block with the given hash,
// reading only its header and tokens: they are not checked against the
// payload's checksum (Get does that), so they name what the file claims
// to hold.
func (s *Store) Tokens(hash uint64) ([]int, error) {
	i := id{KindKV, hash}
	s.mu.Lock()
	it, e := s.pending[i], s.index[i]
	s.mu.Unlock()
	if it != nil {
		return slices.Clone(it.Tokens), nil
	}
	if e == nil {
		return nil, ErrMissing
	}
	f, err := os.Open(s.name(i))
	if err != nil {
		return nil, fmt.Errorf("prefixdisk: %w", err)
	}
	defer f.Close()
	var hb [headerSize]byte
	if _, err := io.ReadFull(f, hb[:]); err != nil {
		return nil, fmt.Errorf("prefixdisk: reading %s: %w", s.name(i), err)
	}
	h, err := decodeHeader(hb[:], s.key, s.lim)
	if err != nil {
		return nil, fmt.Errorf("prefixdisk: %s: %w", s.name(i), err)
	}
	if h.kind != KindKV || h.hash != hash {
		return nil, fmt.Errorf("prefixdisk: %s: %w", s.name(i), corrupt("the header names another entry"))
	}
	tb := make([]byte, 8*h.tokens)
	if _, err := io.ReadFull(f, tb); err != nil {
		return nil, fmt.Errorf("prefixdisk: reading %s: %w", s.name(i), err)
	}
	toks := make([]int, h.tokens)
	for j := range toks {
		toks[j] = int(int64(binary.LittleEndian.Uint64(tb[8*j:])))
	}
	return toks, nil
}

// ErrMissing is Get's error for an entry the store does not hold (any
// more), or one that holds another prefix (a hash collision).
var ErrMissing = errors.New("prefixdisk: no such entry")

// Get reads the entry of kind with the given hash; for a KV block, tokens
// must be its cache-key tokens and parent its parent's hash, for a state
// end its position. A file that fails its checks is logged, removed and
// reported as an error wrapping ErrMissing.
func (s *Store) Get(kind Kind, hash, parent uint64, end int, tokens []int) (*Item, error) {
	i := id{kind, hash}
	s.mu.Lock()
	if it := s.pending[i]; it != nil {
		s.mu.Unlock()
		if !it.matches(parent, end, tokens) {
			return nil, ErrMissing
		}
		return it, nil
	}
	e := s.index[i]
	s.mu.Unlock()
	if e == nil {
		return nil, ErrMissing
	}
	start := time.Now()
	path := s.name(i)
	it, err := s.readFile(path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if errors.Is(err, errCorrupt) {
			s.forget(i)
			s.skip(path, err)
		} else if os.IsNotExist(err) {
			s.forget(i)
		}
		return nil, fmt.Errorf("%w: %v", ErrMissing, err)
	}
	if it.Kind != kind || it.Hash != hash {
		s.forget(i)
		s.skip(path, corrupt("the header names another entry"))
		return nil, ErrMissing
	}
	if !it.matches(parent, end, tokens) {
		return nil, ErrMissing // another prefix with the same hash
	}
	s.stats.Reads++
	s.stats.ReadBytes += uint64(it.bytes())
	s.stats.ReadSeconds += time.Since(start).Seconds()
	now := time.Now()
	if e := s.index[i]; e != nil {
		e.lastUse = now.UnixNano()
		os.Chtimes(path, now, now) // recency survives a restart
	}
	return it, nil
}

func (it *Item) matches(parent uint64, end int, tokens []int) bool {
	if it.Kind == KindKV {
		return it.Parent == parent && it.End == end && slices.Equal(it.Tokens, tokens)
	}
	return it.End == end
}

func (s *Store) readFile(path string) (*Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return decodeItem(f, info.Size(), s.key, s.lim)
}

// forget drops an entry from the index. The caller holds s.mu.
func (s *Store) forget(i id) {
	if e := s.index[i]; e != nil {
		s.stats.Bytes -= e.size
		delete(s.index, i)
		s.noteRemoved(i)
	}
}

// noteRemoved records that the KV block i left the store. The caller holds
// s.mu.
func (s *Store) noteRemoved(i id) {
	if i.kind != KindKV {
		return
	}
	s.removed = append(s.removed, i.hash)
	if s.notify != nil {
		s.notify()
	}
}

// TakeRemoved returns the hashes of the KV blocks that left the store since
// the last call: removed to stay within the budget, skipped as corrupt, or
// whose queued write failed. A block written again after leaving may be
// among them; HasKV tells.
func (s *Store) TakeRemoved() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.removed
	s.removed = nil
	return out
}

// Put queues it to be written and reports whether it was queued (or is
// held already). With wait false it never blocks: past the queue's bound
// the item is dropped and counted. With wait true (at shutdown) it waits
// for room.
func (s *Store) Put(it *Item, wait bool) bool {
	i := id{it.Kind, it.Hash}
	size := it.bytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.pending[i] != nil || s.index[i] != nil && s.index[i].end == it.End {
		return true
	}
	if size > s.stats.Budget {
		s.stats.DroppedOversized++
		return false
	}
	for s.stats.Queued > 0 && s.stats.Queued+size > s.stats.QueueLimit {
		if !wait {
			s.stats.Dropped++
			return false
		}
		s.cond.Wait()
		if s.closed {
			return false
		}
	}
	s.pending[i] = it
	s.queue = append(s.queue, it)
	s.stats.Queued += size
	s.cond.Broadcast()
	return true
}

// Room reports whether an item of n float32 slots and tokens tokens would
// be queued now, so that a caller can skip copying it out of the backend.
func (s *Store) Room(floats, tokens int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := headerSize + 8*int64(tokens) + 4*int64(floats)
	return !s.closed && size <= s.stats.Budget && (s.stats.Queued == 0 || s.stats.Queued+size <= s.stats.QueueLimit)
}

// Drop counts an item the caller did not Put because Room said no.
func (s *Store) Drop() {
	s.mu.Lock()
	s.stats.Dropped++
	s.mu.Unlock()
}

// Flush waits until every queued item is written.
func (s *Store) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 && !s.closed {
		s.cond.Wait()
	}
}

// Close writes what is queued, stops the writer and unlocks the
// directory.
func (s *Store) Close() error {
	s.Flush()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	s.unlock()
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for i := range s.index {
		if i.kind == KindKV {
			st.KVFiles++
		} else {
			st.States++
		}
	}
	return st
}

func (s *Store) writer() {
	defer close(s.done)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			return
		}
		it := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		start := time.Now()
		size, err := s.write(it)
		s.mu.Lock()
		i := id{it.Kind, it.Hash}
		delete(s.pending, i)
		s.stats.Queued -= it.bytes()
		if err != nil {
			s.stats.Dropped++
			s.noteRemoved(i)
			if !s.logged["write"] {
				s.logged["write"] = true
				s.logf("prefix cache: writing %s: %v (dropped; later failures are counted only)", s.name(i), err)
			}
		} else {
			if old := s.index[i]; old != nil { // replaced: not a removal
				s.stats.Bytes -= old.size
			}
			s.index[i] = &entry{parent: it.Parent, end: it.End, size: size, lastUse: time.Now().UnixNano()}
			s.stats.Bytes += size
			s.stats.Writes++
			s.stats.WriteBytes += uint64(size)
			s.stats.WriteSeconds += time.Since(start).Seconds()
			if s.stats.Bytes > s.stats.Budget {
				s.collect()
			}
		}
		s.cond.Broadcast()
	}
}

// write writes it under a temporary name and renames it.
func (s *Store) write(it *Item) (int64, error) {
	hdr, body := encodeItem(it, s.key)
	f, err := os.CreateTemp(s.dir, ".tmp-")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	_, err = f.Write(hdr)
	if err == nil {
		_, err = f.Write(body)
	}
	if err == nil {
		_, err = f.Write(floatBytes(it.Data))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.name(id{it.Kind, it.Hash}))
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return it.bytes(), nil
}

// collect removes the least recently used states while the files exceed
// the budget, and the KV blocks that no state (written or queued) needs.
// The caller holds s.mu.
func (s *Store) collect() {
	var states []id
	for i := range s.index {
		if i.kind == KindState {
			states = append(states, i)
		}
	}
	slices.SortFunc(states, func(a, b id) int { return cmp.Compare(s.index[a].lastUse, s.index[b].lastUse) })
	for {
		s.collectBlocks()
		if s.stats.Bytes <= s.stats.Budget || len(states) == 0 {
			return
		}
		s.remove(states[0])
		states = states[1:]
	}
}

// collectBlocks removes the KV blocks on no state's chain.
func (s *Store) collectBlocks() {
	need := map[uint64]bool{}
	mark := func(h uint64) {
		for !need[h] {
			e := s.index[id{KindKV, h}]
			var parent uint64
			switch {
			case e != nil:
				parent = e.parent
			case s.pending[id{KindKV, h}] != nil:
				parent = s.pending[id{KindKV, h}].Parent
			default:
				return
			}
			need[h] = true
			if parent == 0 {
				return
			}
			h = parent
		}
	}
	for i := range s.index {
		if i.kind == KindState {
			mark(i.hash)
		}
	}
	for i := range s.pending {
		if i.kind == KindState {
			mark(i.hash)
		}
	}
	for i := range s.index {
		if i.kind == KindKV && !need[i.hash] && s.pending[i] == nil {
			s.remove(i)
		}
	}
}

func (s *Store) remove(i id) {
	s.forget(i)
	s.stats.Evicted++
	os.Remove(s.name(i))
}
