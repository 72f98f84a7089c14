package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/govinfer/govinfer/internal/prefixdisk"
	"github.com/govinfer/govinfer/model"
)

// The prefix cache's tiers. The memory tier (Config.StateMemory) is the
// backend's memory: a device's own memory on Vulkan, host memory on the
// CPU backend. Below it, on a backend with its own memory, host memory
// may be a second tier (Config.PrefixHost), and a directory the last one
// (Config.PrefixDisk). A kept point leaving a tier goes to the next one
// down (memory to host, host to disk; memory to disk without a host
// tier), and a request whose prefix is deeper in a lower tier than in
// memory has it copied back into memory and resumes from it as from any
// kept point: the bytes are the ones saved, so its tokens and logits are
// a cold run's, bit for bit. Copying back from host memory happens on the
// engine goroutine when the request starts (an upload); reading from disk
// happens before, off the engine goroutine, while the request waits in
// the queue (prefetch), so that the other sequences' steps go on.

// Tier names a level of the prefix cache (PrefixSpan.Tier).
type Tier uint8

// The tiers.
const (
	// TierDevice is a device's own memory: the memory tier on a backend
	// with its own memory (the Vulkan backend).
	TierDevice Tier = iota + 1
	// TierHost is host memory: the memory tier on the CPU backend, or the
	// second tier under a device's memory (Config.PrefixHost).
	TierHost
	// TierDisk is the disk tier (Config.PrefixDisk).
	TierDisk
)

// String returns "device", "host" or "disk".
func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// HostUsage is the host tier's state (Stats.Host; zero without one).
type HostUsage struct {
	// Bytes is the memory the tier's KV blocks and states take, Budget
	// Config.PrefixHost.
	Bytes, Budget int64
	// States and KVBlocks count what it holds.
	States, KVBlocks int
	// WriteBytes counts the bytes copied into it from device memory,
	// ReadBytes those copied back.
	WriteBytes, ReadBytes uint64
	// Evicted counts the states that left it for the disk tier (or for
	// good, without one).
	Evicted uint64
}

// hostEntry is a KV block or state in the host tier.
type hostEntry struct {
	it      *prefixdisk.Item
	lastUse uint64
}

// hostTier is host memory under a device's memory: KV blocks and states
// as the float32 slots the backend gave (model.KVBlock.Floats), keyed as
// the disk tier keys them. It is used by the engine goroutine only; Stats
// reads its usage under mu.
type hostTier struct {
	budget int64
	bytes  int64
	kv     map[uint64]*hostEntry // by the chained hash of the prefix the block ends
	st     map[uint64]*hostEntry // by the chained hash of the prefix the state ends
	tick   uint64

	mu    sync.Mutex
	usage HostUsage
}

func newHostTier(budget int64) *hostTier {
	return &hostTier{budget: budget, kv: map[uint64]*hostEntry{}, st: map[uint64]*hostEntry{}, usage: HostUsage{Budget: budget}}
}

func itemBytes(it *prefixdisk.Item) int64 { return 4 * int64(len(it.Data)) }

func (h *hostTier) hasKV(hash, parent uint64) bool {
	e := h.kv[hash]
	return e != nil && e.it.Parent == parent
}

func (h *hostTier) hasState(hash uint64, end int) bool {
	e := h.st[hash]
	return e != nil && e.it.End == end
}

// kvItem returns the block of the prefix ending with hash after parent, or
// nil (absent, or another prefix with the same hash).
func (h *hostTier) kvItem(hash, parent uint64, end int, tokens []int) *prefixdisk.Item {
	e := h.kv[hash]
	if e == nil || e.it.Parent != parent || e.it.End != end || !slices.Equal(e.it.Tokens, tokens) {
		return nil
	}
	return e.it
}

// stateItem returns the state at end of the prefix ending with hash, or
// nil, and marks it used.
func (h *hostTier) stateItem(hash uint64, end int) *prefixdisk.Item {
	e := h.st[hash]
	if e == nil || e.it.End != end {
		return nil
	}
	h.tick++
	e.lastUse = h.tick
	return e.it
}

