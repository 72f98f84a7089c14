// Package tokenizer encodes and decodes text with a Hugging Face byte-level
// BPE tokenizer (tokenizer.json), as Qwen3 and Qwen3.5 checkpoints ship it,
// giving exactly the ids of the reference Rust implementation.
//
// Encoding runs the same pipeline as Hugging Face tokenizers: added tokens
// are matched on the raw text first (leftmost, longest, special or not), the
// rest is normalized (NFC for Qwen), cut by the Split pre-tokenizer's
// pattern, mapped byte by byte onto GPT-2's byte-level alphabet and merged
// by BPE rank. Decoding maps tokens back to bytes and replaces invalid UTF-8
// the way Rust's String::from_utf8_lossy does. A Decoder streams text out
// during generation and watches for stop strings.
//
// The pre-tokenizer pattern runs on a small engine of this package
// (pattern.go) because Go's regexp has no lookahead and an ASCII-only \s.
// github.com/sugarme/tokenizer was evaluated and is not used: its loader
// compiles the pattern with regexp.MustCompile and panics on Qwen's files.
// What would remain usable (BPE model, added vocabulary, ByteLevel decoder)
// is small, and is written here directly on bytes with no per-offset
// bookkeeping, so the whole pipeline lives in one place and can be checked
// piece by piece against the reference.
package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	bl        *byteLevel
	vocab     map[string]int // byte-level token string -> id
	tokens    []string       // id -> byte-level token string of the BPE vocabulary
	present   []bool         // id is in the BPE vocabulary
	model     *bpe
	normalize []norm.Form
	pre       []preStep

	added          []addedToken
	addedByID      map[int]int    // id -> index in added
	addedByContent map[string]int // content -> index in added
	rawMatch       tokenMatcher   // added tokens matched on the raw text
	normMatch      tokenMatcher   // added tokens matched after normalization

	// Per id, for decoding: the bytes of id i are data[off[i]:off[i+1]].
	data    []byte
	off     []uint32
	kind    []tokenKind
	special []bool

	eos, pad, bos int   // from tokenizer_config.json, -1 if unset
	genEOS        []int // from generation_config.json
	chatTemplate  string

	scratch sync.Pool // *scratch
}

type tokenKind uint8

const (
	kindNone  tokenKind = iota // no token has this id
	kindVocab                  // a BPE vocabulary entry
	kindAdded                  // an added token
)

// addedToken is a token matched whole in the text before BPE.
type addedToken struct {
	id         int
	content    string
	special    bool
	normalized bool // matched on the normalized text instead of the raw text
	lstrip     bool // swallows whitespace on its left
	rstrip     bool // swallows whitespace on its right
	singleWord bool // matches only when not inside a word
}

// scratch is the reusable working memory of one Encode call.
type scratch struct {
	m      matcher
	bpe    bpeScratch
	pieces []string
	next   []string
	spans  []span
}

