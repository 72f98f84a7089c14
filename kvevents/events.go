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
func blockStored(hashes []uint64, parent uint64, hasParent bool, tokens []int, blockSize int) []byte {
	e := newEncoder()
	e.enc.EncodeArrayLen(5)
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
