package engine

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/prefixdisk"
	"github.com/govinfer/govinfer/model"
)

// PrefixBlock is the granularity of prefix reuse, in tokens: the delta
// rule's chunk. The prefix cache keeps state only at multiples of it, and
// the engine cuts prefill there, so a request resumed from the cache runs
// the very pieces a cold run does and gets its results bit for bit (prefill
// is bitwise independent of cuts at multiples of 64; see model's
// TestPrefillCutsExact).
const PrefixBlock = 64

// BlockHashes returns the chained hashes of the whole PrefixBlock-token
// blocks of tokens: hash i covers tokens [0, (i+1)*PrefixBlock), computed as
// FNV-1a 64 over the previous hash and the block's tokens (little-endian
// uint32s). They are stable across runs and machines, so they can name
// blocks outside the process (KV events).
func BlockHashes(tokens []int) []uint64 { return blockHashesFrom(0, tokens) }

// blockHashesFrom is BlockHashes chained from prev instead of 0: a request
// with LoRA adapters chains from its adapter set's seed (loraSet.seed), so
// that its blocks are keyed apart from the base model's and other sets'.
func blockHashesFrom(prev uint64, tokens []int) []uint64 {
	n := len(tokens) / PrefixBlock
	out := make([]uint64, n)
	buf := make([]byte, 8+4*PrefixBlock)
	for i := range n {
		binary.LittleEndian.PutUint64(buf, prev)
		for j, t := range tokens[i*PrefixBlock : (i+1)*PrefixBlock] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(t))
		}
		h := fnv.New64a()
		h.Write(buf)
		prev = h.Sum64()
		out[i] = prev
	}
	return out
}

// cacheKey returns the tokens the prefix cache keys a prompt by: the prompt
// itself, except that each token an image replaces becomes an id derived
// from the image's hash and the token's index in the image (FNV-1a 64 of
// both, with the sign bit set, so never a vocabulary id). Two prompts then
// share cached state only where their tokens and their images agree, and
// a text-only prompt is its own key (its block hashes and KV events are
// unchanged). They stay inside the engine: a PrefixSpan carries the
// prompt's real tokens and names the images in PrefixSpan.Images.
func cacheKey(prompt []int, images []Image, hidden int) []int {
	if len(images) == 0 {
		return prompt
	}
	key := slices.Clone(prompt)
	var buf [32 + 4]byte
	for _, im := range images {
		copy(buf[:], im.Hash[:])
		for j := range len(im.Embeds) / hidden {
			binary.LittleEndian.PutUint32(buf[32:], uint32(j))
			h := fnv.New64a()
			h.Write(buf[:])
			key[im.Index+j] = int(uint(h.Sum64())) | math.MinInt
		}
	}
	return key
}

// PrefixSpan describes blocks of a cached prefix, for a PrefixObserver:
// positions [Start, End) of a prompt, whose blocks are named by their
// chained hashes (BlockHashes).
type PrefixSpan struct {
	// ParentHash is the hash of the block that ends at Start, 0 when Start
	// is 0.
	ParentHash uint64
	// BlockHashes are the hashes of the blocks of [Start, End), in order:
	// (End-Start)/PrefixBlock of them. Empty when only a kept point's
	// recurrent state changed.
	BlockHashes []uint64
	// Tokens are the span's prompt tokens (stored spans only): the real
	// token ids, an image's placeholder pads included (the cache keys
	// those positions by the image, not by the pads; see Images).
	Tokens []int
	// Images are the images of the request whose tokens fall within
	// [Start, End), in prompt order (stored spans only; nil for text).
	// Two spans with the same Tokens but different Images are different
	// cached state.
	Images     []SpanImage
	Start, End int
	// Point says that End is a kept point: resuming there is possible, as
	// the cache holds (or, when removed, held) the Gated DeltaNet state at
	// End and the KV of every position before it.
	Point bool
	// Bytes is the memory the span's blocks and state take (or took).
	Bytes int64
	// LoRA are the adapters the span's state was computed with (stored
	// spans only; nil for the base model). Its blocks are keyed apart from
	// other adapters' (their hashes chain from the adapters' set).
	LoRA []SpanLoRA
	// Tier is the tier the span was stored in or removed from: the memory
	// tier (TierDevice on a backend with its own memory, TierHost on the
	// CPU backend), the host tier under a device's memory (TierHost) or
	// the disk tier (TierDisk). A span stored in a tier below memory names
	// the blocks new to that tier; one removed from it names its blocks
	// only (BlockHashes; Start and End are 0), in no particular order.
	Tier Tier
}

// SpanImage is an image whose tokens fall within a PrefixSpan.
type SpanImage struct {
	// Hash identifies the image (Image.Hash).
	Hash [32]byte
	// Index and Len are the prompt positions [Index, Index+Len) of all the
	// image's tokens, which may begin before the span or end after it.
	Index, Len int
}

