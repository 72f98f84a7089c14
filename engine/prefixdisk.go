package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/govinfer/govinfer/internal/prefixdisk"
	"github.com/govinfer/govinfer/model"
)

// The prefix cache's disk tier (Config.PrefixDisk). A kept point leaving
// memory (evicted, or dropped when the engine closes) is copied off the
// backend and handed to a prefixdisk.Store, which writes its KV blocks
// (each once, shared by every point below it) and its recurrent state in
// the background. A request whose longest cached prefix is on disk but not
// in memory has it read back into the memory tier before it starts, and
// resumes from it as from any kept point: the bytes are the ones saved, so
// its tokens and logits are those of a cold run, bit for bit. Reads happen
// on the engine goroutine, only on such a miss; writes never wait: past the
// store's queue bound (the disk slower than eviction) a point is dropped
// and counted, and recomputed when asked for again.

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

func openDisk(m *model.Model, d *DiskTier) (*prefixdisk.Store, error) {
	lim := prefixdisk.Limits{BlockTokens: PrefixBlock, KVFloats: m.KVBlockFloats(PrefixBlock),
		StateFloats: m.RecurrentFloats(), MaxEnd: m.Config().MaxContext()}
	s, err := prefixdisk.Open(d.Dir, diskKey(m, d), lim, prefixdisk.Options{Budget: d.Budget, QueueBytes: d.QueueBytes, Logf: d.Logf})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return s, nil
}

// DiskUsage is the disk tier's state (Stats.Disk).
type DiskUsage = prefixdisk.Stats

// spill hands the kept point n (its state and the KV blocks of its path
// the store lacks) to the disk tier. With wait false (eviction) it gives
// up when the write queue is full, counting the drop; with wait true
// (closing) it waits for room.
func (c *prefixCache) spill(n *prefixNode, wait bool) {
	if c.disk == nil || n.state == nil {
		return
	}
	var path []*prefixNode
	for p := n; p != &c.root; p = p.parent {
		path = append(path, p)
	}
	slices.Reverse(path)
	ctx := context.Background()
	for _, p := range path {
		if c.disk.HasKV(p.hash, p.parent.hash) {
			continue
		}
		if !wait && !c.disk.Room(c.m.KVBlockFloats(PrefixBlock), PrefixBlock) {
			c.disk.Drop()
			return
		}
		data, err := p.kv.Floats(ctx)
		if err != nil || !c.disk.Put(&prefixdisk.Item{Kind: prefixdisk.KindKV, Hash: p.hash, Parent: p.parent.hash,
			End: p.end, Tokens: p.tokens, Data: data}, wait) {
			return
		}
	}
	if c.disk.HasState(n.hash, n.end) {
		return
	}
	data, err := n.state.Floats(ctx)
	if err != nil {
		return
	}
	c.disk.Put(&prefixdisk.Item{Kind: prefixdisk.KindState, Hash: n.hash, End: n.end, Delta: n.state.RopeDelta(), Data: data}, wait)
}

// spillAll hands every kept point to the disk tier, waiting for room, and
// waits until the store has written them.
func (c *prefixCache) spillAll() {
	if c.disk == nil {
		return
	}
	var walk func(n *prefixNode)
	walk = func(n *prefixNode) {
		for _, ch := range n.children {
			c.spill(ch, true)
			walk(ch)
		}
	}
	walk(&c.root)
	c.disk.Flush()
}

// diskPlan returns how deep (in blocks) tokens could resume with the disk
// tier's help: the deepest block i+1 <= maxResume such that every block up
// to it is in memory or on disk and its state is in one of them (0 when
// not beyond memory's own depth have).
func (c *prefixCache) diskPlan(tokens []int, hashes []uint64, have int) int {
	best := 0
	n := &c.root
	var parent uint64
	for i := 0; (i+1)*PrefixBlock <= maxResume(len(tokens)); i++ {
		h := hashes[i]
		end := (i + 1) * PrefixBlock
		if n != nil {
			if ch := n.children[h]; ch != nil {
				if !slices.Equal(ch.tokens, tokens[i*PrefixBlock:end]) {
					break // a hash collision: the memory tier's block wins
				}
				n = ch
				if ch.state != nil || c.disk.HasState(h, end) {
					best = i + 1
				}
				parent = h
				continue
			}
			n = nil
		}
		if !c.disk.HasKV(h, parent) {
			break
		}
		if c.disk.HasState(h, end) {
			best = i + 1
		}
		parent = h
	}
	if best <= have {
		return 0
	}
	return best
}

// loadBytes returns the memory reading the first depth blocks of tokens
// and the state at their end into the memory tier takes.
func (c *prefixCache) loadBytes(hashes []uint64, depth int) int64 {
	var b int64
	n := &c.root
	for i := range depth {
		if n != nil {
			n = n.children[hashes[i]]
		}
		if n == nil {
			b += PrefixBlock * c.m.KVBytesPerToken()
		}
	}
	if n == nil || n.state == nil {
		b += c.m.RecurrentBytes()
	}
	return b
}

