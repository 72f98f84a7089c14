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

// Media of vLLM's events (kv_events.py's MEDIUM_GPU, MEDIUM_CPU and
// MEDIUM_FS): the tier that holds a stored or removed block. A router
// lowercases them ("gpu", "cpu", "fs") and reads an event without a
// medium as one on the GPU.
const (
	MediumGPU = "GPU" // a device's own memory
	MediumCPU = "CPU" // host memory
	MediumFS  = "FS"  // files (the prefix cache's disk tier)
)

// Attrs are the optional fields of a span's events.
type Attrs struct {
	// Medium is the tier that holds the span (MediumGPU, MediumCPU,
	// MediumFS); "" leaves it out, which a router reads as MediumGPU.
	Medium string
	// Extra has one entry per block of a stored span, the multimodal
	// items' keys of the block (nil for a block holding none; see
	// MMExtraKeys), or is nil. BlockRemoved carries none.
	Extra [][]MMKey
	// LoRAName names the LoRA adapter a stored span's state was computed
	// with ("" for the base model), and LoRAID is its vLLM-style id
	// (positive; 0 leaves it out). A span with an adapter chains from
	// the root of the adapter's name (Hasher.RootFor): a router hashes a
	// request for the adapter from its model field, which names it.
	LoRAName string
	LoRAID   int
}

// blockStored encodes ["BlockStored", hashes, parent|nil, token_ids,
// block_size], followed, when a has any field, by vLLM's trailing fields up
// to the last one set: lora_id (nil or a.LoRAID), medium, lora_name (nil
// or a.LoRAName),
// extra_keys (one entry per block, nil or an array of [identifier, offset]
// arrays, vLLM's tuple of (mm_hash, offset) tuples). Without attributes the
// event is the five fields only.
func blockStored(hashes []uint64, parent uint64, hasParent bool, tokens []int, blockSize int, a Attrs) []byte {
	e := newEncoder()
	withExtra := hasExtra(a.Extra)
	switch {
	case withExtra:
		e.enc.EncodeArrayLen(9)
	case a.Medium != "" || a.LoRAName != "" || a.LoRAID > 0:
		e.enc.EncodeArrayLen(8)
	default:
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
	if !withExtra && a.Medium == "" && a.LoRAName == "" && a.LoRAID <= 0 {
		return e.buf.Bytes()
	}
	if a.LoRAID > 0 {
		e.enc.EncodeInt(int64(a.LoRAID))
	} else {
		e.enc.EncodeNil() // lora_id
	}
	e.optString(a.Medium)
	e.optString(a.LoRAName) // lora_name, nil for the base model
	if withExtra {
		e.enc.EncodeArrayLen(len(a.Extra))
		for _, keys := range a.Extra {
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

// optString writes s, or nil for "".
func (e *encoder) optString(s string) {
	if s == "" {
		e.enc.EncodeNil()
		return
	}
	e.enc.EncodeString(s)
}

// blockRemoved encodes ["BlockRemoved", hashes], or ["BlockRemoved",
// hashes, medium] with a medium.
func blockRemoved(hashes []uint64, medium string) []byte {
	e := newEncoder()
	if medium == "" {
		e.enc.EncodeArrayLen(2)
	} else {
		e.enc.EncodeArrayLen(3)
	}
	e.enc.EncodeString(TagBlockRemoved)
	e.hashes(hashes)
	if medium != "" {
		e.optString(medium)
	}
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
