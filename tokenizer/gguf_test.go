package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/gguf"
)

// qwen3VocabGGUF is llama.cpp's --vocab-only conversion of
// testdata/tokenizer/qwen3's tokenizer.json, with the Qwen3.5 chat template
// (testdata/gguf/README.md).
var qwen3VocabGGUF = filepath.Join("..", "testdata", "gguf", "qwen3-vocab.gguf")

// looksSpecial is llama.cpp's converter's rule for added tokens it marks
// control although tokenizer.json does not call them special.
func looksSpecial(s string) bool { return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") }

// TestGGUFVocab reads the tokenizer of llama.cpp's vocabulary-only file and
// checks it against the goldens and the tokenizer.json it came from: the
// same ids for every encode case, the same text for every decode case, the
// same added tokens; <|...|> tokens that tokenizer.json calls non-special
// (<|fim_prefix|> and kin) are control tokens in the file, so they count as
// special (dropped when decoding with skip_special_tokens).
func TestGGUFVocab(t *testing.T) {
	tok, err := Load(qwen3VocabGGUF) // through Load's GGUF dispatch
	if err != nil {
		t.Fatal(err)
	}
	hf := mustQwen3(t)
	if tok.VocabSize() != hf.VocabSize() {
		t.Errorf("VocabSize %d, tokenizer.json %d", tok.VocabSize(), hf.VocabSize())
	}
	n := 0
	for _, c := range mustCases(t) {
		switch c.Kind {
		case "encode":
			n++
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, trim(c.Text), trimIDs(got), trimIDs(c.IDs))
			}
			if d := tok.Decode(c.IDs, false); d != c.Decoded {
				t.Errorf("%s: Decode = %q, want %q", c.Name, trim(d), trim(c.Decoded))
			}
		case "decode":
			want := c.Decoded
			if want == "" {
				want = c.Text
			}
			if d := hf.Decode(c.IDs, c.SkipSpecial); d != want {
				t.Fatalf("%s: the tokenizer.json path decodes %q, golden %q", c.Name, d, want)
			}
			got := tok.Decode(c.IDs, c.SkipSpecial)
			if got != want && !explained(tok, hf, c.IDs, c.SkipSpecial) {
				t.Errorf("%s: Decode(%v, %v) = %q, want %q", c.Name, c.IDs, c.SkipSpecial, got, want)
			}
		}
	}
	if n < 300 {
		t.Errorf("only %d encode cases", n)
	}
	hfAdded, added := hf.AddedTokens(), tok.AddedTokens()
	if len(added) != len(hfAdded) {
		t.Fatalf("%d added tokens, tokenizer.json %d", len(added), len(hfAdded))
	}
	for i, a := range added {
		h := hfAdded[i]
		if a.ID != h.ID || a.Content != h.Content || a.Special != (h.Special || looksSpecial(h.Content)) {
			t.Errorf("added token %+v, tokenizer.json %+v", a, h)
		}
	}
	if got := tok.EOSTokens(); !slices.Equal(got, []int{151645, 151643}) {
		t.Errorf("EOSTokens %v, want <|im_end|> then <|endoftext|>: [151645 151643]", got)
	}
	if id, ok := tok.PadToken(); !ok || id != 151643 {
		t.Errorf("PadToken %d %v, want 151643", id, ok)
	}
	if _, ok := tok.BOSToken(); ok {
		t.Error("the file has no bos id")
	}
	tmpl, err := os.ReadFile(filepath.Join("..", "testdata", "chat", "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.ChatTemplate() != string(tmpl) {
		t.Error("ChatTemplate is not the file's Qwen3.5 template")
	}
}

// explained reports whether two decodings of ids may differ: only when
// skipping special tokens and ids hold a token the two call special
// differently.
func explained(a, b *Tokenizer, ids []int, skip bool) bool {
	if !skip {
		return false
	}
	for _, id := range ids {
		if a.IsSpecial(id) != b.IsSpecial(id) {
			return true
		}
	}
	return false
}

