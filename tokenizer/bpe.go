package tokenizer

import (
	"sync"
)

// bpe is a byte-level BPE model: each byte of a pre-token starts as its own
// symbol and the lowest-ranked mergeable adjacent pair is merged until none
// is left, exactly as Hugging Face tokenizers' BPE (Word::merge_all) does.
type bpe struct {
	byteID       [256]int32        // id of each single-byte symbol, -1 if the vocabulary lacks it
	merges       map[uint64]uint64 // left<<32|right -> rank<<32|merged id
	vocab        map[string]int    // raw bytes -> id, used only when ignoreMerges is set
	ignoreMerges bool              // a pre-token found whole in the vocabulary is one token
	unk          int32             // id for a byte without a symbol, -1 to drop it

	mu    sync.RWMutex
	cache map[string][]int32 // pre-token -> ids
}

// cacheLimit bounds the number of pre-tokens the cache keeps; when it is
// reached the cache starts over.
const cacheLimit = 1 << 16

// cacheMaxLen is the longest pre-token (in bytes) kept in the cache.
const cacheMaxLen = 256

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeSymbol is one symbol of a word being merged; prev and next link the
// live symbols, and a merged-away symbol has size 0.
type bpeSymbol struct {
	id         int32
	prev, next int32
	size       int32
}

// bpeMerge is a candidate merge of the symbol at pos with its successor.
type bpeMerge struct {
	rank, pos, id int32
}

// less orders candidates by rank, then by position, like the Rust heap.
func (a bpeMerge) less(b bpeMerge) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// bpeScratch is the reusable working memory of one encoding goroutine.
type bpeScratch struct {
	syms []bpeSymbol
	heap []bpeMerge
}

func (h *bpeScratch) push(m bpeMerge) {
	h.heap = append(h.heap, m)
	i := len(h.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.heap[i].less(h.heap[p]) {
			break
		}
		h.heap[i], h.heap[p] = h.heap[p], h.heap[i]
		i = p
	}
}

func (h *bpeScratch) pop() bpeMerge {
	top := h.heap[0]
	last := len(h.heap) - 1
	h.heap[0] = h.heap[last]
	h.heap = h.heap[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= last {
			break
		}
		c := l
		if r := l + 1; r < last && h.heap[r].less(h.heap[l]) {
			c = r
		}
		if !h.heap[c].less(h.heap[i]) {
			break
		}
		h.heap[i], h.heap[c] = h.heap[c], h.heap[i]
		i = c
	}
	return top
}

// lookup returns the merge of the pair (a, b), if the model has one.
func (m *bpe) lookup(a, b int32) (rank, id int32, ok bool) {
	v, ok := m.merges[pairKey(a, b)]
	return int32(v >> 32), int32(uint32(v)), ok
}

// encodeWord appends the ids of one pre-token (raw bytes) to dst.
func (m *bpe) encodeWord(dst []int, word string, sc *bpeScratch) []int {
	if len(word) <= cacheMaxLen {
		m.mu.RLock()
		ids, ok := m.cache[word]
		m.mu.RUnlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	start := len(dst)
	dst = m.merge(dst, word, sc)
	if len(word) <= cacheMaxLen {
		ids := make([]int32, len(dst)-start)
		for i, id := range dst[start:] {
			ids[i] = int32(id)
		}
		m.mu.Lock()
		if len(m.cache) >= cacheLimit {
			clear(m.cache)
		}
		m.cache[word] = ids
		m.mu.Unlock()
	}
	return dst
}

// merge runs the BPE merges over word and appends the resulting ids.
func (m *bpe) merge(dst []int, word string, sc *bpeScratch) []int {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	syms := sc.syms[:0]
	for i := 0; i < len(word); i++ {
		id := m.byteID[word[i]]
		if id < 0 {
			if m.unk < 0 {
				continue
			}
			id = m.unk
		}
		n := int32(len(syms))
		syms = append(syms, bpeSymbol{id: id, prev: n - 1, next: n + 1, size: 1})
	}
	if len(syms) == 0 {
		sc.syms = syms
		return dst
	}
	syms[len(syms)-1].next = -1
	sc.heap = sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if rank, id, ok := m.lookup(syms[i].id, syms[i+1].id); ok {
			sc.push(bpeMerge{rank: rank, pos: int32(i), id: id})
		}
	}
	for len(sc.heap) > 0 {
		top := sc.pop()
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip candidates made stale by an earlier merge.
		if _, id, ok := m.lookup(cur.id, right.id); !ok || id != top.id {
			continue
		}
		cur.id = top.id
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if rank, id, ok := m.lookup(syms[cur.prev].id, cur.id); ok {
				sc.push(bpeMerge{rank: rank, pos: cur.prev, id: id})
			}
		}
		if cur.next >= 0 {
			if rank, id, ok := m.lookup(cur.id, syms[cur.next].id); ok {
				sc.push(bpeMerge{rank: rank, pos: top.pos, id: id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, int(syms[i].id))
	}
	sc.syms = syms
	return dst
}
