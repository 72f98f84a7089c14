package jsonconstraint

import (
	"encoding/json"
	"strings"
)

// TextRule constrains a text written raw rather than as a JSON string
// (the string parameters of a Qwen3.5 tool call): the schema's string
// keywords (minLength, maxLength, pattern) or its string enum and const
// values.
// Texts are valid UTF-8; their lengths count code points.
type TextRule struct {
	str  *strRule // nil: any length
	enum *litTrie // nil: any text; else the allowed texts
}

// TextRule returns the rule of the strings the grammar allows at its top
// level, or nil when it allows none. When it allows free strings the enum
// values are moot; otherwise its string enum and const values are the
// texts allowed.
func (g *Grammar) TextRule() *TextRule {
	n := g.root
	if n.kinds&kString != 0 {
		return &TextRule{str: n.str}
	}
	var texts [][]byte
	for _, l := range n.literals {
		var s string
		if len(l) > 0 && l[0] == '"' && json.Unmarshal(l, &s) == nil {
			texts = append(texts, []byte(s))
		}
	}
	if len(texts) == 0 {
		return nil
	}
	return &TextRule{enum: newLitTrie(texts)}
}

// Free reports whether the rule allows any text.
func (r *TextRule) Free() bool { return r.str == nil && r.enum == nil }

// Minimal returns the shortest text the rule allows.
func (r *TextRule) Minimal() string {
	t := r.Start()
	return string(t.Completion())
}

// Start returns the state at the beginning of a text.
func (r *TextRule) Start() Text { return Text{r: r} }

// Text is the state of a raw text under a TextRule. It is a small
// comparable value: copying it is a snapshot.
type Text struct {
	r      *TextRule
	cnt    uint32 // characters so far
	t      int32  // enum: node of the enum trie
	need   uint8  // UTF-8 continuation bytes still expected
	lo, hi uint8  // range of the next continuation byte
	dfa    int32  // the pattern's state, for a rule with a pattern
}

// Step reads one byte of the text; false means it cannot come next (t is
// then unchanged).
func (t *Text) Step(b byte) bool {
	n := *t
	if n.need > 0 {
		if b < n.lo || b > n.hi {
			return false
		}
		n.need--
		n.lo, n.hi = 0x80, 0xBF
	} else {
		switch {
		case b < 0x80:
		case b >= 0xC2 && b <= 0xDF:
			n.need, n.lo, n.hi = 1, 0x80, 0xBF
		case b == 0xE0:
			n.need, n.lo, n.hi = 2, 0xA0, 0xBF
		case b == 0xED:
			n.need, n.lo, n.hi = 2, 0x80, 0x9F
		case b >= 0xE1 && b <= 0xEF:
			n.need, n.lo, n.hi = 2, 0x80, 0xBF
		case b == 0xF0:
			n.need, n.lo, n.hi = 3, 0x90, 0xBF
		case b >= 0xF1 && b <= 0xF3:
			n.need, n.lo, n.hi = 3, 0x80, 0xBF
		case b == 0xF4:
			n.need, n.lo, n.hi = 3, 0x80, 0x8F
		default:
			return false
		}
		if r := n.r.str; r != nil && r.pat == nil {
			// (A pattern's DFA counts the characters itself.)
			if r.maxLen >= 0 && n.cnt >= uint32(r.maxLen) {
				return false
			}
			n.cnt++
		}
	}
	if e := n.r.enum; e != nil {
		if n.t = e.child(n.t, b); n.t < 0 {
			return false
		}
	}
	if r := n.r.str; r != nil && r.pat != nil {
		if n.dfa = r.pat.Step(n.dfa, b); n.dfa < 0 {
			return false
		}
	}
	*t = n
	return true
}

// Complete reports whether the text may end here.
func (t Text) Complete() bool {
	if t.need > 0 {
		return false
	}
	if e := t.r.enum; e != nil {
		return e.nodes[t.t].terminal
	}
	if r := t.r.str; r != nil && r.pat != nil {
		return r.pat.Accept(t.dfa)
	}
	return t.r.str == nil || t.cnt >= uint32(t.r.str.minLen)
}

// Boundary reports whether the text is between characters with nothing
// more to check: its rule is free, so any valid UTF-8 may follow.
func (t Text) Boundary() bool { return t.need == 0 && t.r.Free() }

// Completion returns the shortest bytes after which the text may end: the
// character being read finished, then the rest of the nearest enum value
// or filler characters up to minLength ('a', never markup).
func (t Text) Completion() []byte {
	if r := t.r.str; r != nil && r.pat != nil {
		return r.pat.Shortest(t.dfa) // within the lengths, characters finished
	}
	var out []byte
	if t.need > 0 {
		out = append(out, t.lo)
		for range int(t.need) - 1 {
			out = append(out, 0x80)
		}
	}
	if e := t.r.enum; e != nil {
		// The enum trie runs over bytes, so its completion finishes any
		// character a value started.
		return e.completion(t.t)
	}
	// A character is counted at its lead byte, so the one finished above
	// already is.
	if r := t.r.str; r != nil && t.cnt < uint32(r.minLen) {
		out = append(out, strings.Repeat("a", int(r.minLen)-int(t.cnt))...)
	}
	return out
}
