package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Event tags, the first element of each event array (msgspec's tag=True).
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// encoder writes msgpack into a buffer. Writes to a bytes.Buffer cannot
// fail, so its errors are not checked.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// hashes writes block hashes as an array of msgpack uint64s: always the
// 8-byte form, which every decoder reads back as a uint64 (routers accept
// uint64, int64 or bytes, not the smaller integer types).
func (e *encoder) hashes(hs []uint64) {
	e.enc.EncodeArrayLen(len(hs))
	for _, h := range hs {
		e.enc.EncodeUint64(h)
	}
}

// blockStored encodes ["BlockStored", hashes, parent|nil, token_ids,
// block_size].
//
// With extra keys (some block holding a multimodal item) it encodes
// vLLM's trailing fields up to extra_keys: [..., block_size, lora_id nil,
// medium nil, lora_name nil, extra_keys], extra_keys one entry per block,
// nil or an array of [identifier, offset] arrays (vLLM's tuple of
// (mm_hash, offset) tuples). Without, the event is the five fields only.
func blockStored(hashes []uint64, parent uint64, hasParent bool, tokens []int, blockSize int, extra [][]MMKey) []byte {
	e := newEncoder()
	withExtra := hasExtra(extra)
	if withExtra {
		e.enc.EncodeArrayLen(9)
	} else {
		e.enc.EncodeArrayLen(5)
	}
	e.enc.EncodeString(TagBlockStored)
	e.hashes(hashes)
	if hasParent {
		e.enc.EncodeUint64(parent)
	} else {
		e.enc.EncodeNil()
	}
	e.enc.EncodeArrayLen(len(tokens))
	for _, t := range tokens {
		e.enc.EncodeUint(uint64(uint32(t)))
	}
	e.enc.EncodeUint(uint64(blockSize))
	if withExtra {
		e.enc.EncodeNil() // lora_id
		e.enc.EncodeNil() // medium
		e.enc.EncodeNil() // lora_name
		e.enc.EncodeArrayLen(len(extra))
		for _, keys := range extra {
			if len(keys) == 0 {
				e.enc.EncodeNil()
				continue
			}
			e.enc.EncodeArrayLen(len(keys))
			for _, k := range keys {
				e.enc.EncodeArrayLen(2)
				e.enc.EncodeString(k.Hash)
				e.enc.EncodeInt(int64(k.Offset))
			}
		}
	}
	return e.buf.Bytes()
}

// blockRemoved encodes ["BlockRemoved", hashes].
func blockRemoved(hashes []uint64) []byte {
	e := newEncoder()
	e.enc.EncodeArrayLen(2)
	e.enc.EncodeString(TagBlockRemoved)
	e.hashes(hashes)
	return e.buf.Bytes()
}

// allBlocksCleared encodes ["AllBlocksCleared"].
func allBlocksCleared() []byte {
	e := newEncoder()
	e.enc.EncodeArrayLen(1)
	e.enc.EncodeString(TagAllBlocksCleared)
	return e.buf.Bytes()
}

// eventBatch encodes [ts, events, nil] around already encoded events.
func eventBatch(ts float64, events [][]byte) []byte {
	e := newEncoder()
	e.enc.EncodeArrayLen(3)
	e.enc.EncodeFloat64(ts)
	e.enc.EncodeArrayLen(len(events))
	for _, ev := range events {
		e.buf.Write(ev)
	}
	e.enc.EncodeNil()
	return e.buf.Bytes()
}
