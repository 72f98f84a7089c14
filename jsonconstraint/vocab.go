package jsonconstraint

import (
	"bytes"
	"fmt"
	"math/bits"
	"slices"
)

// Vocab is a model's vocabulary as raw token bytes, arranged as a trie so
// that a mask walks shared prefixes once. Build it once per model; it is
// immutable and safe for concurrent use.
type Vocab struct {
	size   int
	tokens [][]byte
	eos    []int32
	isEOS  []bool

	all tokTrie // every ordinary token

	// Inside a string, a token without a '"' cannot leave the string, and
	// whether it may follow depends only on the string's own lexer, not on
	// the document around it. So for the common in-string states the
	// mask is a precomputed set plus a walk of the few tokens holding a
	// quote.
	quoted tokTrie // the tokens that contain '"'
	// escaped are the tokens that contain '"' or '\\': in a string with
	// a pattern, the others are read by the pattern's DFA alone (see
	// strRule.stay).
	escaped tokTrie
	strStay []uint64 // tokens without '"' valid from inside a string value
	keyStay []uint64 // the same inside a free (non-property) object key
	// ruleStay are the tokens of strStay valid in a string with length
	// rules (no \u escapes), and ruleChars the characters each starts.
	ruleStay  []uint64
	ruleChars []uint16
	// ruleUpTo[k] are the tokens of ruleStay of at most k characters (k
	// below ruleUpToLen), and maxRuleChars the most characters a token of
	// ruleStay starts: a string with that many characters left needs no
	// filtering.
	ruleUpTo     [][]uint64
	maxRuleChars int

	// For budgets (see Constraint.Budget): structs counts the bytes of
	// each token that can open a container, a member, a key or a value
	// ({ [ , : "), saturating at 255, and maxStructs is the largest
	// count; flat are the tokens of strStay without a backslash that end
	// on a character boundary, which never lengthen a completion from
	// inside a string.
	structs    []uint8
	maxStructs int
	flat       []uint64
}

// tokTrie is a token trie, one entry per node in depth-first pre-order
// (the root is implicit): the node's byte, its depth (1 for a first byte),
// the index just past its subtree, and the range of ids (in ids) of the
// tokens that end at it. The ids are in pre-order too, so the tokens of a
// subtree are ids[idLo[i]:idLo[nodeSkip[i]]] (idLo has an entry past the
// last node).
type tokTrie struct {
	nodeByte  []byte
	nodeDepth []uint16
	nodeSkip  []int32
	idLo      []int32
	idHi      []int32
	ids       []int32
	maxDepth  int
	// below[i] indexes belowSets: the bytes of the nodes under node i
	// (not its own), a bit set as regex.DFA.Loops gives, so that a walk
	// can take a subtree whole where none of its bytes changes a state.
	below     []uint32
	belowSets [][4]uint64
	// validBelow[i]: the bytes under node i are valid UTF-8 from a
	// character boundary (the last character may be cut), so that a
	// state every character leads back to itself reads them all.
	validBelow []bool
	// idBits are the trie's ids as a bit set.
	idBits []uint64
}

// subtreeIDs returns the tokens of node i's subtree, its own included.
func (t *tokTrie) subtreeIDs(i int32) []int32 { return t.ids[t.idLo[i]:t.idLo[t.nodeSkip[i]]] }

// maxTokenBytes bounds the length of a token; longer ones are never
// allowed.
const maxTokenBytes = 1 << 12

