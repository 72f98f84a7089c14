// Package kvevents publishes which token prefixes the engine can resume
// from, in vLLM's KV-cache event format, so that a prefix-aware router (the
// llm-d router's precise prefix scorer, or anything that reads vLLM's
// events) can send a request to the replica that already holds most of its
// prompt.
//
// # Wire format
//
// A ZeroMQ PUB socket (pure Go: github.com/go-zeromq/zmq4) sends one
// message per batch of events, in three frames: the topic
// ("kv@<pod-id>@<model>"; routers subscribe to the prefix "kv@"), a
// sequence number (uint64 big-endian, from 0, one per batch sent) and a
// msgpack payload (github.com/vmihailenco/msgpack/v5) of positional arrays,
// as vLLM's msgspec structs with array_like=True encode them:
//
//	EventBatch       = [ts float64, events, data_parallel_rank nil]
//	BlockStored      = ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size]
//	BlockRemoved     = ["BlockRemoved", block_hashes]
//	AllBlocksCleared = ["AllBlocksCleared"]
//
// vLLM's optional trailing fields are sent up to the last one set:
//
//	BlockStored  = ["BlockStored", block_hashes, parent|nil, token_ids, block_size,
//	                lora_id nil, medium, lora_name nil]
//	BlockRemoved = ["BlockRemoved", block_hashes, medium]
//
// medium names the tier that holds (or no longer holds) the blocks, with
// vLLM's names: "GPU" for a device's memory, "CPU" for host memory, "FS"
// for files (MediumGPU, MediumCPU, MediumFS). A router indexes a block per
// pod and medium, so that a span written to disk is a BlockStored on "FS",
// a span evicted from memory but kept on disk a BlockRemoved on the memory
// medium only, and a span read back from disk a BlockStored on the memory
// medium again. Without a medium an event is the five (or two) fields,
// which a router reads as "GPU". lora_id and lora_name stay nil: govinfer
// serves one model without adapters (Attrs is where a LoRA name would go),
// and a BlockStored without group_idx is what a router indexes as ordinary
// full-attention blocks.
//
// The exception is a span whose blocks hold an image's tokens: its
// token_ids are the real ids (the image's placeholder pads, the same for
// every image) and, as vLLM does, it carries extra_keys, so that a router
// can tell two images apart:
//
//	BlockStored = ["BlockStored", block_hashes, parent|nil, token_ids, block_size,
//	               nil, medium|nil, nil, extra_keys]
//	extra_keys  = [entry per block]; entry = nil | [[image_hash_hex, offset], ...]
//
// one [identifier, offset] pair (vLLM's (mm_feature.identifier, offset)
// tuple from _gen_mm_extra_hash_keys) for each image whose tokens fall in
// the block, the identifier the image's SHA-256 in hex and the offset that
// of its first token from the block's first (negative when the image began
// in an earlier block); nil for a block holding no image token.
//
// Block hashes are uint64s computed as the llm-d router computes its own
// block keys (BlockKeys): FNV-64a over the canonical CBOR encoding of
// [parent, tokens, nil], chained from a root that hashes the model name.
// A block holding image tokens hashes [parent, tokens, keys] instead, keys
// its extra keys as llm-d's BlockExtraFeatures.MMHashes (an array of
// {"Hash", "Offset"} maps; see Hasher.BlocksExtra).
// The router recomputes its keys from token_ids and uses the engine's
// hashes only as opaque ids, but with the same hash seed, model name and
// block size the two agree, which makes the events easy to check.
//
// # What an event means for a hybrid model
//
// Qwen3.5 interleaves Gated DeltaNet layers, whose state at a position is
// one fixed-size snapshot, with attention layers, whose state is the KV of
// every earlier token. A prefix of a prompt can be skipped only where both
// are held: the attention KV up to a position and the recurrent state at
// exactly that position. An engine that caches the recurrent state only at
// some points can resume only at those points, however much KV it holds.
// vLLM therefore turns its hybrid cache manager off when events are on;
// no engine publishes correct events for Qwen3.5.
//
// The Publisher is driven by span, not by block: the prefix cache calls
// SpanStored for the tokens between two consecutive snapshot points it
// keeps (both multiples of the block size C), naming the span that ends
// at the earlier point as the parent, and SpanRemoved when a point's
// snapshot is evicted. So every BlockStored ends at a point the engine
// can resume from, and the chain of whole spans a router can match is the
// prefix the engine will actually skip. A router credits blocks inside a
// span too; that is harmless, since it only ranks replicas, and the engine
// then resumes at the last kept point before them.
//
// The contract with the prefix cache, so that the announced chains stay
// exactly the resumable prefixes:
//
//   - when a snapshot point at position b is kept, call
//     SpanStored(span of the previous kept point a on the same path, or
//     the zero Span, tokens[a:b]) and keep the returned Span with the point;
//   - when the point's snapshot is evicted and no later kept point extends
//     it, call SpanRemoved(its span);
//   - when it is evicted but a later kept point c extends it, the two spans
//     become one: SpanRemoved(span of b), SpanRemoved(span of c), then
//     SpanStored(span of a, tokens[a:c]) for c (the block hashes are the
//     same, so a router's index keeps its blocks and loses only the end
//     at b);
//   - when the cache is emptied, call AllCleared.
//
// # Never blocking the engine
//
// SpanStored, SpanRemoved and AllCleared encode the event on the caller's
// goroutine (microseconds: a hash per block of tokens) and append it to a
// bounded pending batch; a goroutine of the Publisher sends what is
// pending as one batch whenever the socket is free. If the socket is stuck
// (a subscriber that does not read) and the pending batch reaches
// Config.MaxPending events, it is dropped whole and counted
// (Stats.DroppedBatches), and the next batch sent starts with
// AllBlocksCleared, so that a router forgets what it can no longer trust
// rather than keep blocks whose removal it missed.
package kvevents