// addToken registers an added token from tokenizer.json or the config.
func (t *Tokenizer) addToken(at addedTokenJSON) error {
	if at.Content == "" {
		return errorString("empty content")
	}
	if at.ID < 0 || at.ID > 1<<30 {
		return errorString("bad id")
	}
	if i, ok := t.addedByContent[at.Content]; ok && t.added[i].id != at.ID {
		return errorString("content listed twice with different ids")
	}
	normalized := !at.Special // the Hugging Face default
	if at.Normalized != nil {
		normalized = *at.Normalized
	}
	tok := addedToken{
		id: at.ID, content: at.Content, special: at.Special, normalized: normalized,
		lstrip: at.LStrip, rstrip: at.RStrip, singleWord: at.SingleWord,
	}
	if i, ok := t.addedByID[at.ID]; ok {
		delete(t.addedByContent, t.added[i].content)
		t.added[i] = tok
		t.addedByContent[tok.content] = i
		return nil
	}
	t.added = append(t.added, tok)
	t.addedByID[at.ID] = len(t.added) - 1
	t.addedByContent[at.Content] = len(t.added) - 1
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// rebuild recomputes the decode tables and the added-token matchers.
func (t *Tokenizer) rebuild() {
	n := len(t.tokens)
	for _, a := range t.added {
		n = max(n, a.id+1)
	}
	t.kind = make([]tokenKind, n)
	t.special = make([]bool, n)
	t.off = make([]uint32, n+1)
	t.data = t.data[:0]
	for id := range n {
		t.off[id] = uint32(len(t.data))
		if i, ok := t.addedByID[id]; ok {
			t.kind[id] = kindAdded
			t.special[id] = t.added[i].special
			t.data = t.bl.appendToken(t.data, t.added[i].content)
		} else if id < len(t.tokens) && t.present[id] {
			t.kind[id] = kindVocab
			t.data = t.bl.appendToken(t.data, t.tokens[id])
		}
	}
	t.off[n] = uint32(len(t.data))
	t.rawMatch = newTokenMatcher(t.added, false)
	t.normMatch = newTokenMatcher(t.added, true)
}

// tokenMatcher finds added tokens in text, leftmost first and longest at a
// position, as the Aho-Corasick LeftmostLongest matcher in Hugging Face
// tokenizers does.
type tokenMatcher struct {
	first [256]bool
	toks  []addedToken // longest first
}

func newTokenMatcher(added []addedToken, normalized bool) tokenMatcher {
	var m tokenMatcher
	for _, a := range added {
		if a.normalized == normalized {
			m.toks = append(m.toks, a)
			m.first[a.content[0]] = true
		}
	}
	sort.SliceStable(m.toks, func(i, j int) bool { return len(m.toks[i].content) > len(m.toks[j].content) })
	return m
}

// find returns the next added token in s at or after from: its span
// (widened by lstrip/rstrip, never before floor) and index in m.toks, or
// k = -1 if there is none.
func (m *tokenMatcher) find(s string, from, floor int) (start, end, k int) {
	if len(m.toks) == 0 {
		return 0, 0, -1
	}
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		for j := range m.toks {
			tok := &m.toks[j]
			if !strings.HasPrefix(s[i:], tok.content) {
				continue
			}
			start, end = i, i+len(tok.content)
			if tok.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
				// Not a match here; like the Rust matcher, the scan resumes
				// after the rejected span.
				i = end - 1
				break
			}
			if tok.lstrip {
				start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), floor)
			}
			if tok.rstrip {
				end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			}
			return start, end, j
		}
	}
	return 0, 0, -1
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && (unicode.IsLetter(r) || unicode.IsNumber(r))
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && (unicode.IsLetter(r) || unicode.IsNumber(r))
}

// Encode returns the ids of text. Added tokens, special or not, are
// recognised in the raw text first (as Hugging Face does by default); no BOS
// or other template tokens are added. Invalid UTF-8 in text is read as
// U+FFFD, one per maximal invalid subpart.
func (t *Tokenizer) Encode(text string) []int {
	if !utf8.ValidString(text) {
		text = string(appendLossy(nil, []byte(text)))
	}
	sc := t.scratch.Get().(*scratch)
	defer t.scratch.Put(sc)
	ids := make([]int, 0, len(text)/4+8)
	pos := 0
	for pos < len(text) {
		s, e, k := t.rawMatch.find(text, pos, pos)
		if k < 0 {
			ids = t.encodeText(ids, text[pos:], sc)
			break
		}
		if s > pos {
			ids = t.encodeText(ids, text[pos:s], sc)
		}
		ids = append(ids, t.rawMatch.toks[k].id)
		pos = e
	}
	return ids
}

// encodeText normalizes a stretch of text without raw added tokens and
// encodes it.
func (t *Tokenizer) encodeText(ids []int, s string, sc *scratch) []int {
	for _, f := range t.normalize {
		if f.QuickSpanString(s) != len(s) {
			s = f.String(s)
		}
	}
	pos := 0
	for pos < len(s) {
		a, e, k := t.normMatch.find(s, pos, pos)
		if k < 0 {
			return t.encodePlain(ids, s[pos:], sc)
		}
		if a > pos {
			ids = t.encodePlain(ids, s[pos:a], sc)
		}
		ids = append(ids, t.normMatch.toks[k].id)
		pos = e
	}
	return ids
}

// encodePlain pre-tokenizes normalized text and runs BPE on each piece.
func (t *Tokenizer) encodePlain(ids []int, s string, sc *scratch) []int {
	pieces := t.pretokenize(s, sc)
	for _, p := range pieces {
		ids = t.model.encodeWord(ids, p, &sc.bpe)
	}
	return ids
}