// spanImages returns the images whose tokens overlap [start, end).
func spanImages(images []Image, hidden, start, end int) []SpanImage {
	var out []SpanImage
	for _, im := range images {
		n := len(im.Embeds) / hidden
		if im.Index < end && im.Index+n > start {
			out = append(out, SpanImage{Hash: im.Hash, Index: im.Index, Len: n})
		}
	}
	return out
}

// PrefixObserver is told what the prefix cache stores and evicts, in each
// of its tiers (PrefixSpan.Tier), for publishing KV-cache events or usage. Its methods run on the engine's
// scheduling goroutine between steps: they must return quickly and must not
// call the Engine. Nothing is reported when the engine closes and drops the
// whole cache.
type PrefixObserver interface {
	// PrefixStored reports blocks (and possibly a kept point) added.
	PrefixStored(PrefixSpan)
	// PrefixRemoved reports blocks (and possibly a kept point) evicted.
	PrefixRemoved(PrefixSpan)
}

// prefixNode is one block of a cached prefix: the keys and values of its
// PrefixBlock positions, and, at a kept point, the recurrent state at its
// end. A node without state exists only while some descendant has state
// (or while it is pinned).
type prefixNode struct {
	parent   *prefixNode
	children map[uint64]*prefixNode
	hash     uint64 // chained hash of the prefix ending with this block
	tokens   []int  // the block's tokens, to verify a hash match
	end      int    // position after the block
	kv       *model.KVBlock
	state    *model.RecurrentState // at end, or nil
	lastUse  uint64                // tick of the last hit or store of state
	hits     int                   // requests resumed from the state
	prio     float64               // eviction priority (evictOne)
	pins     int
}

// prefixCache is a tree of PrefixBlock-token blocks keyed by token prefix.
// Each kept point (a node with recurrent state) shares the KV blocks of
// its ancestors with every other point of the same prefix. It is used by
// the engine goroutine only.
type prefixCache struct {
	m     *model.Model
	root  prefixNode
	bytes int64 // KV blocks and states held
	tick  uint64
	obs   PrefixObserver
	// floor is the priority of the last point evicted (evictOne).
	floor float64
	// tier is the memory tier's: TierDevice or TierHost.
	tier Tier
	// host is the host tier under a device's memory, or nil
	// (Config.PrefixHost).
	host *hostTier
	// disk is the disk tier, or nil (Config.PrefixDisk).
	disk *prefixdisk.Store
}

func newPrefixCache(m *model.Model, obs PrefixObserver) *prefixCache {
	tier := TierHost
	if _, ok := m.Backend().(compute.MemoryReporter); ok {
		tier = TierDevice
	}
	return &prefixCache{m: m, obs: obs, tier: tier, root: prefixNode{children: map[uint64]*prefixNode{}}}
}

// maxResume returns the furthest position a prompt of n tokens can resume
// at: the last multiple of PrefixBlock before its last token, which must
// be fed to get its logits.
func maxResume(n int) int { return (n - 1) / PrefixBlock * PrefixBlock }

// lookup returns the path of nodes from the first block to the deepest
// kept point of tokens (hashes its BlockHashes) at or before
// maxResume(len(tokens)), or nil.
func (c *prefixCache) lookup(tokens []int, hashes []uint64) []*prefixNode {
	var path []*prefixNode
	best := 0
	n := &c.root
	for i := 0; (i+1)*PrefixBlock <= maxResume(len(tokens)); i++ {
		ch := n.children[hashes[i]]
		if ch == nil || !slices.Equal(ch.tokens, tokens[i*PrefixBlock:(i+1)*PrefixBlock]) {
			break
		}
		path = append(path, ch)
		if ch.state != nil {
			best = len(path)
		}
		n = ch
	}
	return path[:best]
}

// touch marks the kept point at the end of path as just used by a
// request resuming there.
func (c *prefixCache) touch(path []*prefixNode) {
	if len(path) > 0 {
		c.tick++
		n := path[len(path)-1]
		n.lastUse = c.tick
		n.hits++
		n.prio = c.floor + float64(1+n.hits)
	}
}

func pin(path []*prefixNode, d int) {
	for _, n := range path {
		n.pins += d
	}
}

// blocks returns the KV blocks of path.
func blocks(path []*prefixNode) []*model.KVBlock {
	out := make([]*model.KVBlock, len(path))
	for i, n := range path {
		out[i] = n.kv
	}
	return out
}

