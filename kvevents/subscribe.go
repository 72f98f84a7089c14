package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// Event is one decoded KV-cache event.
type Event struct {
	// Tag is TagBlockStored, TagBlockRemoved or TagAllBlocksCleared.
	Tag string
	// Hashes are the blocks stored or removed.
	Hashes []uint64
	// Parent is a stored span's parent block, when HasParent.
	Parent    uint64
	HasParent bool
	// Tokens and BlockSize are a stored span's token ids and tokens per
	// block.
	Tokens    []int
	BlockSize int
	// ExtraKeys are a stored span's extra_keys, one entry per block (nil
	// for a block without), when the event has them: the multimodal
	// items' (identifier, offset) tuples (a bare identifier string, as
	// some vLLM versions send, decodes with offset 0; entries of other
	// kinds, such as a LoRA name, are skipped). Nil without extra_keys.
	ExtraKeys [][]MMKey
	// Medium is the event's medium (MediumGPU, MediumCPU, MediumFS, or
	// another of vLLM's), "" when it has none.
	Medium string
	// LoRAID and LoRAName are a stored span's lora_id and lora_name: the
	// LoRA adapter its state was computed with (0 and "" for none).
	LoRAID   int
	LoRAName string
}

// Batch is one decoded message payload.
type Batch struct {
	TS     float64
	Events []Event
}

// Message is one message of a subscription.
type Message struct {
	Topic string
	Seq   uint64
	Batch Batch
}

