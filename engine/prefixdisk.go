package engine

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/govinfer/govinfer/internal/prefixdisk"
	"github.com/govinfer/govinfer/model"
)

// The prefix cache's disk tier (Config.PrefixDisk). A kept point leaving
// memory (evicted, or dropped when the engine closes) or the host tier is
// copied off the backend and handed to a prefixdisk.Store, which writes
// its KV blocks (each once, shared by every point below it) and its
// recurrent state in the background. A request whose longest cached prefix
// is on disk but not in memory has it read back into the memory tier
// before it starts, off the engine goroutine (prefixtier.go), and resumes
// from it as from any kept point: the bytes are the ones saved, so its
// tokens and logits are those of a cold run, bit for bit. Writes never
// wait: past the store's queue bound (the disk slower than eviction) a
// point is dropped and counted, and recomputed when asked for again.

// DiskTier configures the prefix cache's disk tier.
type DiskTier struct {
	// Dir is the directory the states are kept in (a subdirectory per
	// model key). One process at a time uses it for a given model.
	Dir string
	// Budget bounds the bytes of the files (the least recently used
	// states are removed past it). It must be positive.
	Budget int64
	// Key identifies what changes the numbers beyond what the engine
	// knows (the backend, the KV cache type, the model's shapes): the
	// checkpoint's weights (prefixdisk.CheckpointID), the quantization, a
	// LoRA adapter's name and hash. Entries of another key are never read.
	Key []byte
	// QueueBytes bounds the bytes waiting to be written; 0 means
	// prefixdisk.DefaultQueueBytes.
	QueueBytes int64
	// Logf reports skipped files and dropped writes; nil is silent.
	Logf func(format string, args ...any)
}

// diskKey is the store's key: the caller's, the backend, the KV cache type
// and the model's configuration.
func diskKey(m *model.Model, d *DiskTier) [32]byte {
	h := sha256.New()
	cfg, _ := json.Marshal(m.Config())
	for _, part := range [][]byte{[]byte("govinfer prefix state 1"), d.Key, []byte(m.Backend().Name()),
		[]byte(m.KVCacheType().String()), cfg} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// openDisk opens the store of d; notify is called when KV blocks leave it
// (prefixdisk.Options.Notify).
func openDisk(m *model.Model, d *DiskTier, notify func()) (*prefixdisk.Store, error) {
	lim := prefixdisk.Limits{BlockTokens: PrefixBlock, KVFloats: m.KVBlockFloats(PrefixBlock),
		StateFloats: m.RecurrentFloats(), MaxEnd: m.Config().MaxContext()}
	s, err := prefixdisk.Open(d.Dir, diskKey(m, d), lim, prefixdisk.Options{Budget: d.Budget, QueueBytes: d.QueueBytes, Logf: d.Logf, Notify: notify})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return s, nil
}

// DiskUsage is the disk tier's state (Stats.Disk).
type DiskUsage = prefixdisk.Stats

// DiskSpans returns what the disk tier holds as the spans an observer is
// told of (PrefixSpan, Tier TierDisk): for each kept point on disk, the
// blocks from the previous one on its prefix, in an order where every
// span's parent comes first. Spans of image tokens or of LoRA adapters'
// chains, or whose tokens cannot be read or do not give the block's hash,
// are left out with the spans after them. It is for a new
// observer (KV events after a restart); it reads the store and the files'
// tokens and is safe to call from any goroutine. Nil without a disk tier.
func (e *Engine) DiskSpans() []PrefixSpan {
	if e.cache == nil || e.cache.disk == nil {
		return nil
	}
	d := e.cache.disk
	children := map[uint64][]prefixdisk.Block{}
	for _, b := range d.Blocks() {
		children[b.Parent] = append(children[b.Parent], b)
	}
	for _, c := range children {
		slices.SortFunc(c, func(a, b prefixdisk.Block) int { return cmp.Compare(a.Hash, b.Hash) })
	}
	var out []PrefixSpan
	var walk func(parent uint64, end int, pending []prefixdisk.Block)
	walk = func(parent uint64, end int, pending []prefixdisk.Block) {
		for _, b := range children[parent] {
			if b.End != end+PrefixBlock || b.Hash == parent {
				continue // not a block after parent: another prefix's
			}
			path := append(slices.Clip(pending), b)
			if !b.Point {
				walk(b.Hash, b.End, path)
				continue
			}
			sp := PrefixSpan{Tier: TierDisk, Start: path[0].End - PrefixBlock, End: b.End, ParentHash: path[0].Parent, Point: true}
			ok := true
			for _, p := range path {
				toks, err := d.Tokens(p.Hash)
				// The hash must be the one the tokens give, from the base
				// model's start: not an adapter's chain, not a file whose
				// tokens are not what they claim.
				if err != nil || len(toks) != PrefixBlock || slices.ContainsFunc(toks, func(t int) bool { return t < 0 }) ||
					blockHashesFrom(p.Parent, toks)[0] != p.Hash {
					ok = false
					break
				}
				sp.Tokens = append(sp.Tokens, toks...)
				sp.BlockHashes = append(sp.BlockHashes, p.Hash)
			}
			if ok {
				out = append(out, sp)
				walk(b.Hash, b.End, nil)
			}
		}
	}
	walk(0, 0, nil)
	return out
}
