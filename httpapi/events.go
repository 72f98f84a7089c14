package httpapi

import (
	"encoding/hex"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// prefixEvents publishes the prefix cache's changes as KV events: each
// stored run of blocks (which ends at a kept point) as one span whose
// parent is the block before it, each evicted run of blocks as removals.
// A kept point added on blocks already announced changes no block and is
// not published. It runs on the engine's goroutine only.
type prefixEvents struct {
	pub *kvevents.Publisher
	// blocks maps an engine block hash to the announced span holding it
	// and its index there.
	blocks map[uint64]blockRef
}

type blockRef struct {
	span kvevents.Span
	i    int
}

// newPrefixEvents returns the observer publishing on pub, or nil (no
// observer) when events are off.
func newPrefixEvents(pub *kvevents.Publisher) llm.PrefixObserver {
	if pub == nil {
		return nil
	}
	return &prefixEvents{pub: pub, blocks: map[uint64]blockRef{}}
}

func (p *prefixEvents) PrefixStored(sp llm.PrefixSpan) {
	if len(sp.BlockHashes) == 0 {
		return
	}
	var parent kvevents.Span
	if sp.Start > 0 {
		ref, ok := p.blocks[sp.ParentHash]
		if !ok {
			return // its parent was never announced: a router would drop it
		}
		parent = ref.span.Slice(0, ref.i+1)
	}
	span, err := p.pub.SpanStoredExtra(parent, sp.Tokens, extraKeys(sp, p.pub.Hasher().BlockSize()))
	if err != nil {
		return
	}
	for i, h := range sp.BlockHashes {
		p.blocks[h] = blockRef{span, i}
	}
}

// extraKeys returns the span's per-block extra keys, as vLLM's BlockStored
// carries them: for each block, the (image hash in hex, offset of the
// image's first token from the block's) of each image whose tokens fall
// in it; nil for a text-only span.
func extraKeys(sp llm.PrefixSpan, blockSize int) [][]kvevents.MMKey {
	if len(sp.Images) == 0 {
		return nil
	}
	items := make([]kvevents.MMItem, len(sp.Images))
	for i, im := range sp.Images {
		items[i] = kvevents.MMItem{Hash: hex.EncodeToString(im.Hash[:]), Offset: im.Index, Length: im.Len}
	}
	return kvevents.MMExtraKeys(items, sp.Start, sp.Start+len(sp.Tokens), blockSize)
}

func (p *prefixEvents) PrefixRemoved(sp llm.PrefixSpan) {
	for _, h := range sp.BlockHashes {
		ref, ok := p.blocks[h]
		if !ok {
			continue
		}
		delete(p.blocks, h)
		p.pub.SpanRemoved(ref.span.Slice(ref.i, ref.i+1))
	}
}