func (h *hostTier) add(it *prefixdisk.Item) {
	m := h.kv
	if it.Kind == prefixdisk.KindState {
		m = h.st
	}
	h.tick++
	if old := m[it.Hash]; old != nil {
		h.bytes -= itemBytes(old.it)
	}
	m[it.Hash] = &hostEntry{it: it, lastUse: h.tick}
	h.bytes += itemBytes(it)
	h.mu.Lock()
	h.usage.WriteBytes += uint64(itemBytes(it))
	h.mu.Unlock()
}

// chain returns the KV blocks of the host state st's prefix, from the
// first, or nil when one is missing.
func (h *hostTier) chain(st *prefixdisk.Item) []*prefixdisk.Item {
	var out []*prefixdisk.Item
	for hash, end := st.Hash, st.End; end > 0; {
		e := h.kv[hash]
		if e == nil || e.it.End != end {
			return nil
		}
		out = append(out, e.it)
		hash, end = e.it.Parent, end-PrefixBlock
	}
	slices.Reverse(out)
	return out
}

// oldest returns the least recently used state, or nil.
func (h *hostTier) oldest() *prefixdisk.Item {
	var victim *hostEntry
	for _, e := range h.st {
		if victim == nil || e.lastUse < victim.lastUse {
			victim = e
		}
	}
	if victim == nil {
		return nil
	}
	return victim.it
}

// remove drops the state st and the KV blocks no other state needs, and
// returns the hashes of those blocks and the bytes freed.
func (h *hostTier) remove(st *prefixdisk.Item) ([]uint64, int64) {
	before := h.bytes
	delete(h.st, st.Hash)
	h.bytes -= itemBytes(st)
	need := map[uint64]bool{}
	for _, e := range h.st {
		for _, b := range h.chain(e.it) {
			need[b.Hash] = true
		}
	}
	var gone []uint64
	for hash, e := range h.kv {
		if !need[hash] {
			gone = append(gone, hash)
			h.bytes -= itemBytes(e.it)
			delete(h.kv, hash)
		}
	}
	slices.Sort(gone)
	h.mu.Lock()
	h.usage.Evicted++
	h.mu.Unlock()
	return gone, before - h.bytes
}

func (h *hostTier) read(n int64) {
	h.mu.Lock()
	h.usage.ReadBytes += uint64(n)
	h.mu.Unlock()
}

// snapshot returns the tier's usage.
func (h *hostTier) snapshot() HostUsage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.usage
}

// note publishes the tier's contents to its usage.
func (h *hostTier) note() {
	h.mu.Lock()
	h.usage.Bytes, h.usage.States, h.usage.KVBlocks = h.bytes, len(h.st), len(h.kv)
	h.mu.Unlock()
}

// link is a KV block of a kept point's prefix on its way to a lower tier,
// from memory or from the host tier.
type link struct {
	hash, parent uint64
	end          int
	tokens       []int
	data         func(context.Context) ([]float32, error)
}

// pathOf returns the memory nodes of n's prefix, from the first block.
func (c *prefixCache) pathOf(n *prefixNode) []*prefixNode {
	var path []*prefixNode
	for p := n; p != &c.root; p = p.parent {
		path = append(path, p)
	}
	slices.Reverse(path)
	return path
}

// memLinks returns the links of the memory nodes of path.
func memLinks(path []*prefixNode) []link {
	out := make([]link, len(path))
	for i, p := range path {
		out[i] = link{hash: p.hash, parent: p.parent.hash, end: p.end, tokens: p.tokens, data: p.kv.Floats}
	}
	return out
}

// itemLinks returns the links of host items.
func itemLinks(items []*prefixdisk.Item) []link {
	out := make([]link, len(items))
	for i, it := range items {
		out[i] = link{hash: it.Hash, parent: it.Parent, end: it.End, tokens: it.Tokens,
			data: func(context.Context) ([]float32, error) { return it.Data, nil }}
	}
	return out
}

// reportLower tells the observer that tier t now holds the kept point at
// the end of chain, of which the blocks added are new to it. Spans with
// an image's tokens, and chains of LoRA adapters, are not reported: the
// tiers keep the cache's keys, not the prompt's tokens, images and
// adapters that an event names.
func (c *prefixCache) reportLower(t Tier, chain []link, added int, bytes int64) {
	if c.obs == nil || len(chain) == 0 || !baseChain(chain[0].hash, chain[0].tokens) {
		return
	}
	last := chain[len(chain)-1]
	sp := PrefixSpan{Tier: t, Start: last.end, End: last.end, ParentHash: last.hash, Point: true, Bytes: bytes}
	if added > 0 {
		first := chain[len(chain)-added]
		sp.Start, sp.ParentHash = first.end-PrefixBlock, first.parent
		for _, l := range chain[len(chain)-added:] {
			for _, tok := range l.tokens {
				if tok < 0 {
					return
				}
			}
			sp.Tokens = append(sp.Tokens, l.tokens...)
			sp.BlockHashes = append(sp.BlockHashes, l.hash)
		}
	}
	c.obs.PrefixStored(sp)
}

