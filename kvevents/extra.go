package kvevents

import "fmt"

// MMKey is one multimodal item's extra key in a block, as vLLM's
// _gen_mm_extra_hash_keys writes it: the tuple (identifier, offset), the
// identifier the item's hash as a hex string (vLLM's mm_hash) and the
// offset the position of the item's first token relative to the block's
// first token (negative when the item began in an earlier block).
type MMKey struct {
	Hash   string
	Offset int
}

// MMItem is a multimodal item of a prompt: its hash as a hex string and
// the prompt positions [Offset, Offset+Length) of its placeholder tokens
// (vLLM's mm_feature.identifier and mm_position).
type MMItem struct {
	Hash           string
	Offset, Length int
}

// MMExtraKeys returns the extra keys of the blocks of prompt positions
// [start, end) (both multiples of blockSize), one entry per block as in
// vLLM's BlockStored.extra_keys: for each item whose tokens fall in the
// block, in prompt order, its MMKey; nil for a block holding none. items
// must be sorted by Offset and not overlap. It returns nil when no block
// holds an item, so that text-only spans stay text-only.
func MMExtraKeys(items []MMItem, start, end, blockSize int) [][]MMKey {
	if blockSize <= 0 || end <= start {
		return nil
	}
	var out [][]MMKey
	found := false
	for b := start; b+blockSize <= end; b += blockSize {
		var keys []MMKey
		for _, it := range items {
			if it.Offset < b+blockSize && it.Offset+it.Length > b {
				keys = append(keys, MMKey{Hash: it.Hash, Offset: it.Offset - b})
			}
		}
		out = append(out, keys)
		found = found || keys != nil
	}
	if !found {
		return nil
	}
	return out
}

// checkExtra checks that extra, when given, has one entry per block.
func checkExtra(extra [][]MMKey, blocks int) error {
	if extra != nil && len(extra) != blocks {
		return fmt.Errorf("kvevents: %d extra keys for %d blocks", len(extra), blocks)
	}
	return nil
}

// hasExtra reports whether any block has extra keys.
func hasExtra(extra [][]MMKey) bool {
	for _, k := range extra {
		if len(k) > 0 {
			return true
		}
	}
	return false
}

// int feeds a CBOR integer, major type 0 when v >= 0 and 1 (-1-n) when
// negative.
func (h *fnv64a) int(v int) {
	if v >= 0 {
		h.head(cborUint, uint64(v))
	} else {
		h.head(cborNegInt, uint64(-1-v))
	}
}

// text feeds a CBOR text string.
func (h *fnv64a) text(s string) {
	h.head(cborText, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
}

// mmExtra feeds the extra element of a multimodal block as the llm-d
// router hashes it (kvblock.BlockExtraFeatures.MMHashes, a slice of
// MMHash{Hash string; Offset int64} structs): an array of maps
// {"Hash": text, "Offset": int}, keys in canonical order.
func (h *fnv64a) mmExtra(keys []MMKey) {
	h.head(cborArray, uint64(len(keys)))
	for _, k := range keys {
		h.head(cborMap, 2)
		h.text("Hash")
		h.text(k.Hash)
		h.text("Offset")
		h.int(k.Offset)
	}
}