// TestGGUFMetadataLikeLlamaCpp writes the Qwen3 tokenizer.json as GGUF
// metadata and compares it with what llama.cpp's converter wrote from the
// same file: the same tokens, types, merges and special ids.
func TestGGUFMetadataLikeLlamaCpp(t *testing.T) {
	f, err := gguf.Open(qwen3VocabGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := f.Metadata()
	tokens, _ := want.Strings(KeyGGUFTokens)
	kvs, err := mustQwen3(t).GGUFMetadata(len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	got, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{KeyGGUFModel, KeyGGUFPre, KeyGGUFTokens, KeyGGUFTokenType, KeyGGUFMerges, KeyGGUFEOS, KeyGGUFPad, KeyGGUFAddBOS} {
		g, _ := got.Get(key)
		w, ok := want.Get(key)
		if !ok {
			t.Fatalf("llama.cpp's file has no %s", key)
		}
		if !equalValues(g, w) {
			t.Errorf("%s differs from llama.cpp's", key)
		}
	}
	if got.Has(KeyGGUFBOS) {
		t.Error("wrote a bos id; the tokenizer has none")
	}
}

func equalValues(a, b any) bool {
	switch x := a.(type) {
	case []string:
		y, ok := b.([]string)
		return ok && slices.Equal(x, y)
	case []int32:
		y, ok := b.([]int32)
		return ok && slices.Equal(x, y)
	}
	return a == b
}

// TestGGUFRoundTripQwen35 writes the Qwen3.5-shaped tokenizer (its added
// tokens and ids, "a b" merges, Qwen3.5's split pattern) into a GGUF file
// and reads it back: pre-tokenizer qwen35, the same ids on every case, the
// same special ids and stop tokens.
func TestGGUFRoundTripQwen35(t *testing.T) {
	hf, err := Load(buildQwen35Shaped(t))
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := hf.GGUFMetadata(248320)
	if err != nil {
		t.Fatal(err)
	}
	md, err := gguf.NewMetadata(append([]gguf.KV{{Key: "general.architecture", Value: "qwen35"}}, kvs...)...)
	if err != nil {
		t.Fatal(err)
	}
	if pre, _ := md.String(KeyGGUFPre); pre != "qwen35" {
		t.Errorf("pre-tokenizer %q, want qwen35", pre)
	}
	raw, err := gguf.Marshal(md, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != hf.VocabSize() {
		t.Errorf("VocabSize %d, want %d", tok.VocabSize(), hf.VocabSize())
	}
	for _, c := range mustCases(t) {
		if c.Kind != "encode" {
			continue
		}
		want := hf.Encode(c.Text)
		if got := tok.Encode(c.Text); !slices.Equal(got, want) {
			t.Errorf("%s: %v, tokenizer.json %v", c.Name, trimIDs(got), trimIDs(want))
		}
	}
	off := readOfficial(t)
	for s, want := range off.SpecialTokenIDs {
		if got, ok := tok.TokenID(s); !ok || got != want {
			t.Errorf("TokenID(%q) = %d %v, want %d", s, got, ok, want)
		}
		if tok.IsSpecial(want) != (hf.IsSpecial(want) || looksSpecial(s)) {
			t.Errorf("%s: IsSpecial %v", s, tok.IsSpecial(want))
		}
	}
	if got, want := tok.EOSTokens(), hf.EOSTokens(); !slices.Equal(got, want) {
		t.Errorf("EOSTokens %v, want %v", got, want)
	}
	if tok.ChatTemplate() != hf.ChatTemplate() {
		t.Error("chat template lost")
	}
}

// TestGGUFVocabErrors checks the files FromGGUF refuses.
func TestGGUFVocabErrors(t *testing.T) {
	f, err := gguf.Open(qwen3VocabGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	edit := func(key string, v any) *gguf.Metadata {
		md, _ := gguf.NewMetadata(f.Metadata().KVs()...)
		if v == nil {
			kvs := slices.DeleteFunc(md.KVs(), func(kv gguf.KV) bool { return kv.Key == key })
			md, _ = gguf.NewMetadata(kvs...)
		} else {
			md.Set(key, v)
		}
		return md
	}
	types, _ := f.Metadata().Ints(KeyGGUFTokenType)
	bad := make([]int32, len(types))
	for i, ty := range types {
		bad[i] = int32(ty)
	}
	bad[7] = 9
	realTokens, _ := f.Metadata().Strings(KeyGGUFTokens)
	dupTokens := slices.Clone(realTokens)
	dupTokens[1] = dupTokens[0]
	for _, c := range []struct {
		md   *gguf.Metadata
		want string
	}{
		{edit(KeyGGUFModel, "llama"), `tokenizer model "llama": only gpt2`},
		{edit(KeyGGUFPre, "llama-bpe"), `pre-tokenizer "llama-bpe" is not supported`},
		{edit(KeyGGUFTokens, nil), `key "tokenizer.ggml.tokens": no such key`},
		{edit(KeyGGUFTokenType, []int32{1, 1}), "2 token types for 151936 tokens"},
		{edit(KeyGGUFTokenType, bad), "token 7 has unknown type 9"},
		{edit(KeyGGUFMerges, []string{"a b c"}), `merge 0 "a b c" is not two symbols`},
		{edit(KeyGGUFMerges, []string{"Ġ zzz"}), "uses a token missing from the vocab"},
		{edit(KeyGGUFEOS, uint32(151935)), "tokenizer.ggml.eos_token_id 151935 names no token"},
		{edit(KeyGGUFTokens, dupTokens), `token "!" has ids 0 and 1`},
	} {
		if _, err := FromGGUF(c.md); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	// A pipeline a GGUF file cannot name is not written.
	gpt2, err := parse([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gpt2.GGUFMetadata(1); err == nil || !strings.Contains(err.Error(), "normalizer is not NFC") {
		t.Errorf("GGUFMetadata of a GPT-2 pipeline: %v", err)
	}
}
