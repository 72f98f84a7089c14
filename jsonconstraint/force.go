package jsonconstraint

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Forced is a text the next tokens must spell: exactly the tokens of its
// canonical encoding when the vocabulary's tokenizer gave one, otherwise
// any tokens whose bytes spell it. The zero value forces nothing.
type Forced struct {
	text []byte // bytes still to come, spelled by any tokens, before ids
	ids  []int  // then these tokens, when an encoding is used
}

// Force returns a Forced for text. encode, when not nil, is the
// tokenizer's encoding; it is used when every token it gives is an
// ordinary token of v and together they spell text exactly, so that the
// forced text takes exactly len(encode(text)) tokens.
//
// A completion begins with continuation bytes when the output so far
// stopped inside a UTF-8 character. A tokenizer cannot encode those
// alone, so up to utf8.UTFMax-1 of them are forced as bytes and only the
// rest is encoded: the forced text then takes at most that many tokens
// more than its encoded rest, rather than one per byte.
func (v *Vocab) Force(text []byte, encode func(string) []int) Forced {
	if len(text) == 0 {
		return Forced{}
	}
	if encode != nil {
		n := 0
		for n < len(text) && n < utf8.UTFMax-1 && !utf8.RuneStart(text[n]) {
			n++
		}
		if n < len(text) && utf8.RuneStart(text[n]) {
			if ids, ok := v.encoded(text[n:], encode); ok {
				return Forced{text: bytes.Clone(text[:n]), ids: ids}
			}
		}
	}
	return Forced{text: bytes.Clone(text)}
}

// encoded returns encode(text) if its tokens are ordinary tokens of v
// that spell text exactly.
func (v *Vocab) encoded(text []byte, encode func(string) []int) ([]int, bool) {
	ids := encode(string(text))
	var spelled []byte
	for _, id := range ids {
		tb := v.TokenBytes(id)
		if len(tb) == 0 {
			return nil, false
		}
		spelled = append(spelled, tb...)
	}
	return ids, bytes.Equal(spelled, text)
}

// Tokens returns the most tokens the rest of the forced text takes.
func (f *Forced) Tokens() int { return len(f.text) + len(f.ids) }

// Done reports whether nothing is left to force.
func (f *Forced) Done() bool { return len(f.text) == 0 && len(f.ids) == 0 }

// Mask sets in m the tokens that may come next.
func (f *Forced) Mask(v *Vocab, m []uint64) {
	if len(f.text) == 0 && len(f.ids) > 0 {
		id := f.ids[0]
		m[id>>6] |= 1 << (id & 63)
		return
	}
	rest := f.text
	Walk(v.All(), 0, func(i *int, b byte) bool {
		if *i < len(rest) && rest[*i] == b {
			*i++
			return true
		}
		return false
	}, m)
}

// Accept advances past a token; it fails on one the forced text does not
// allow.
func (f *Forced) Accept(v *Vocab, token int) error {
	if len(f.text) == 0 && len(f.ids) > 0 {
		if token != f.ids[0] {
			return fmt.Errorf("jsonconstraint: token %d where %d was forced", token, f.ids[0])
		}
		f.ids = f.ids[1:]
		return nil
	}
	tb := v.TokenBytes(token)
	if len(tb) == 0 || !bytes.HasPrefix(f.text, tb) {
		return fmt.Errorf("jsonconstraint: token %d (%q) strays from the forced text %q", token, tb, f.text)
	}
	f.text = f.text[len(tb):]
	return nil
}