// NewVocab builds a vocabulary from each token id's raw bytes. Tokens with
// no bytes (special tokens) are never allowed, except the ids in eos, which
// are allowed exactly when the document is complete.
func NewVocab(tokens [][]byte, eos []int) (*Vocab, error) {
	v := &Vocab{size: len(tokens), tokens: tokens, isEOS: make([]bool, len(tokens))}
	for _, id := range eos {
		if id < 0 || id >= len(tokens) {
			return nil, fmt.Errorf("jsonconstraint: end-of-sequence id %d outside the vocabulary of %d tokens", id, len(tokens))
		}
		if !v.isEOS[id] {
			v.isEOS[id] = true
			v.eos = append(v.eos, int32(id))
		}
	}
	words := (len(tokens) + 63) / 64
	v.strStay = make([]uint64, words)
	v.keyStay = make([]uint64, words)
	v.ruleStay = make([]uint64, words)
	v.ruleChars = make([]uint16, len(tokens))
	v.structs = make([]uint8, len(tokens))
	v.flat = make([]uint64, words)
	freeKeys := &node{extra: &node{}}
	counted := &node{kinds: kString, str: &strRule{maxLen: -1}}
	var all, quoted, escaped []int32
	for id, t := range tokens {
		if len(t) == 0 || len(t) > maxTokenBytes || v.isEOS[id] {
			continue
		}
		all = append(all, int32(id))
		if bytes.IndexByte(t, '"') >= 0 || bytes.IndexByte(t, '\\') >= 0 {
			escaped = append(escaped, int32(id))
		}
		n := 0
		for _, b := range t {
			switch b {
			case '{', '[', ',', ':', '"':
				n++
			}
		}
		v.structs[id] = uint8(min(n, 255))
		v.maxStructs = max(v.maxStructs, int(v.structs[id]))
		if bytes.IndexByte(t, '"') >= 0 {
			quoted = append(quoted, int32(id))
			continue
		}
		str := state{lx: lex{mode: lexString}}
		key := state{top: frame{n: freeKeys}, lx: lex{mode: lexKey, t: -1}}
		rule := state{top: frame{n: counted}, lx: lex{mode: lexString, rule: true}}
		strOK, keyOK, ruleOK := true, true, true
		for _, b := range t {
			strOK = strOK && str.step(b, nil)
			keyOK = keyOK && key.step(b, nil)
			ruleOK = ruleOK && rule.step(b, nil)
		}
		if ruleOK {
			v.ruleStay[id>>6] |= 1 << (id & 63)
			v.ruleChars[id] = uint16(rule.lx.cnt)
		}
		if strOK {
			v.strStay[id>>6] |= 1 << (id & 63)
			if str.lx.sub == strBody && bytes.IndexByte(t, '\\') < 0 {
				v.flat[id>>6] |= 1 << (id & 63)
			}
		}
		if keyOK {
			v.keyStay[id>>6] |= 1 << (id & 63)
		}
	}
	v.ruleUpTo = make([][]uint64, ruleUpToLen)
	for k := range v.ruleUpTo {
		v.ruleUpTo[k] = make([]uint64, words)
	}
	for w, word := range v.ruleStay {
		for z := word; z != 0; z &= z - 1 {
			id := w*64 + bits.TrailingZeros64(z)
			n := int(v.ruleChars[id])
			v.maxRuleChars = max(v.maxRuleChars, n)
			for k := n; k < ruleUpToLen; k++ {
				v.ruleUpTo[k][w] |= 1 << (id & 63)
			}
		}
	}
	v.all = buildTrie(tokens, all)
	v.quoted = buildTrie(tokens, quoted)
	v.escaped = buildTrie(tokens, escaped)
	return v, nil
}

// ruleUpToLen bounds the character counts ruleUpTo is kept for.
const ruleUpToLen = 64

// compareTokens orders token ids by their bytes, then by id.
func compareTokens(tokens [][]byte, a, b int32) int {
	if c := bytes.Compare(tokens[a], tokens[b]); c != 0 {
		return c
	}
	return int(a - b)
}

// buildTrie builds the trie of the given token ids.
func buildTrie(tokens [][]byte, ids []int32) tokTrie {
	var tr tokTrie
	if !slices.IsSortedFunc(ids, func(a, b int32) int { return compareTokens(tokens, a, b) }) {
		slices.SortFunc(ids, func(a, b int32) int { return compareTokens(tokens, a, b) })
	}
	tr.ids = ids
	var open []int32 // nodes on the current path, by depth-1
	var prev []byte
	for i, id := range ids {
		t := tokens[id]
		lcp := 0
		for lcp < len(prev) && lcp < len(t) && prev[lcp] == t[lcp] {
			lcp++
		}
		if i > 0 && lcp == len(t) && len(t) == len(prev) {
			tr.idHi[open[len(t)-1]]++ // same bytes as the previous token
			continue
		}
		// Close the nodes deeper than the common prefix.
		for len(open) > lcp {
			tr.nodeSkip[open[len(open)-1]] = int32(len(tr.nodeByte))
			open = open[:len(open)-1]
		}
		for d := lcp; d < len(t); d++ {
			open = append(open, int32(len(tr.nodeByte)))
			tr.nodeByte = append(tr.nodeByte, t[d])
			tr.nodeDepth = append(tr.nodeDepth, uint16(d+1))
			tr.nodeSkip = append(tr.nodeSkip, 0)
			tr.idLo = append(tr.idLo, 0)
			tr.idHi = append(tr.idHi, 0)
		}
		last := open[len(t)-1]
		tr.idLo[last], tr.idHi[last] = int32(i), int32(i+1)
		tr.maxDepth = max(tr.maxDepth, len(t))
		prev = t
	}
	for _, n := range open {
		tr.nodeSkip[n] = int32(len(tr.nodeByte))
	}
	// Nodes without tokens get an empty range where their subtree's
	// tokens start.
	tr.idLo = append(tr.idLo, int32(len(ids)))
	for i := len(tr.nodeByte) - 1; i >= 0; i-- {
		if tr.idHi[i] == tr.idLo[i] {
			tr.idLo[i], tr.idHi[i] = tr.idLo[i+1], tr.idLo[i+1]
		}
	}
	tr.subtreeBytes()
	for _, id := range ids {
		for int(id>>6) >= len(tr.idBits) {
			tr.idBits = append(tr.idBits, 0)
		}
		tr.idBits[id>>6] |= 1 << (id & 63)
	}
	return tr
}