// baseChain reports whether hash is the hash of a prefix's first block of
// tokens for the base model: an adapter set's chains start from its seed
// (blockHashesFrom), so their first block's hash is another.
func baseChain(hash uint64, tokens []int) bool {
	return len(tokens) == PrefixBlock && blockHashesFrom(0, tokens)[0] == hash
}

// reportRemoved tells the observer that tier t no longer holds blocks.
func (c *prefixCache) reportRemoved(t Tier, hashes []uint64, bytes int64) {
	if c.obs != nil && len(hashes) > 0 {
		c.obs.PrefixRemoved(PrefixSpan{Tier: t, BlockHashes: hashes, Point: true, Bytes: bytes})
	}
}

// spill hands the kept point n, leaving memory, to the next tier down:
// the host tier, or the disk tier without one. With wait false
// (eviction) the disk tier gives up when its write queue is full; with
// wait true (closing) it waits for room, and the point goes straight to
// disk, where it outlives the process.
func (c *prefixCache) spill(n *prefixNode, wait bool) {
	if n.state == nil {
		return
	}
	if c.host != nil && !wait {
		c.toHost(n)
		return
	}
	if c.disk != nil {
		st := n.state
		c.toDisk(memLinks(c.pathOf(n)), n.hash, n.end, st.RopeDelta(), st.Floats, wait)
	}
}

// toHost copies the kept point n, leaving device memory, into the host
// tier, evicting its least recently used states (to disk) to make room.
func (c *prefixCache) toHost(n *prefixNode) {
	h := c.host
	path := c.pathOf(n)
	missing := func() int64 {
		var b int64
		for _, p := range path {
			if !h.hasKV(p.hash, p.parent.hash) {
				b += p.kv.Bytes()
			}
		}
		if !h.hasState(n.hash, n.end) {
			b += n.state.Bytes()
		}
		return b
	}
	for h.bytes+missing() > h.budget {
		if !c.evictHost() {
			break
		}
	}
	if h.bytes+missing() > h.budget {
		// Larger than the whole tier: straight to disk.
		if c.disk != nil {
			c.toDisk(memLinks(path), n.hash, n.end, n.state.RopeDelta(), n.state.Floats, false)
		}
		return
	}
	ctx := context.Background()
	added := 0
	var bytes int64
	for _, p := range path {
		if h.hasKV(p.hash, p.parent.hash) {
			continue
		}
		data, err := p.kv.Floats(ctx)
		if err != nil {
			return
		}
		h.add(&prefixdisk.Item{Kind: prefixdisk.KindKV, Hash: p.hash, Parent: p.parent.hash, End: p.end, Tokens: p.tokens, Data: data})
		added++
		bytes += p.kv.Bytes()
	}
	if h.stateItem(n.hash, n.end) == nil {
		data, err := n.state.Floats(ctx)
		if err != nil {
			return
		}
		h.add(&prefixdisk.Item{Kind: prefixdisk.KindState, Hash: n.hash, End: n.end, Delta: n.state.RopeDelta(), Data: data})
		bytes += n.state.Bytes()
	}
	h.note()
	c.reportLower(TierHost, memLinks(path), added, bytes)
}

// evictHost moves the host tier's least recently used state to the disk
// tier (or drops it without one), with the blocks no other state needs,
// and reports whether it freed anything. Without a state it drops the
// blocks left (those of a copy that failed half way).
func (c *prefixCache) evictHost() bool {
	h := c.host
	st := h.oldest()
	if st == nil {
		if len(h.kv) == 0 {
			return false
		}
		var gone []uint64
		for hash, e := range h.kv {
			gone = append(gone, hash)
			h.bytes -= itemBytes(e.it)
		}
		clear(h.kv)
		h.note()
		c.reportRemoved(TierHost, gone, 0)
		return true
	}
	if c.disk != nil {
		if chain := h.chain(st); chain != nil {
			c.toDisk(itemLinks(chain), st.Hash, st.End, st.Delta,
				func(context.Context) ([]float32, error) { return st.Data, nil }, false)
		}
	}
	gone, freed := h.remove(st)
	h.note()
	c.reportRemoved(TierHost, gone, freed)
	return true
}

