package kvevents

import (
	"encoding/hex"
	"errors"
	"hash/fnv"
	"slices"
	"testing"
)

// The goldens below come from llm-d-kv-cache's token processor
// (pkg/kvcache/kvblock/token_processor.go: FNV-64a over
// fxamacker/cbor's canonical encoding of [parent, tokens, extra]), run
// outside this repository with fxamacker/cbor v2.10.0.

// TestBlockHashCBOR checks the CBOR bytes behind blockHash against the
// encoder llm-d uses, byte for byte, by hashing both.
func TestBlockHashCBOR(t *testing.T) {
	cases := []struct {
		cbor      string
		parent    uint64
		tokens    []int
		extra     string
		extraText bool
	}{
		// [5, nil, "m"]: a root.
		{"8305f6616d", 5, nil, "m", true},
		// [2^40, [0 23 24 255 256 65535 65536 248319], nil]: every integer width.
		{"831b0000010000000000880017181818ff19010019ffff1a000100001a0003c9fff6", 1 << 40,
			[]int{0, 23, 24, 255, 256, 65535, 65536, 248319}, "", false},
	}
	for _, c := range cases {
		b, err := hex.DecodeString(c.cbor)
		if err != nil {
			t.Fatal(err)
		}
		h := fnv.New64a()
		h.Write(b)
		if got := blockHash(c.parent, c.tokens, c.extra, c.extraText); got != h.Sum64() {
			t.Errorf("blockHash(%d, %v, %q) = %d, want FNV-64a of %s = %d", c.parent, c.tokens, c.extra, got, c.cbor, h.Sum64())
		}
	}
}

func TestHasherMatchesLLMD(t *testing.T) {
	toks := make([]int, 200)
	for i := range toks {
		toks[i] = i * 7919 % 248320
	}
	cases := []struct {
		seed, model string
		blockSize   int
		want        []uint64
	}{
		{"", "Qwen/Qwen3.5-9B", 64, []uint64{13552309139467392788, 7052198403399571506, 12569736478774287144}},
		{"42", "m", 16, []uint64{5005069006550100709, 6768048892690894445, 5581108526752644712}},
	}
	for _, c := range cases {
		h, err := NewHasher(c.seed, c.model, c.blockSize)
		if err != nil {
			t.Fatal(err)
		}
		got := h.Keys(toks)
		if len(got) != len(toks)/c.blockSize {
			t.Fatalf("%d keys for %d tokens at block size %d", len(got), len(toks), c.blockSize)
		}
		if !slices.Equal(got[:len(c.want)], c.want) {
			t.Errorf("seed %q model %q: keys %v, want %v", c.seed, c.model, got[:len(c.want)], c.want)
		}
	}
	h, _ := NewHasher("", "m", 64)
	if h.Root() != 11374735546233341228 {
		t.Errorf("root %d, want 11374735546233341228", h.Root())
	}
}

func TestHasherChains(t *testing.T) {
	h, err := NewHasher("", "m", 4)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	all := h.Keys(toks) // the partial last block is left out
	if len(all) != 3 {
		t.Fatalf("%d keys, want 3", len(all))
	}
	first, err := h.Blocks(nil, h.Root(), toks[:4])
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Blocks(nil, first[0], toks[4:12])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(append(first, rest...), all) {
		t.Errorf("split chain %v %v, whole %v", first, rest, all)
	}
	if _, err := h.Blocks(nil, h.Root(), toks[:5]); !errors.Is(err, errPartial) {
		t.Errorf("partial block: %v", err)
	}
	if _, err := NewHasher("", "m", 0); err == nil {
		t.Error("block size 0 accepted")
	}
	other, _ := NewHasher("", "other", 4)
	if other.Keys(toks)[0] == all[0] {
		t.Error("the model name does not change the hashes")
	}
}
