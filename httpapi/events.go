package httpapi

import (
	"encoding/hex"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// prefixEvents publishes the prefix cache's changes as KV events: each
// stored run of blocks (which ends at a kept point) as one span whose
// parent is the block before it, each evicted run of blocks as removals,
// each on the medium of the tier it happened in (medium). A kept point
// added on blocks already announced changes no block and is not
// published. It runs on the engine's goroutine only.
type prefixEvents struct {
	pub *kvevents.Publisher
	// blocks maps a medium and an engine block hash to the announced span
	// holding it and its index there.
	blocks map[blockKey]blockRef
}

// blockKey names a block announced on a medium. The fields are what
// tells two announcements apart; a LoRA adapter's name would be one more.
type blockKey struct {
	medium string
	hash   uint64
}

type blockRef struct {
	span kvevents.Span
	i    int
}

// eventMedia are the media of the tiers, in the order a stored span's parent is
// looked up (the hashes of a prefix are the same on every medium).
var eventMedia = []string{kvevents.MediumGPU, kvevents.MediumCPU, kvevents.MediumFS}

// medium returns vLLM's medium of a tier of the prefix cache: a device's
// memory is "GPU", host memory "CPU" (the CPU backend's memory tier, or
// the host tier under a device's memory), the disk tier "FS".
func medium(t llm.PrefixTier) string {
	switch t {
	case llm.PrefixTierDevice:
		return kvevents.MediumGPU
	case llm.PrefixTierHost:
		return kvevents.MediumCPU
	case llm.PrefixTierDisk:
		return kvevents.MediumFS
	}
	return ""
}

// newPrefixEvents returns the observer publishing on pub, or nil (no
// observer) when events are off.
func newPrefixEvents(pub *kvevents.Publisher) llm.PrefixObserver {
	if pub == nil {
		return nil
	}
	return &prefixEvents{pub: pub, blocks: map[blockKey]blockRef{}}
}

func (p *prefixEvents) PrefixStored(sp llm.PrefixSpan) {
	if len(sp.BlockHashes) == 0 {
		return
	}
	m := medium(sp.Tier)
	var parent kvevents.Span
	if sp.Start > 0 {
		ref, ok := p.blocks[blockKey{m, sp.ParentHash}]
		for _, other := range eventMedia {
			if ok {
				break
			}
			ref, ok = p.blocks[blockKey{other, sp.ParentHash}]
		}
		if !ok {
			return // its parent was never announced: a router would drop it
		}
		parent = ref.span.Slice(0, ref.i+1)
	}
	a := kvevents.Attrs{Medium: m, Extra: extraKeys(sp, p.pub.Hasher().BlockSize()), LoRAName: llm.SpanLoRAName(sp.LoRA)}
	if len(sp.LoRA) == 1 {
		a.LoRAID = sp.LoRA[0].ID + 1 // vLLM's ids start at 1
	}
	span, err := p.pub.SpanStoredAttrs(parent, sp.Tokens, a)
	if err != nil {
		return
	}
	for i, h := range sp.BlockHashes {
		p.blocks[blockKey{m, h}] = blockRef{span, i}
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
	m := medium(sp.Tier)
	for _, h := range sp.BlockHashes {
		k := blockKey{m, h}
		ref, ok := p.blocks[k]
		if !ok {
			continue
		}
		delete(p.blocks, k)
		p.pub.SpanRemovedAttrs(ref.span.Slice(ref.i, ref.i+1), kvevents.Attrs{Medium: m})
	}
}