// toDisk hands a kept point (the blocks of its prefix, from the first, and
// its state) to the disk tier, writing the blocks the store lacks. With
// wait false it gives up when the write queue is full, counting the drop.
func (c *prefixCache) toDisk(chain []link, hash uint64, end, delta int, state func(context.Context) ([]float32, error), wait bool) {
	d := c.disk
	ctx := context.Background()
	added := 0
	var bytes int64
	for _, l := range chain {
		if d.HasKV(l.hash, l.parent) {
			continue
		}
		if !wait && !d.Room(c.m.KVBlockFloats(PrefixBlock), PrefixBlock) {
			d.Drop()
			return
		}
		data, err := l.data(ctx)
		if err != nil || !d.Put(&prefixdisk.Item{Kind: prefixdisk.KindKV, Hash: l.hash, Parent: l.parent,
			End: l.end, Tokens: l.tokens, Data: data}, wait) {
			return
		}
		added++
		bytes += 4 * int64(len(data))
	}
	if !d.HasState(hash, end) {
		data, err := state(ctx)
		if err != nil || !d.Put(&prefixdisk.Item{Kind: prefixdisk.KindState, Hash: hash, End: end, Delta: delta, Data: data}, wait) {
			return
		}
		bytes += 4 * int64(len(data))
	}
	c.reportLower(TierDisk, chain, added, bytes)
}

// spillAll hands every kept point, of memory and of the host tier, to
// the disk tier, waiting for room, and waits until the store has written
// them.
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
	if h := c.host; h != nil {
		for _, e := range h.st {
			st := e.it
			if chain := h.chain(st); chain != nil {
				c.toDisk(itemLinks(chain), st.Hash, st.End, st.Delta,
					func(context.Context) ([]float32, error) { return st.Data, nil }, true)
			}
		}
	}
	c.disk.Flush()
}

// drainDisk reports the KV blocks that left the disk tier.
func (c *prefixCache) drainDisk() {
	if c.disk != nil {
		c.reportRemoved(TierDisk, c.disk.TakeRemoved(), 0)
	}
}

// loadItem is a KV block or state a load brings into memory.
type loadItem struct {
	kind         prefixdisk.Kind
	hash, parent uint64
	end          int
	tokens       []int            // a block's cache-key tokens
	it           *prefixdisk.Item // the host tier's, or read from disk
	kv           *model.KVBlock
	st           *model.RecurrentState
}

// loadPlan is what resuming a prompt deeper than memory holds takes: the
// memory nodes of its first blocks (pinned while the plan is open), the
// blocks after them and the state at the end, from the lower tiers.
type loadPlan struct {
	depth  int           // blocks
	chain  []*prefixNode // memory's nodes of blocks [0, len(chain))
	blocks []*loadItem   // blocks [len(chain), depth)
	state  *loadItem     // the state at depth*PrefixBlock
	bytes  int64         // the memory they take
	disk   bool          // some item is read from disk
	have   int           // tokens memory resumed at when planned
}

// tier returns the deepest tier the plan reads from.
func (p *loadPlan) tier() Tier {
	if p.disk {
		return TierDisk
	}
	return TierHost
}

// lowerHasKV and lowerHasState say whether a tier below memory holds a
// block or state (with withDisk false, the host tier only).
func (c *prefixCache) lowerHasKV(hash, parent uint64, withDisk bool) bool {
	return c.host != nil && c.host.hasKV(hash, parent) || withDisk && c.disk != nil && c.disk.HasKV(hash, parent)
}

func (c *prefixCache) lowerHasState(hash uint64, end int, withDisk bool) bool {
	return c.host != nil && c.host.hasState(hash, end) || withDisk && c.disk != nil && c.disk.HasState(hash, end)
}

