package prefixdisk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unsafe"
)

// A file is one header, then Tokens as little-endian int64s (a KV
// block's PrefixBlock cache-key tokens; none for a state), then the
// payload: the float32 slots of the block or state, little-endian.
//
//	offset size
//	0      8    magic "govpfx\x00" and the format version
//	8      4    kind (1 KV block, 2 recurrent state)
//	12     4    tokens
//	16     32   model key (Open's key)
//	48     8    hash: the chained block hash of the prefix ending at end
//	56     8    parent: the chained hash of the block before (0 at the start)
//	64     8    end: the position after the block, or the state's position
//	72     8    rope delta (states)
//	80     8    payload bytes
//	88     4    CRC-32C of the tokens and the payload
//	92     4    CRC-32C of bytes [0, 92)
const headerSize = 96

// version is the format's version, the magic's last byte.
const version = 1

var magic = [8]byte{'g', 'o', 'v', 'p', 'f', 'x', 0, version}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Kind is what a file holds.
type Kind uint32

// Kinds of files.
const (
	KindKV    Kind = 1 // a KV block of Limits.BlockTokens positions
	KindState Kind = 2 // a recurrent state at a block boundary
)

func (k Kind) ext() string {
	if k == KindKV {
		return ".kv"
	}
	return ".st"
}

// Limits are the only sizes a store reads: a file whose header says
// otherwise is foreign or corrupt, so nothing read from the directory
// makes the reader allocate more than one block or state.
type Limits struct {
	BlockTokens int // tokens of a KV block (engine.PrefixBlock)
	KVFloats    int // float32 slots of a KV block
	StateFloats int // float32 slots of a recurrent state
	MaxEnd      int // the largest position (the model's context)
}

// header is a file's header, decoded.
type header struct {
	kind         Kind
	tokens       int
	key          [32]byte
	hash, parent uint64
	end, delta   int
	payload      int64
	sum          uint32
}

// errCorrupt marks a file that is not what its name and header promise.
var errCorrupt = errors.New("corrupt")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errCorrupt}, args...)...)
}

func (h *header) encode() []byte {
	b := make([]byte, headerSize)
	copy(b, magic[:])
	le := binary.LittleEndian
	le.PutUint32(b[8:], uint32(h.kind))
	le.PutUint32(b[12:], uint32(h.tokens))
	copy(b[16:48], h.key[:])
	le.PutUint64(b[48:], h.hash)
	le.PutUint64(b[56:], h.parent)
	le.PutUint64(b[64:], uint64(h.end))
	le.PutUint64(b[72:], uint64(int64(h.delta)))
	le.PutUint64(b[80:], uint64(h.payload))
	le.PutUint32(b[88:], h.sum)
	le.PutUint32(b[92:], crc32.Checksum(b[:92], castagnoli))
	return b
}

// decodeHeader reads and checks a header against the store's key and
// limits.
func decodeHeader(b []byte, key [32]byte, lim Limits) (header, error) {
	var h header
	if len(b) < headerSize {
		return h, corrupt("%d bytes, shorter than a header", len(b))
	}
	if !bytes.Equal(b[:8], magic[:]) {
		return h, corrupt("no prefix-state magic (another format or version)")
	}
	le := binary.LittleEndian
	if crc32.Checksum(b[:92], castagnoli) != le.Uint32(b[92:]) {
		return h, corrupt("header checksum mismatch")
	}
	h.kind = Kind(le.Uint32(b[8:]))
	tokens := le.Uint32(b[12:])
	copy(h.key[:], b[16:48])
	h.hash, h.parent = le.Uint64(b[48:]), le.Uint64(b[56:])
	end, delta, payload := le.Uint64(b[64:]), int64(le.Uint64(b[72:])), le.Uint64(b[80:])
	h.sum = le.Uint32(b[88:])
	if h.key != key {
		return h, corrupt("written for another model (key %x)", h.key[:8])
	}
	bt := uint64(max(lim.BlockTokens, 1))
	if end == 0 || end%bt != 0 || end > uint64(lim.MaxEnd) {
		return h, corrupt("position %d is not a block boundary within the context", end)
	}
	if delta < -(1<<40) || delta > 1<<40 {
		return h, corrupt("rope delta %d out of range", delta)
	}
	switch h.kind {
	case KindKV:
		if tokens != uint32(lim.BlockTokens) || payload != 4*uint64(lim.KVFloats) {
			return h, corrupt("a KV block of %d tokens and %d bytes, want %d and %d", tokens, payload, lim.BlockTokens, 4*lim.KVFloats)
		}
	case KindState:
		if tokens != 0 || payload != 4*uint64(lim.StateFloats) {
			return h, corrupt("a state of %d tokens and %d bytes, want 0 and %d", tokens, payload, 4*lim.StateFloats)
		}
	default:
		return h, corrupt("unknown kind %d", h.kind)
	}
	h.tokens, h.end, h.delta, h.payload = int(tokens), int(end), int(delta), int64(payload)
	return h, nil
}

// fileSize returns the size of a file with header h.
func (h *header) fileSize() int64 { return headerSize + 8*int64(h.tokens) + h.payload }

// floatBytes views f's memory as bytes: the payload's layout on the
// little-endian machines govinfer runs on (amd64, arm64).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// encodeItem returns the file of it.
func encodeItem(it *Item, key [32]byte) (hdr, body []byte) {
	body = make([]byte, 8*len(it.Tokens))
	for i, t := range it.Tokens {
		binary.LittleEndian.PutUint64(body[8*i:], uint64(int64(t)))
	}
	payload := floatBytes(it.Data)
	sum := crc32.Update(crc32.Checksum(body, castagnoli), castagnoli, payload)
	h := header{kind: it.Kind, tokens: len(it.Tokens), key: key, hash: it.Hash, parent: it.Parent,
		end: it.End, delta: it.Delta, payload: int64(len(payload)), sum: sum}
	return h.encode(), body
}

// decodeItem reads a whole file of size bytes from r, checking its header
// against key and lim and its checksum. It allocates at most the limits'
// sizes, whatever r holds.
func decodeItem(r io.Reader, size int64, key [32]byte, lim Limits) (*Item, error) {
	var hb [headerSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, corrupt("reading the header: %v", err)
	}
	h, err := decodeHeader(hb[:], key, lim)
	if err != nil {
		return nil, err
	}
	if size != h.fileSize() {
		return nil, corrupt("%d bytes, the header says %d (truncated?)", size, h.fileSize())
	}
	tb := make([]byte, 8*h.tokens)
	if _, err := io.ReadFull(r, tb); err != nil {
		return nil, corrupt("reading the tokens: %v", err)
	}
	data := make([]float32, h.payload/4)
	if _, err := io.ReadFull(r, floatBytes(data)); err != nil {
		return nil, corrupt("reading the payload: %v", err)
	}
	if sum := crc32.Update(crc32.Checksum(tb, castagnoli), castagnoli, floatBytes(data)); sum != h.sum {
		return nil, corrupt("payload checksum mismatch")
	}
	it := &Item{Kind: h.kind, Hash: h.hash, Parent: h.parent, End: h.end, Delta: h.delta, Data: data}
	if h.tokens > 0 {
		it.Tokens = make([]int, h.tokens)
		for i := range it.Tokens {
			it.Tokens[i] = int(int64(binary.LittleEndian.Uint64(tb[8*i:])))
		}
	}
	return it, nil
}
