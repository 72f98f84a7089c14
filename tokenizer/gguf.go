package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/govinfer/govinfer/gguf"
	"golang.org/x/text/unicode/norm"
)

// GGUF files store a byte-level BPE tokenizer as metadata (llama.cpp's
// "gpt2" tokenizer model): the tokens in id order, a type per token, the
// merges in rank order, the special ids, and the name of the pre-tokenizer
// (its split pattern is the reader's to know). This file reads and writes
// that form, so that a GGUF tokenizer gives the ids its tokenizer.json
// gives.

// GGUF metadata keys of the tokenizer.
const (
	KeyGGUFModel        = "tokenizer.ggml.model"
	KeyGGUFPre          = "tokenizer.ggml.pre"
	KeyGGUFTokens       = "tokenizer.ggml.tokens"
	KeyGGUFTokenType    = "tokenizer.ggml.token_type"
	KeyGGUFMerges       = "tokenizer.ggml.merges"
	KeyGGUFBOS          = "tokenizer.ggml.bos_token_id"
	KeyGGUFEOS          = "tokenizer.ggml.eos_token_id"
	KeyGGUFPad          = "tokenizer.ggml.padding_token_id"
	KeyGGUFAddBOS       = "tokenizer.ggml.add_bos_token"
	KeyGGUFChatTemplate = "tokenizer.chat_template"
)

// llama.cpp's token types (tokenizer.ggml.token_type).
const (
	ggufNormal      = 1
	ggufUnknown     = 2
	ggufControl     = 3
	ggufUserDefined = 4
	ggufUnused      = 5
	ggufByte        = 6
)

// The split patterns of the pre-tokenizers llama.cpp names qwen2 (Qwen2's
// and Qwen3's tokenizer.json) and qwen35 (Qwen3.5's, which adds \p{M} to
// the letter runs).
const (
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen35Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// ggufPre maps tokenizer.ggml.pre names to split patterns. Both Qwen
// tokenizer.json files normalize to NFC before splitting.
var ggufPre = map[string]string{"qwen2": qwen2Pattern, "qwen35": qwen35Pattern}

// stopTexts are the tokens generation stops on besides the file's eos
// (Qwen3.5's generation_config.json lists <|im_end|> and <|endoftext|>).
var stopTexts = []string{"<|im_end|>", "<|endoftext|>"}

// LoadGGUF reads the tokenizer of a GGUF file (a .gguf file, any part of a
// split one, or a directory holding one); only its metadata is read, so a
// vocabulary-only file serves.
func LoadGGUF(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := FromGGUF(f.Metadata())
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// FromGGUF builds the tokenizer stored in GGUF metadata: tokenizer model
// "gpt2" with pre-tokenizer "qwen2" or "qwen35", normal tokens as the BPE
// vocabulary, control tokens as special added tokens and user-defined ones
// as plain added tokens (matched whole in the text, as tokenizer.json's
// added tokens are); unused ids name no token. Its EOSTokens are the file's
// eos id, then <|im_end|> and <|endoftext|> where the vocabulary has them;
// ChatTemplate is tokenizer.chat_template.
func FromGGUF(md *gguf.Metadata) (*Tokenizer, error) {
	model, err := md.String(KeyGGUFModel)
	if err != nil {
		return nil, err
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer model %q: only gpt2 (byte-level BPE) is supported", model)
	}
	pre, err := md.String(KeyGGUFPre)
	if err != nil {
		return nil, err
	}
	pattern, ok := ggufPre[pre]
	if !ok {
		return nil, fmt.Errorf("pre-tokenizer %q is not supported (want qwen2 or qwen35)", pre)
	}
	tokens, err := md.Strings(KeyGGUFTokens)
	if err != nil {
		return nil, err
	}
	types := make([]int64, len(tokens))
	if md.Has(KeyGGUFTokenType) {
		if types, err = md.Ints(KeyGGUFTokenType); err != nil {
			return nil, err
		}
		if len(types) != len(tokens) {
			return nil, fmt.Errorf("%d token types for %d tokens", len(types), len(tokens))
		}
	}
	merges, err := md.Strings(KeyGGUFMerges)
	if err != nil {
		return nil, err
	}
	var f fileJSON
	f.Model.Type = "BPE"
	f.Model.Vocab = make(vocabMap, len(tokens))
	for id, tok := range tokens {
		switch types[id] {
		case 0, ggufNormal, ggufUnknown, ggufByte:
			if prev, dup := f.Model.Vocab[tok]; dup {
				return nil, fmt.Errorf("token %q has ids %d and %d", tok, prev, id)
			}
			f.Model.Vocab[tok] = id
		case ggufControl, ggufUserDefined:
			if tok == "" {
				return nil, fmt.Errorf("added token %d is empty", id)
			}
			f.AddedTokens = append(f.AddedTokens, addedTokenJSON{ID: id, Content: tok, Special: types[id] == ggufControl, Normalized: new(bool)})
		case ggufUnused:
		default:
			return nil, fmt.Errorf("token %d has unknown type %d", id, types[id])
		}
	}
	f.Model.Merges = make(mergeList, len(merges))
	for i, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("merge %d %q is not two symbols separated by a space", i, m)
		}
		f.Model.Merges[i] = [2]string{a, b}
	}
	f.Normalizer = json.RawMessage(`{"type":"NFC"}`)
	f.PreTokenizer, _ = json.Marshal(map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	}})
	f.Decoder = json.RawMessage(`{"type":"ByteLevel"}`)
	t, err := fromFile(&f)
	if err != nil {
		return nil, err
	}
	for _, ref := range []struct {
		key string
		dst *int
	}{{KeyGGUFEOS, &t.eos}, {KeyGGUFPad, &t.pad}, {KeyGGUFBOS, &t.bos}} {
		if !md.Has(ref.key) {
			continue
		}
		id, err := md.Int(ref.key)
		if err != nil {
			return nil, err
		}
		if id < 0 || id >= int64(len(tokens)) || types[id] == ggufUnused {
			return nil, fmt.Errorf("%s %d names no token", ref.key, id)
		}
		*ref.dst = int(id)
	}
	t.rebuild()
	for _, s := range stopTexts {
		if id, ok := t.TokenID(s); ok {
			t.genEOS = append(t.genEOS, id)
		}
	}
	if md.Has(KeyGGUFChatTemplate) {
		if t.chatTemplate, err = md.String(KeyGGUFChatTemplate); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// GGUFMetadata returns the tokenizer as GGUF metadata, as llama.cpp's
// converter writes it: vocabSize tokens (ids the tokenizer does not use are
// "[PAD<id>]", of type unused), added tokens as control tokens when special
// or shaped like <|...|>, else user-defined, the merges in rank order, the
// eos, padding and bos ids it has, add_bos_token false, and the chat
// template when there is one. Only tokenizers FromGGUF can read back are
// written: byte-level BPE with NFC and the qwen2 or qwen35 split pattern.
func (t *Tokenizer) GGUFMetadata(vocabSize int) ([]gguf.KV, error) {
	pre, err := t.ggufPre()
	if err != nil {
		return nil, err
	}
	if vocabSize < t.VocabSize() {
		return nil, fmt.Errorf("tokenizer: %d tokens do not fit a vocabulary of %d", t.VocabSize(), vocabSize)
	}
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	for id := range tokens {
		switch {
		case id < len(t.kind) && t.kind[id] == kindAdded:
			a := t.added[t.addedByID[id]]
			tokens[id], types[id] = a.content, ggufUserDefined
			if a.special || strings.HasPrefix(a.content, "<|") && strings.HasSuffix(a.content, "|>") {
				types[id] = ggufControl
			}
		case id < len(t.kind) && t.kind[id] == kindVocab:
			tokens[id], types[id] = t.tokens[id], ggufNormal
		default:
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), ggufUnused
		}
	}
	type merge struct {
		rank uint64
		text string
	}
	ms := make([]merge, 0, len(t.model.merges))
	for pair, v := range t.model.merges {
		a, b := int(pair>>32), int(uint32(pair))
		ms = append(ms, merge{v >> 32, t.tokens[a] + " " + t.tokens[b]})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].rank < ms[j].rank })
	merges := make([]string, len(ms))
	for i, m := range ms {
		merges[i] = m.text
	}
	kvs := []gguf.KV{
		{Key: KeyGGUFModel, Value: "gpt2"},
		{Key: KeyGGUFPre, Value: pre},
		{Key: KeyGGUFTokens, Value: tokens},
		{Key: KeyGGUFTokenType, Value: types},
		{Key: KeyGGUFMerges, Value: merges},
	}
	for _, ref := range []struct {
		key string
		id  int
	}{{KeyGGUFBOS, t.bos}, {KeyGGUFEOS, t.eos}, {KeyGGUFPad, t.pad}} {
		if ref.id >= 0 {
			kvs = append(kvs, gguf.KV{Key: ref.key, Value: uint32(ref.id)})
		}
	}
	kvs = append(kvs, gguf.KV{Key: KeyGGUFAddBOS, Value: false})
	if t.chatTemplate != "" {
		kvs = append(kvs, gguf.KV{Key: KeyGGUFChatTemplate, Value: t.chatTemplate})
	}
	return kvs, nil
}

// ggufPre returns the GGUF name of the tokenizer's pipeline, or an error
// saying why a GGUF file cannot hold it.
func (t *Tokenizer) ggufPre() (string, error) {
	fail := func(what string) (string, error) {
		return "", fmt.Errorf("tokenizer: %s: a GGUF file can hold only Qwen's byte-level BPE pipeline (NFC, the qwen2 or qwen35 split pattern)", what)
	}
	if !slices.Equal(t.normalize, []norm.Form{norm.NFC}) {
		return fail("the normalizer is not NFC")
	}
	if len(t.pre) != 2 || t.pre[0].prog == nil || t.pre[0].byteLevel || t.pre[0].remove ||
		!t.pre[1].byteLevel || t.pre[1].prog != nil || t.pre[1].addPrefixSpace {
		return fail("the pre-tokenizer is not a Split then a ByteLevel without regex")
	}
	for name, p := range ggufPre {
		if t.pre[0].pattern == p {
			if t.model.ignoreMerges || t.model.unk >= 0 {
				return fail("the BPE model ignores merges or has an unknown token")
			}
			return name, nil
		}
	}
	return fail("the split pattern is neither qwen2's nor qwen35's")
}
