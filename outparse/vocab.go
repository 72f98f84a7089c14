package outparse

import (
	"bytes"
	"fmt"

	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

// CallVocab is the vocabulary a CallGrammar masks, with the token sets its
// masks start from. Build it once per model; it is immutable.
type CallVocab struct {
	v       *jsonconstraint.Vocab
	encode  func(string) []int  // the tokenizer's, for forced texts
	all     []uint64            // every ordinary token
	stay    []uint64            // tokens without '<'
	rawStay []uint64            // of those, the ones valid UTF-8 from a character boundary
	lt      jsonconstraint.Trie // tokens with '<'
}

// NewCallVocab builds the vocabulary of tool calls: every ordinary token,
// the added tokens that are not special (the format's tags, such as
// "<tool_call>" and "</think>", are added tokens), and the end-of-sequence
// ids eos. Other special tokens are never allowed.
func NewCallVocab(tok *tokenizer.Tokenizer, eos []int) (*CallVocab, error) {
	toks := make([][]byte, tok.VocabSize())
	for id := range toks {
		if !tok.IsSpecial(id) {
			toks[id] = tok.TokenBytes(id)
		}
	}
	var ids []int
	for _, id := range eos {
		if id >= 0 && id < len(toks) {
			ids = append(ids, id)
		}
	}
	v, err := jsonconstraint.NewVocab(toks, ids)
	if err != nil {
		return nil, fmt.Errorf("outparse: building the tool-call vocabulary: %w", err)
	}
	cv := &CallVocab{v: v, encode: tok.Encode}
	words := v.Words()
	cv.all, cv.stay, cv.rawStay = make([]uint64, words), make([]uint64, words), make([]uint64, words)
	for id := range v.Size() {
		tb := v.TokenBytes(id)
		if len(tb) == 0 {
			continue
		}
		bit := uint64(1) << (id & 63)
		cv.all[id>>6] |= bit
		if bytes.IndexByte(tb, '<') >= 0 {
			continue
		}
		cv.stay[id>>6] |= bit
		if validUTF8Prefix(tb) {
			cv.rawStay[id>>6] |= bit
		}
	}
	cv.lt = v.Subset(func(tb []byte) bool { return bytes.IndexByte(tb, '<') >= 0 })
	return cv, nil
}

// Vocab returns the underlying vocabulary.
func (cv *CallVocab) Vocab() *jsonconstraint.Vocab { return cv.v }