// plan returns how tokens (hashes its BlockHashes), which memory resumes
// at have tokens, could resume deeper with the lower tiers' help (with
// withDisk false, the host tier's only), or nil: the deepest block
// i+1 <= maxResume such that every block up to it is in memory or below
// and its state is in one of the tiers below. The plan's memory nodes are
// pinned; close releases them.
func (c *prefixCache) plan(tokens []int, hashes []uint64, have int, withDisk bool) *loadPlan {
	if c.host == nil && (c.disk == nil || !withDisk) {
		return nil
	}
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
				if ch.state == nil && c.lowerHasState(h, end, withDisk) {
					best = i + 1
				}
				parent = h
				continue
			}
			n = nil
		}
		if !c.lowerHasKV(h, parent, withDisk) {
			break
		}
		if c.lowerHasState(h, end, withDisk) {
			best = i + 1
		}
		parent = h
	}
	if best*PrefixBlock <= have {
		return nil
	}
	p := &loadPlan{depth: best, have: have}
	n = &c.root
	parent = 0
	for i := range best {
		h := hashes[i]
		end := (i + 1) * PrefixBlock
		if n != nil {
			if n = n.children[h]; n != nil {
				p.chain = append(p.chain, n)
				parent = h
				continue
			}
		}
		it := &loadItem{kind: prefixdisk.KindKV, hash: h, parent: parent, end: end, tokens: tokens[i*PrefixBlock : end]}
		if c.host != nil {
			it.it = c.host.kvItem(h, parent, end, it.tokens)
		}
		p.disk = p.disk || it.it == nil
		p.blocks = append(p.blocks, it)
		p.bytes += PrefixBlock * c.m.KVBytesPerToken()
		parent = h
	}
	end := best * PrefixBlock
	p.state = &loadItem{kind: prefixdisk.KindState, hash: hashes[best-1], end: end}
	if c.host != nil {
		p.state.it = c.host.stateItem(p.state.hash, end)
	}
	p.disk = p.disk || p.state.it == nil
	p.bytes += c.m.RecurrentBytes()
	pin(p.chain, 1)
	return p
}