// utf8Next is the UTF-8 decoder's state after byte b from state st (-1:
// invalid). States: 0 a character boundary; 1 one continuation byte
// left; 2, 3, 4 two left, the next in A0-BF, 80-9F, 80-BF; 5, 6, 7
// three left, the next in 90-BF, 80-BF, 80-8F.
func utf8Next(st int, b byte) int {
	in := func(lo, hi byte) bool { return b >= lo && b <= hi }
	switch st {
	case 0:
		switch {
		case b < 0x80:
			return 0
		case in(0xC2, 0xDF):
			return 1
		case b == 0xE0:
			return 2
		case b == 0xED:
			return 3
		case in(0xE1, 0xEF):
			return 4
		case b == 0xF0:
			return 5
		case in(0xF1, 0xF3):
			return 6
		case b == 0xF4:
			return 7
		}
	case 1:
		if in(0x80, 0xBF) {
			return 0
		}
	case 2, 3, 4:
		if st == 2 && in(0xA0, 0xBF) || st == 3 && in(0x80, 0x9F) || st == 4 && in(0x80, 0xBF) {
			return 1
		}
	case 5, 6, 7:
		if st == 5 && in(0x90, 0xBF) || st == 6 && in(0x80, 0xBF) || st == 7 && in(0x80, 0x8F) {
			return 4
		}
	}
	return -1
}

// subtreeBytes fills below, belowSets and validBelow, in one pass in
// reverse pre-order: the children of a node come just before it,
// gathered in the accumulators of their depth (for validBelow, the
// decoder states from which every child's subtree decodes).
func (tr *tokTrie) subtreeBytes() {
	n := len(tr.nodeByte)
	tr.below = make([]uint32, n)
	tr.validBelow = make([]bool, n)
	tr.belowSets = [][4]uint64{{}}
	ids := map[[4]uint64]uint32{{}: 0}
	acc := make([][4]uint64, tr.maxDepth+2)
	valid := make([]uint8, tr.maxDepth+2)
	for i := range valid {
		valid[i] = 0xFF
	}
	for i := n - 1; i >= 0; i-- {
		d := tr.nodeDepth[i]
		set := acc[d+1]
		acc[d+1] = [4]uint64{}
		children := valid[d+1]
		valid[d+1] = 0xFF
		tr.validBelow[i] = children&1 != 0
		var from uint8
		for st := range 8 {
			if next := utf8Next(st, tr.nodeByte[i]); next >= 0 && children&(1<<next) != 0 {
				from |= 1 << st
			}
		}
		valid[d] &= from
		id, ok := ids[set]
		if !ok {
			id = uint32(len(tr.belowSets))
			ids[set] = id
			tr.belowSets = append(tr.belowSets, set)
		}
		tr.below[i] = id
		b := tr.nodeByte[i]
		set[b>>6] |= 1 << (b & 63)
		for k := range set {
			acc[d][k] |= set[k]
		}
	}
}

// Size returns the number of token ids.
func (v *Vocab) Size() int { return v.size }

// TrieNodes returns the number of nodes of the vocabulary's trie.
func (v *Vocab) TrieNodes() int { return len(v.all.nodeByte) }