// storeCost returns the bytes storing a kept point at position pos of
// tokens would add (the blocks not cached yet and the recurrent state; 0
// when the point is cached already) and the nodes of its path that exist,
// for pinning. It returns -1 on a hash collision with a cached block, which
// makes the point unstorable.
func (c *prefixCache) storeCost(tokens []int, hashes []uint64, pos int) (int64, []*prefixNode) {
	n := &c.root
	var path []*prefixNode
	for i := 0; i < pos/PrefixBlock; i++ {
		ch := n.children[hashes[i]]
		if ch == nil {
			missing := pos/PrefixBlock - i
			return int64(missing*PrefixBlock)*c.m.KVBytesPerToken() + c.m.RecurrentBytes(), path
		}
		if !slices.Equal(ch.tokens, tokens[i*PrefixBlock:(i+1)*PrefixBlock]) {
			return -1, nil
		}
		path = append(path, ch)
		n = ch
	}
	if n.state != nil {
		return 0, path
	}
	return c.m.RecurrentBytes(), path
}

// store keeps the state of seq, which has consumed exactly tokens[:pos]
// (pos a multiple of PrefixBlock), as a kept point: it copies the KV of the
// blocks not cached yet and the recurrent state. tokens is the prompt's
// cache key (cacheKey of prompt and images, which the observer is told
// about instead; a nil prompt means tokens is the prompt). The caller has
// made room for storeCost bytes.
func (c *prefixCache) store(seq *model.Sequence, tokens []int, hashes []uint64, pos int, prompt []int, images []Image, lora []SpanLoRA) error {
	n := &c.root
	var added []*prefixNode
	var err error
	for i := 0; i < pos/PrefixBlock; i++ {
		ch := n.children[hashes[i]]
		if ch == nil {
			ch = &prefixNode{parent: n, children: map[uint64]*prefixNode{}, hash: hashes[i],
				tokens: slices.Clone(tokens[i*PrefixBlock : (i+1)*PrefixBlock]), end: (i + 1) * PrefixBlock}
			if ch.kv, err = seq.SaveKV(i*PrefixBlock, PrefixBlock); err != nil {
				break
			}
			n.children[ch.hash] = ch
			c.bytes += ch.kv.Bytes()
			added = append(added, ch)
		}
		n = ch
	}
	stored := false
	if err == nil && n != &c.root && n.state == nil {
		if n.state, err = seq.SaveRecurrent(); err == nil {
			c.bytes += n.state.Bytes()
			stored = true
		}
	}
	if err == nil {
		c.tick++
		n.lastUse = c.tick
		if stored {
			n.prio = c.floor + 1
		}
	}
	if err != nil {
		// Undo the blocks that no kept point needs.
		if len(added) > 0 {
			c.prune(added[len(added)-1], false)
		}
		return err
	}
	if c.obs != nil && (stored || len(added) > 0) {
		sp := PrefixSpan{Tier: c.tier, Start: pos, End: pos, Point: stored}
		if stored {
			sp.Bytes = n.state.Bytes()
		}
		if len(added) > 0 {
			sp.Start = added[0].end - PrefixBlock
			sp.ParentHash = added[0].parent.hash
			if prompt == nil {
				prompt = tokens
			}
			sp.Tokens = slices.Clone(prompt[sp.Start:pos])
			sp.Images = spanImages(images, c.m.Config().HiddenSize, sp.Start, pos)
			sp.LoRA = lora
			for _, a := range added {
				sp.BlockHashes = append(sp.BlockHashes, a.hash)
				sp.Bytes += a.kv.Bytes()
			}
		} else {
			sp.ParentHash = n.hash
		}
		c.obs.PrefixStored(sp)
	}
	return nil
}

// evictOne frees the kept point of least value that is not pinned, with
// the blocks that no other point needs, and returns the bytes freed (0 when
// nothing can be evicted). With a tier below memory the point goes there
// first (spill).
//
// Value is GreedyDual with frequency: a point's priority is the floor (the
// priority of the last point evicted) plus one plus the requests that
// resumed from it, set when it is stored or used; the least recently used
// goes first among equals. A point many requests share (a long system
// prompt and its tools) so outlives a one-off stored after it, and the
// rising floor ages points that were popular once.
func (c *prefixCache) evictOne() int64 {
	var victim *prefixNode
	var walk func(n *prefixNode)
	walk = func(n *prefixNode) {
		for _, ch := range n.children {
			if ch.state != nil && ch.pins == 0 && (victim == nil || ch.prio < victim.prio ||
				ch.prio == victim.prio && ch.lastUse < victim.lastUse) {
				victim = ch
			}
			walk(ch)
		}
	}
	walk(&c.root)
	if victim == nil {
		return 0
	}
	c.floor = max(c.floor, victim.prio)
	c.spill(victim, false)
	before := c.bytes
	freed := victim.state.Bytes()
	victim.state.Free()
	victim.state = nil
	c.bytes -= freed
	sp := c.prune(victim, true)
	sp.Point = true
	sp.Tier = c.tier
	sp.Bytes += freed
	if sp.End == 0 {
		sp.Start, sp.End, sp.ParentHash = victim.end, victim.end, victim.hash
	}
	if c.obs != nil {
		c.obs.PrefixRemoved(sp)
	}
	return before - c.bytes
}

// prune removes n and its ancestors while they hold no state, have no
// children and are not pinned, and returns the span of blocks removed
// (End 0 when none). With report false it returns nothing.
func (c *prefixCache) prune(n *prefixNode, report bool) PrefixSpan {
	var sp PrefixSpan
	for n != &c.root && n.state == nil && len(n.children) == 0 && n.pins == 0 {
		if sp.End == 0 {
			sp.End = n.end
		}
		sp.Start = n.end - PrefixBlock
		sp.ParentHash = n.parent.hash
		if report {
			sp.BlockHashes = append(sp.BlockHashes, n.hash)
		}
		sp.Bytes += n.kv.Bytes()
		c.bytes -= n.kv.Bytes()
		n.kv.Free()
		delete(n.parent.children, n.hash)
		n = n.parent
	}
	slices.Reverse(sp.BlockHashes)
	return sp
}

// points returns the number of kept points cached.
func (c *prefixCache) points() int {
	count := 0
	var walk func(n *prefixNode)
	walk = func(n *prefixNode) {
		for _, ch := range n.children {
			if ch.state != nil {
				count++
			}
			walk(ch)
		}
	}
	walk(&c.root)
	return count
}

// clear frees everything, without reporting it.
func (c *prefixCache) clear() {
	var walk func(n *prefixNode)
	walk = func(n *prefixNode) {
		for _, ch := range n.children {
			walk(ch)
			if ch.state != nil {
				ch.state.Free()
			}
			ch.kv.Free()
		}
		clear(n.children)
	}
	walk(&c.root)
	c.bytes = 0
}

// keepPoints returns the positions of a prompt of n tokens whose state the
// cache keeps, ascending, beyond a resume position hit: the last multiple
// of PrefixBlock at or before each hint, and maxResume(n), where a request
// repeating the prompt (another choice of it, or a retry) resumes.
func keepPoints(n int, hints []int, hit int) []int {
	last := maxResume(n)
	var pts []int
	for _, h := range append(slices.Clone(hints), last) {
		if p := min(h, last) / PrefixBlock * PrefixBlock; p > hit && p > 0 {
			pts = append(pts, p)
		}
	}
	slices.Sort(pts)
	return slices.Compact(pts)
}

// keepState stores r's state at its current position, a kept point, in
// the prefix cache when room can be made for it within the budget.
func (e *Engine) keepState(r *running) {
	pos := r.fed
	cost, path := e.cache.storeCost(r.s.key, r.s.hashes, pos)
	if cost <= 0 {
		if cost == 0 {
			e.cache.touch(path)
		}
		return
	}
	pin(path, 1)
	defer pin(path, -1)
	if !e.makeRoom(cost) {
		return
	}
	// On failure (out of device memory) the point is simply not kept.
	_ = e.cache.store(r.seq, r.s.key, r.s.hashes, pos, r.s.req.Prompt, r.s.req.Images, spanLoRA(r.s.req.LoRA))
	e.noteCache()
}

// makeRoom evicts cached prefixes, least recently used first, until n
// more bytes fit the budget, and reports whether they do.
func (e *Engine) makeRoom(n int64) bool {
	for !e.budget.fits(n) {
		if e.cache == nil || e.cache.evictOne() == 0 {
			return false
		}
		e.noteCache()
	}
	return true
}

// noteCache publishes the cache's size to the budget and the metrics.
func (e *Engine) noteCache() {
	e.budget.cached.Store(e.cache.bytes)
	e.budget.points.Store(int64(e.cache.points()))
	e.budget.note()
}

// awaitsPrefix reports whether s should wait for a running request that is
// prefilling a prefix of s's prompt and will store state beyond what the
// cache holds for s now (the other choices of an n > 1 request, or
// requests that share a long system prompt, arriving together): s then
// resumes from that state instead of computing the same tokens beside it.
func (e *Engine) awaitsPrefix(s *Stream, run []*running) bool {
	if e.cache == nil {
		return false
	}
	have := len(e.cache.lookup(s.key, s.hashes)) * PrefixBlock
	limit := maxResume(len(s.req.Prompt))
	for _, r := range run {
		for _, q := range r.keep {
			if q > have && q <= limit && r.s.hashes[q/PrefixBlock-1] == s.hashes[q/PrefixBlock-1] {
				return true
			}
		}
	}
	return false
}