// Decode decodes a payload in vLLM's format (see the package doc),
// accepting what vLLM's own publishers send: trailing fields left out or
// present, hashes as unsigned or signed integers or bytes.
func Decode(payload []byte) (Batch, error) {
	var raw []any
	if err := msgpack.Unmarshal(payload, &raw); err != nil {
		return Batch{}, fmt.Errorf("kvevents: decoding a batch: %w", err)
	}
	if len(raw) < 2 {
		return Batch{}, fmt.Errorf("kvevents: a batch has %d fields, want at least 2", len(raw))
	}
	var b Batch
	switch ts := raw[0].(type) {
	case float64:
		b.TS = ts
	case float32:
		b.TS = float64(ts)
	default:
		return Batch{}, fmt.Errorf("kvevents: batch timestamp is %T", raw[0])
	}
	evs, ok := raw[1].([]any)
	if !ok {
		return Batch{}, fmt.Errorf("kvevents: batch events are %T, want an array", raw[1])
	}
	for i, e := range evs {
		ev, err := decodeEvent(e)
		if err != nil {
			return Batch{}, fmt.Errorf("kvevents: event %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

func decodeEvent(v any) (Event, error) {
	f, ok := v.([]any)
	if !ok || len(f) == 0 {
		return Event{}, fmt.Errorf("not a tagged array: %T", v)
	}
	tag, ok := f[0].(string)
	if !ok {
		return Event{}, fmt.Errorf("tag is %T", f[0])
	}
	ev := Event{Tag: tag}
	var err error
	switch tag {
	case TagBlockStored:
		if len(f) < 5 {
			return ev, fmt.Errorf("BlockStored has %d fields, want at least 5", len(f))
		}
		if ev.Hashes, err = hashList(f[1]); err != nil {
			return ev, err
		}
		if f[2] != nil {
			if ev.Parent, err = hashOf(f[2]); err != nil {
				return ev, err
			}
			ev.HasParent = true
		}
		toks, ok := f[3].([]any)
		if !ok {
			return ev, fmt.Errorf("token_ids are %T", f[3])
		}
		ev.Tokens = make([]int, len(toks))
		for i, t := range toks {
			if ev.Tokens[i], err = intOf(t); err != nil {
				return ev, fmt.Errorf("token_ids[%d]: %w", i, err)
			}
		}
		if ev.BlockSize, err = intOf(f[4]); err != nil {
			return ev, fmt.Errorf("block_size: %w", err)
		}
		if len(f) > 5 && f[5] != nil {
			if ev.LoRAID, err = intOf(f[5]); err != nil {
				return ev, fmt.Errorf("lora_id: %w", err)
			}
		}
		if len(f) > 6 {
			if ev.Medium, err = mediumOf(f[6]); err != nil {
				return ev, err
			}
		}
		if len(f) > 7 && f[7] != nil {
			name, ok := f[7].(string)
			if !ok {
				return ev, fmt.Errorf("lora_name is %T", f[7])
			}
			ev.LoRAName = name
		}
		if len(f) > 8 && f[8] != nil {
			if ev.ExtraKeys, err = extraKeysOf(f[8], len(ev.Hashes)); err != nil {
				return ev, fmt.Errorf("extra_keys: %w", err)
			}
		}
	case TagBlockRemoved:
		if len(f) < 2 {
			return ev, fmt.Errorf("BlockRemoved has %d fields, want at least 2", len(f))
		}
		if ev.Hashes, err = hashList(f[1]); err != nil {
			return ev, err
		}
		if len(f) > 2 {
			ev.Medium, err = mediumOf(f[2])
		}
	case TagAllBlocksCleared:
	default:
		return ev, fmt.Errorf("unknown event %q", tag)
	}
	return ev, err
}

// extraKeysOf decodes extra_keys: an array of one entry per block, each
// nil or an array of keys.
func extraKeysOf(v any, blocks int) ([][]MMKey, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array: %T", v)
	}
	if len(a) != blocks {
		return nil, fmt.Errorf("%d entries for %d blocks", len(a), blocks)
	}
	out := make([][]MMKey, len(a))
	found := false
	for i, e := range a {
		if e == nil {
			continue
		}
		keys, ok := e.([]any)
		if !ok {
			return nil, fmt.Errorf("entry %d is %T", i, e)
		}
		for _, k := range keys {
			switch k := k.(type) {
			case string:
				out[i] = append(out[i], MMKey{Hash: k})
			case []any:
				if len(k) != 2 {
					continue
				}
				h, ok := k[0].(string)
				if !ok {
					continue
				}
				off, err := int64Of(k[1])
				if err != nil {
					return nil, fmt.Errorf("entry %d: offset: %w", i, err)
				}
				out[i] = append(out[i], MMKey{Hash: h, Offset: int(off)})
			}
		}
		found = found || out[i] != nil
	}
	if !found {
		return nil, nil
	}
	return out, nil
}

// mediumOf decodes a medium: nil or a string.
func mediumOf(v any) (string, error) {
	switch m := v.(type) {
	case nil:
		return "", nil
	case string:
		return m, nil
	}
	return "", fmt.Errorf("medium is %T", v)
}

func hashList(v any) ([]uint64, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("block_hashes are %T", v)
	}
	hs := make([]uint64, len(a))
	for i, h := range a {
		var err error
		if hs[i], err = hashOf(h); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func hashOf(v any) (uint64, error) {
	switch h := v.(type) {
	case []byte:
		var b [8]byte
		if len(h) >= 8 {
			copy(b[:], h[len(h)-8:])
		} else {
			copy(b[8-len(h):], h)
		}
		return binary.BigEndian.Uint64(b[:]), nil
	default:
		n, err := int64Of(v)
		return uint64(n), err
	}
}

func int64Of(v any) (int64, error) {
	switch n := v.(type) {
	case int8:
		return int64(n), nil
	case int16:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	case uint8:
		return int64(n), nil
	case uint16:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		return int64(n), nil
	}
	return 0, fmt.Errorf("not an integer: %T", v)
}

func intOf(v any) (int, error) {
	n, err := int64Of(v)
	return int(n), err
}

// Subscribe dials a publisher's endpoint (such as "tcp://10.0.0.5:5557")
// with a ZeroMQ SUB socket subscribed to topics starting with prefix
// ("kv@" for every model) and sends each decoded message on the returned
// channel until ctx ends; a message that does not decode is sent with its
// error instead. The channel is closed when the subscription ends.
func Subscribe(ctx context.Context, endpoint, prefix string) (<-chan Received, error) {
	sub := zmq4.NewSub(ctx)
	if err := sub.Dial(endpoint); err != nil {
		sub.Close()
		return nil, fmt.Errorf("kvevents: dialing %s: %w", endpoint, err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, prefix); err != nil {
		sub.Close()
		return nil, fmt.Errorf("kvevents: subscribing to %q: %w", prefix, err)
	}
	out := make(chan Received, 64)
	go func() {
		defer close(out)
		defer sub.Close()
		for {
			msg, err := sub.Recv()
			if err != nil {
				if ctx.Err() == nil {
					select {
					case out <- Received{Err: fmt.Errorf("kvevents: receiving from %s: %w", endpoint, err)}:
					case <-ctx.Done():
					}
				}
				return
			}
			r := Received{}
			if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
				r.Err = fmt.Errorf("kvevents: a message of %d frames, want topic, 8-byte sequence and payload", len(msg.Frames))
			} else {
				r.Topic, r.Seq = string(msg.Frames[0]), binary.BigEndian.Uint64(msg.Frames[1])
				r.Batch, r.Err = Decode(msg.Frames[2])
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Received is a Message or the error that prevented reading one.
type Received struct {
	Message
	Err error
}