// fetch reads the plan's items the host tier does not hold from disk and
// makes the model's blocks and state of them all. It may run off the
// engine goroutine (it uses the store and the model, both safe for
// concurrent use, and the plan's items only). On failure it frees what it
// made.
func (c *prefixCache) fetch(p *loadPlan) (err error) {
	items := append(slices.Clone(p.blocks), p.state)
	defer func() {
		if err != nil {
			p.free()
		}
	}()
	for _, it := range items {
		if it.it == nil {
			if it.it, err = c.disk.Get(it.kind, it.hash, it.parent, it.end, it.tokens); err != nil {
				return err
			}
		} else if c.host != nil {
			c.host.read(itemBytes(it.it))
		}
		if it.kind == prefixdisk.KindKV {
			it.kv, err = c.m.NewKVBlock(it.end-PrefixBlock, PrefixBlock, it.it.Data)
		} else {
			it.st, err = c.m.NewRecurrentState(it.end, it.it.Delta, it.it.Data)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// free releases what fetch made.
func (p *loadPlan) free() {
	for _, it := range append(slices.Clone(p.blocks), p.state) {
		if it.kv != nil {
			it.kv.Free()
			it.kv = nil
		}
		if it.st != nil {
			it.st.Free()
			it.st = nil
		}
	}
}

// close releases the plan's pins.
func (p *loadPlan) close() { pin(p.chain, -1) }

// install puts what fetch made into memory, reported as the memory
// tier's stores are (store), and closes the plan. prompt, images and lora
// are the request's, for the report. Blocks or a state that memory gained
// meanwhile are kept and the copies freed.
func (c *prefixCache) install(p *loadPlan, tokens []int, prompt []int, images []Image, lora []SpanLoRA) {
	defer p.close()
	n := &c.root
	for _, ch := range p.chain {
		n = ch
	}
	var added []*prefixNode
	for _, it := range p.blocks {
		if ch := n.children[it.hash]; ch != nil {
			it.kv.Free()
			n = ch
			continue
		}
		ch := &prefixNode{parent: n, children: map[uint64]*prefixNode{}, hash: it.hash, tokens: slices.Clone(it.tokens), end: it.end, kv: it.kv}
		n.children[ch.hash] = ch
		c.bytes += it.kv.Bytes()
		added = append(added, ch)
		n = ch
	}
	stored := false
	if n.state == nil {
		n.state = p.state.st
		c.bytes += n.state.Bytes()
		stored = true
		c.tick++
		n.lastUse = c.tick
		n.prio = c.floor + 1
	} else {
		p.state.st.Free()
	}
	if c.obs == nil || !stored && len(added) == 0 {
		return
	}
	end := p.depth * PrefixBlock
	sp := PrefixSpan{Tier: c.tier, Start: end, End: end, ParentHash: n.hash, Point: stored}
	if stored {
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
	c.obs.PrefixStored(sp)
}

// fromHost extends path, s's memory hit, from the host tier when it holds
// a deeper point: it makes room for what it copies and for the request's
// own need, uploads it (on the engine goroutine: a copy), and returns the
// new path and the tokens the host tier added.
func (e *Engine) fromHost(s *Stream, path []*prefixNode, need int64) ([]*prefixNode, int) {
	c := e.cache
	p := c.plan(s.key, s.hashes, len(path)*PrefixBlock, false)
	if p == nil {
		return path, 0
	}
	if p.disk || !e.makeRoom(p.bytes+need) || c.fetch(p) != nil {
		p.close()
		return path, 0
	}
	c.install(p, s.key, s.req.Prompt, s.req.Images, spanLoRA(s.req.LoRA))
	c.host.note()
	e.noteCache()
	got := c.lookup(s.key, s.hashes)
	return got, (len(got) - len(path)) * PrefixBlock
}

// prefetch is a read of a waiting request's prefix from disk, off the
// engine goroutine.
type prefetch struct {
	s    *Stream
	plan *loadPlan
	done chan struct{}
	err  error
}

// maxPrefetchTries bounds the reads for one request: a file that fails its
// checks leaves the store, so the next plan reads the next deepest point.
const maxPrefetchTries = 4

// prefetching reports whether s waits for its prefix to be read from disk:
// a read of it is under way, or it starts one now. The engine runs one
// read at a time; a request whose prefix is on disk waits for its turn.
// The read's memory is reserved in the budget until it lands in the
// prefix cache.
func (e *Engine) prefetching(s *Stream) bool {
	c := e.cache
	if c == nil || c.disk == nil {
		return false
	}
	if e.fetch != nil {
		return e.fetch.s == s || s.fetchTries < maxPrefetchTries && e.wantsDisk(s)
	}
	if s.fetchTries >= maxPrefetchTries {
		return false
	}
	have := len(c.lookup(s.key, s.hashes)) * PrefixBlock
	p := c.plan(s.key, s.hashes, have, true)
	if p == nil {
		return false
	}
	if !p.disk {
		p.close() // the host tier's: start copies it
		return false
	}
	if !e.makeRoom(p.bytes + e.requestBytes(s.req)) {
		p.close()
		return false // start resumes from what memory holds
	}
	s.fetchTries++
	e.budget.running.Add(p.bytes)
	e.budget.note()
	f := &prefetch{s: s, plan: p, done: make(chan struct{})}
	e.fetch = f
	e.fetchWG.Add(1)
	hook := e.fetchHook
	go func() {
		defer e.fetchWG.Done()
		if hook != nil {
			hook()
		}
		f.err = c.fetch(p)
		close(f.done)
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}()
	return true
}

// wantsDisk reports whether s's prefix is deeper on disk than in memory.
func (e *Engine) wantsDisk(s *Stream) bool {
	c := e.cache
	have := len(c.lookup(s.key, s.hashes)) * PrefixBlock
	p := c.plan(s.key, s.hashes, have, true)
	if p == nil {
		return false
	}
	p.close()
	return p.disk
}

// landFetch puts a finished read into the prefix cache (wait: after
// waiting for it), releasing its reservation.
func (e *Engine) landFetch(wait bool) {
	f := e.fetch
	if f == nil {
		return
	}
	if wait {
		<-f.done
	}
	select {
	case <-f.done:
	default:
		return
	}
	e.fetch = nil
	e.budget.running.Add(-f.plan.bytes)
	if f.err != nil {
		f.plan.close()
		e.noteCache()
		return
	}
	e.cache.install(f.plan, f.s.key, f.s.req.Prompt, f.s.req.Images, spanLoRA(f.s.req.LoRA))
	f.s.lowerEnd = f.plan.depth * PrefixBlock
	f.s.lowerTokens = f.s.lowerEnd - f.plan.have
	f.s.lowerTier = f.plan.tier()
	e.noteCache()
}