// load reads the blocks of tokens up to depth that memory lacks, and the
// state at depth, from the disk tier into the memory tier. The caller has
// made room for loadBytes. On a failure (a file that fails its checks,
// which the store removes) it keeps what it read up to there only as long
// as some point needs it, and the request resumes from what memory holds.
func (c *prefixCache) load(tokens []int, hashes []uint64, depth int, prompt []int, images []Image, lora []SpanLoRA) (err error) {
	start := time.Now()
	n := &c.root
	var added []*prefixNode
	var read int64
	stateRead := false
	defer func() {
		if err != nil && len(added) > 0 {
			c.prune(added[len(added)-1], false)
			added = nil
		}
		c.diskReadSeconds += time.Since(start).Seconds()
		if err != nil || c.obs == nil {
			return
		}
		// Reported as the memory tier's stores are (store).
		end := depth * PrefixBlock
		sp := PrefixSpan{Start: end, End: end, ParentHash: n.hash, Point: stateRead}
		if stateRead {
			sp.Bytes = c.m.RecurrentBytes()
		}
		if len(added) > 0 {
			sp.Start, sp.ParentHash = added[0].end-PrefixBlock, added[0].parent.hash
			if prompt == nil {
				prompt = tokens
			}
			sp.Tokens = slices.Clone(prompt[sp.Start:sp.End])
			sp.Images = spanImages(images, c.m.Config().HiddenSize, sp.Start, sp.End)
			sp.LoRA = lora
			for _, a := range added {
				sp.BlockHashes = append(sp.BlockHashes, a.hash)
				sp.Bytes += a.kv.Bytes()
			}
		}
		if stateRead || len(added) > 0 {
			c.obs.PrefixStored(sp)
		}
	}()
	for i := range depth {
		end := (i + 1) * PrefixBlock
		toks := tokens[i*PrefixBlock : end]
		if ch := n.children[hashes[i]]; ch != nil {
			n = ch
			continue
		}
		it, err := c.disk.Get(prefixdisk.KindKV, hashes[i], n.hash, end, toks)
		if err != nil {
			return err
		}
		kv, err := c.m.NewKVBlock(i*PrefixBlock, PrefixBlock, it.Data)
		if err != nil {
			return err
		}
		ch := &prefixNode{parent: n, children: map[uint64]*prefixNode{}, hash: hashes[i], tokens: slices.Clone(toks), end: end, kv: kv}
		n.children[ch.hash] = ch
		c.bytes += kv.Bytes()
		read += kv.Bytes()
		added = append(added, ch)
		n = ch
	}
	if n.state == nil {
		it, err := c.disk.Get(prefixdisk.KindState, n.hash, 0, n.end, nil)
		if err != nil {
			return err
		}
		if n.state, err = c.m.NewRecurrentState(n.end, it.Delta, it.Data); err != nil {
			return err
		}
		c.bytes += n.state.Bytes()
		read += n.state.Bytes()
		stateRead = true
		c.tick++
		n.lastUse = c.tick
		n.prio = c.floor + 1
	}
	c.diskReadBytes += read
	return nil
}

// fromDisk extends path, r's memory hit, from the disk tier when it holds
// a deeper point: it makes room for what it reads and for the request's
// own state need, reads it, and returns the new path and the tokens the
// disk tier added. The memory nodes of the chain stay pinned meanwhile.
func (e *Engine) fromDisk(s *Stream, path []*prefixNode, need int64) ([]*prefixNode, int) {
	// A file that fails its checks leaves the store's index, so the next
	// plan resumes at the next deepest point, if any.
	for range 4 {
		got, n, retry := e.fromDiskOnce(s, path, need)
		if !retry {
			return got, n
		}
	}
	return path, 0
}

func (e *Engine) fromDiskOnce(s *Stream, path []*prefixNode, need int64) ([]*prefixNode, int, bool) {
	c := e.cache
	depth := c.diskPlan(s.key, s.hashes, len(path))
	if depth == 0 {
		return path, 0, false
	}
	// Pin the memory part of the chain so that making room spares it.
	var chain []*prefixNode
	n := &c.root
	for i := range depth {
		if n = n.children[s.hashes[i]]; n == nil {
			break
		}
		chain = append(chain, n)
	}
	pin(chain, 1)
	defer pin(chain, -1)
	if !e.makeRoom(c.loadBytes(s.hashes, depth) + need) {
		return path, 0, false
	}
	if err := c.load(s.key, s.hashes, depth, s.req.Prompt, s.req.Images, spanLoRA(s.req.LoRA)); err != nil {
		e.noteCache()
		return path, 0, true
	}
	e.noteCache()
	got := c.lookup(s.key, s.hashes)
	return got, (len(got) - len(path)) * PrefixBlock, false
}