// pretokenize applies the pre-tokenizer steps; the result lives in sc.
func (t *Tokenizer) pretokenize(s string, sc *scratch) []string {
	pieces := append(sc.pieces[:0], s)
	next := sc.next[:0]
	for i := range t.pre {
		step := &t.pre[i]
		next = next[:0]
		for _, p := range pieces {
			if step.addPrefixSpace && !strings.HasPrefix(p, " ") {
				p = " " + p
			}
			switch {
			case step.prog != nil:
				sc.spans = sc.m.split(step.prog, p, sc.spans[:0])
			case step.literal != "":
				sc.spans = splitLiteral(p, step.literal, sc.spans[:0])
			default:
				next = append(next, p)
				continue
			}
			for _, sp := range sc.spans {
				if sp.end > sp.start && !(step.remove && sp.match) {
					next = append(next, p[sp.start:sp.end])
				}
			}
		}
		pieces, next = next, pieces
	}
	sc.pieces, sc.next = pieces, next
	return pieces
}

// splitLiteral cuts s at each occurrence of sep.
func splitLiteral(s, sep string, dst []span) []span {
	pos := 0
	for {
		i := strings.Index(s[pos:], sep)
		if i < 0 {
			break
		}
		if i > 0 {
			dst = append(dst, span{pos, pos + i, false})
		}
		dst = append(dst, span{pos + i, pos + i + len(sep), true})
		pos += i + len(sep)
	}
	if pos < len(s) {
		dst = append(dst, span{pos, len(s), false})
	}
	return dst
}

// hasByteLevel reports whether the pre-tokenizer maps text to byte-level
// symbols, which the BPE model here assumes.
func (t *Tokenizer) hasByteLevel() bool {
	for _, s := range t.pre {
		if s.byteLevel {
			return true
		}
	}
	return false
}

// Decode returns the text of ids. Ids that name no token are skipped, as
// are special added tokens when skipSpecial is set (non-special added tokens
// such as Qwen's <think> stay). Invalid UTF-8 becomes U+FFFD, one per
// maximal invalid subpart, as in Rust's String::from_utf8_lossy.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	var raw []byte
	for _, id := range ids {
		raw = t.appendToken(raw, id, skipSpecial)
	}
	return string(appendLossy(make([]byte, 0, len(raw)+8), raw))
}

// appendToken appends the bytes of id unless it is skipped.
func (t *Tokenizer) appendToken(dst []byte, id int, skipSpecial bool) []byte {
	if id < 0 || id >= len(t.kind) || t.kind[id] == kindNone || (skipSpecial && t.special[id]) {
		return dst
	}
	return append(dst, t.data[t.off[id]:t.off[id+1]]...)
}

// TokenBytes returns the raw bytes token id decodes to (an added token gives
// its text), or nil if no token has that id. The result is shared and must
// not be modified.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.kind) || t.kind[id] == kindNone {
		return nil
	}
	a, b := t.off[id], t.off[id+1]
	return t.data[a:b:b]
}

// VocabSize returns the largest id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.kind) }

// TokenID returns the id of a token given as its text: an added token such
// as "<|im_end|>", or a vocabulary entry in its byte-level spelling ("Ġthe").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if i, ok := t.addedByContent[s]; ok {
		return t.added[i].id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// IsSpecial reports whether id is an added token marked special (the ones
// Decode drops when skipping special tokens).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// IsAdded reports whether id is an added token, special or not.
func (t *Tokenizer) IsAdded(id int) bool {
	return id >= 0 && id < len(t.kind) && t.kind[id] == kindAdded
}

// AddedToken describes a token matched whole before BPE.
type AddedToken struct {
	ID      int
	Content string
	Special bool
}

// AddedTokens lists the added tokens in id order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := make([]AddedToken, 0, len(t.added))
	for _, a := range t.added {
		out = append(out, AddedToken{ID: a.id, Content: a.content, Special: a.special})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EOSTokens returns the ids generation stops on: tokenizer_config.json's
// eos_token followed by generation_config.json's eos_token_id list (each id
// once). It is empty if neither file names one.
func (t *Tokenizer) EOSTokens() []int {
	var out []int
	seen := map[int]bool{}
	add := func(id int) {
		if id >= 0 && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	add(t.eos)
	for _, id := range t.genEOS {
		add(id)
	}
	return out
}

// PadToken returns tokenizer_config.json's pad_token id.
func (t *Tokenizer) PadToken() (int, bool) { return t.pad, t.pad >= 0 }

// BOSToken returns tokenizer_config.json's bos_token id.
func (t *Tokenizer) BOSToken() (int, bool) { return t.bos, t.bos >= 0 }

// ChatTemplate returns the checkpoint's chat template: chat_template.jinja
// if the directory has one, else tokenizer_config.json's chat_template, else
// "".
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }
