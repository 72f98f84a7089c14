package kvevents

import (
	"errors"
	"fmt"
)

// FNV-64a's parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv64a is an FNV-64a hash fed byte by byte, so that the CBOR encoding
// below needs no buffer.
type fnv64a uint64

func (h *fnv64a) byte(b byte) { *h = (*h ^ fnv64a(b)) * fnvPrime }

// head feeds the head of a CBOR data item of the given major type and
// argument, in the shortest form (as canonical CBOR requires).
func (h *fnv64a) head(major byte, v uint64) {
	m := major << 5
	switch {
	case v < 24:
		h.byte(m | byte(v))
	case v <= 0xff:
		h.byte(m | 24)
		h.byte(byte(v))
	case v <= 0xffff:
		h.byte(m | 25)
		h.byte(byte(v >> 8))
		h.byte(byte(v))
	case v <= 0xffffffff:
		h.byte(m | 26)
		for s := 24; s >= 0; s -= 8 {
			h.byte(byte(v >> s))
		}
	default:
		h.byte(m | 27)
		for s := 56; s >= 0; s -= 8 {
			h.byte(byte(v >> s))
		}
	}
}

// CBOR major types and simple values used here.
const (
	cborUint   = 0
	cborNegInt = 1
	cborText   = 3
	cborArray  = 4
	cborMap    = 5
	cborNull   = 0xf6
	cborTriple = 0x80 | 3 // an array of three items
)

// blockHash is llm-d's hash of one block: FNV-64a over the canonical CBOR
// encoding of [parent, tokens, extra], tokens as an array of unsigned
// integers (null when nil) and extra a text string (or null when
// extraText is false).
func blockHash(parent uint64, tokens []int, extra string, extraText bool) uint64 {
	h := blockHashHead(parent, tokens)
	if extraText {
		h.text(extra)
	} else {
		h.byte(cborNull)
	}
	return uint64(h)
}

// mmBlockHash is llm-d's hash of a block holding multimodal items:
// [parent, tokens, extra] with extra the items' keys (see mmExtra), or
// null when there are none (a text block, hashed as blockHash does).
func mmBlockHash(parent uint64, tokens []int, keys []MMKey) uint64 {
	if len(keys) == 0 {
		return blockHash(parent, tokens, "", false)
	}
	h := blockHashHead(parent, tokens)
	h.mmExtra(keys)
	return uint64(h)
}

// blockHashHead feeds the array head, parent and tokens of a block.
func blockHashHead(parent uint64, tokens []int) fnv64a {
	h := fnv64a(fnvOffset)
	h.byte(cborTriple)
	h.head(cborUint, parent)
	if tokens == nil {
		h.byte(cborNull)
	} else {
		h.head(cborArray, uint64(len(tokens)))
		for _, t := range tokens {
			h.head(cborUint, uint64(uint32(t)))
		}
	}
	return h
}

// Hasher computes block hashes exactly as the llm-d router computes its
// block keys (llm-d-kv-cache's kvblock.TokenProcessor): the root is the
// hash of [FNV-64a(seed), nil, model], and each block of BlockSize tokens
// hashes [parent, tokens, nil], its parent the previous block's hash (the
// root for the first). A Hasher is immutable and safe for concurrent use.
type Hasher struct {
	seed      uint64 // FNV-64a of the hash seed
	root      uint64
	blockSize int
}

// NewHasher returns a Hasher for a model name, a hash seed (the router's
// hashSeed, vLLM's PYTHONHASHSEED; "" by default) and a block size in
// tokens.
func NewHasher(seed, model string, blockSize int) (*Hasher, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("kvevents: block size must be positive, got %d", blockSize)
	}
	s := fnv64a(fnvOffset)
	for i := 0; i < len(seed); i++ {
		s.byte(seed[i])
	}
	return &Hasher{seed: uint64(s), root: blockHash(uint64(s), nil, model, true), blockSize: blockSize}, nil
}

// RootFor returns the root of another model name under the same seed: a
// LoRA adapter's, which a router names as the request's model.
func (h *Hasher) RootFor(model string) uint64 { return blockHash(h.seed, nil, model, true) }

// Root returns the hash a prefix's first block chains from. It is never
// sent: a span at the start of a prompt has no parent.
func (h *Hasher) Root() uint64 { return h.root }

// BlockSize returns the number of tokens per block.
func (h *Hasher) BlockSize() int { return h.blockSize }

// errPartial is returned for token runs that are not whole blocks.
var errPartial = errors.New("kvevents: tokens are not a whole number of blocks")

// Blocks appends to dst the hashes of the blocks of tokens, chained from
// parent (Root for a prefix's first block), and returns the extended
// slice. len(tokens) must be a multiple of the block size.
func (h *Hasher) Blocks(dst []uint64, parent uint64, tokens []int) ([]uint64, error) {
	if len(tokens)%h.blockSize != 0 {
		return dst, fmt.Errorf("%w: %d tokens, block size %d", errPartial, len(tokens), h.blockSize)
	}
	for i := 0; i < len(tokens); i += h.blockSize {
		parent = blockHash(parent, tokens[i:i+h.blockSize], "", false)
		dst = append(dst, parent)
	}
	return dst, nil
}

// BlocksExtra is Blocks for blocks that may hold multimodal items: extra
// has one entry per block (its MMKeys, nil for a text block), or is nil
// for text only. A block with keys hashes [parent, tokens, keys] as the
// llm-d router hashes a block with extra features (MMHash{Hash, Offset}
// structs, CBOR maps), so that two images behind the same placeholder
// tokens get different hashes; a block without hashes as Blocks does.
func (h *Hasher) BlocksExtra(dst []uint64, parent uint64, tokens []int, extra [][]MMKey) ([]uint64, error) {
	if len(tokens)%h.blockSize != 0 {
		return dst, fmt.Errorf("%w: %d tokens, block size %d", errPartial, len(tokens), h.blockSize)
	}
	if err := checkExtra(extra, len(tokens)/h.blockSize); err != nil {
		return dst, err
	}
	for i := 0; i < len(tokens); i += h.blockSize {
		var keys []MMKey
		if extra != nil {
			keys = extra[i/h.blockSize]
		}
		parent = mmBlockHash(parent, tokens[i:i+h.blockSize], keys)
		dst = append(dst, parent)
	}
	return dst, nil
}

// KeysExtra is Keys for a prompt with multimodal items (sorted by
// offset): the hashes of its whole blocks, each block holding items
// hashed with their MMKeys.
func (h *Hasher) KeysExtra(prompt []int, items []MMItem) []uint64 {
	n := len(prompt) / h.blockSize * h.blockSize
	keys, _ := h.BlocksExtra(make([]uint64, 0, n/h.blockSize), h.root, prompt[:n], MMExtraKeys(items, 0, n, h.blockSize))
	return keys
}

// Keys returns the hashes of the whole blocks of a prompt from its start,
// leaving out a last partial block, as a router computes them to look the
// prompt up.
func (h *Hasher) Keys(prompt []int) []uint64 {
	n := len(prompt) / h.blockSize * h.blockSize
	keys, _ := h.Blocks(make([]uint64, 0, n/h.blockSize), h.root, prompt[:n])
	return keys
}
