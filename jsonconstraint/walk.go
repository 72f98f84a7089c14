package jsonconstraint

import (
	"math/bits"

	"github.com/govinfer/govinfer/grammar/regex"
)

// Trie is a set of a vocabulary's tokens arranged for Walk.
type Trie struct{ t *tokTrie }

// All returns every ordinary token of the vocabulary (not the
// end-of-sequence ids, nor tokens without bytes).
func (v *Vocab) All() Trie { return Trie{&v.all} }

// Subset returns the ordinary tokens whose bytes keep accepts.
func (v *Vocab) Subset(keep func(tok []byte) bool) Trie {
	var ids []int32
	for _, id := range v.all.ids {
		if keep(v.tokens[id]) {
			ids = append(ids, id)
		}
	}
	t := buildTrie(v.tokens, ids)
	return Trie{&t}
}

// Tokens returns the number of tokens in the trie.
func (tr Trie) Tokens() int { return len(tr.t.ids) }

// Walk sets in m (a bit set over token ids, as Constraint.AllowedBits
// gives) every token of tr whose bytes a byte automaton accepts from
// start: step advances a state by one byte and reports whether the byte
// may come. Tokens sharing a prefix share its steps, and a refused byte
// prunes every token below it. S is the automaton's state, copied at each
// byte, so it must be a value that copying snapshots.
func Walk[S any](tr Trie, start S, step func(s *S, b byte) bool, m []uint64) {
	t := tr.t
	walk := make([]S, t.maxDepth+1)
	walk[0] = start
	for i := 0; i < len(t.nodeByte); {
		d := t.nodeDepth[i]
		walk[d] = walk[d-1]
		if !step(&walk[d], t.nodeByte[i]) {
			i = int(t.nodeSkip[i])
			continue
		}
		for _, id := range t.ids[t.idLo[i]:t.idHi[i]] {
			m[id>>6] |= 1 << (id & 63)
		}
		i++
	}
}

// Words returns the length of a bit set over the vocabulary's ids.
func (v *Vocab) Words() int { return (v.size + 63) / 64 }

// TokenBytes returns the raw bytes of token id (nil for special tokens,
// which Walk never allows, and the end-of-sequence ids).
func (v *Vocab) TokenBytes(id int) []byte {
	if id < 0 || id >= v.size || v.isEOS[id] {
		return nil
	}
	return v.tokens[id]
}

// IsEOS reports whether id is one of the vocabulary's end-of-sequence ids.
func (v *Vocab) IsEOS(id int) bool { return id >= 0 && id < v.size && v.isEOS[id] }

// SetEOS adds the end-of-sequence ids to a bit set.
func (v *Vocab) SetEOS(m []uint64) {
	for _, id := range v.eos {
		m[id>>6] |= 1 << (id & 63)
	}
}

// MaskLogits sets the logits of the tokens not in the bit set m to -Inf,
// as Constraint.ApplyMask does, and returns how many remain.
func (v *Vocab) MaskLogits(m []uint64, logits []float32) int {
	return maskLogits(m, logits, v.size)
}

// negInfs is a block of -Inf that maskLogits copies over runs of
// disallowed tokens: a copy moves them with vector stores, several times
// faster than one store a logit when a mask allows a few hundred tokens
// of 150,000.
var negInfs = func() []float32 {
	b := make([]float32, 4096)
	for i := range b {
		b[i] = negInf
	}
	return b
}()

// fillNegInf sets every element of l to -Inf.
func fillNegInf(l []float32) {
	for len(l) > 0 {
		n := copy(l, negInfs)
		l = l[n:]
	}
}

// maskLogits applies a bit set to a row of logits.
func maskLogits(mask []uint64, logits []float32, size int) int {
	allowed := 0
	run := -1 // start of the current run of words with nothing allowed
	for w, word := range mask {
		allowed += bits.OnesCount64(word)
		base := w * 64
		if base >= len(logits) {
			continue
		}
		if word == 0 {
			if run < 0 {
				run = base
			}
			continue
		}
		if run >= 0 {
			fillNegInf(logits[run:base])
			run = -1
		}
		if ones := bits.OnesCount64(word); ones <= 16 && base+64 <= len(logits) {
			// Few allowed: keep them, fill the word's 64 with one copy,
			// put them back.
			var keep [16]float32
			k := 0
			for z := word; z != 0; z &= z - 1 {
				keep[k] = logits[base+bits.TrailingZeros64(z)]
				k++
			}
			copy(logits[base:base+64], negInfs)
			k = 0
			for z := word; z != 0; z &= z - 1 {
				logits[base+bits.TrailingZeros64(z)] = keep[k]
				k++
			}
			continue
		}
		for z := ^word; z != 0; z &= z - 1 {
			i := base + bits.TrailingZeros64(z)
			if i >= len(logits) {
				break
			}
			logits[i] = negInf
		}
	}
	if run >= 0 {
		fillNegInf(logits[run:min(len(logits), len(mask)*64)])
	}
	if size < len(logits) {
		fillNegInf(logits[size:])
	}
	return allowed
}

// Property is one declared property of an object schema.
type Property struct {
	Name     string
	Required bool
	// Grammar is the schema of the property's value.
	Grammar *Grammar
}

// Object reports whether the grammar's top level allows objects.
func (g *Grammar) Object() bool { return g.root.kinds&kObject != 0 }

// Properties returns the declared properties of the grammar's top-level
// object schema, in the schema's order of compilation (names sorted).
func (g *Grammar) Properties() []Property {
	n := g.root
	out := make([]Property, len(n.props))
	for i, p := range n.props {
		out[i] = Property{Name: p.name, Required: n.required&(1<<i) != 0, Grammar: &Grammar{root: p.n, byteGrowth: byteGrowth(p.n)}}
	}
	return out
}

// Minimal returns the shortest value the grammar allows.
func (g *Grammar) Minimal() []byte { return g.root.minimal }

// Growth bounds how many bytes one byte of output can add to a
// completion (see Constraint.Budget).
func (g *Grammar) Growth() int { return g.growth() }

// Exits is a set of subtrees of a vocabulary's trie, with the nodes on
// the paths to them, for WalkExits: the tokens that leave an automaton
// part-way, to be walked again from what follows it.
type Exits struct {
	t      *tokTrie
	lo, hi []int32 // ranges of trie nodes in pre-order
}

// Empty reports whether e holds no token (every subtree of a trie holds
// one).
func (e Exits) Empty() bool { return len(e.lo) == 0 }

// SplitDFA sorts the tokens of tr by how a byte DFA reads them from
// state start: those it reads whole go into stay; those it leaves
// part-way after passing an accepting state (so that what follows the
// DFA's language may read the rest) are returned as Exits, a subtree of
// the trie at each point of leaving, without walking below it. Bytes in
// refuse (a bit set as regex.DFA.Loops gives; nil for none) are refused
// as if the DFA did not read them, and are no exit. The cost is that of
// the walk up to the exits, less the subtrees whose bytes all lead the
// DFA's state back to itself, which are taken whole.
func SplitDFA(tr Trie, d *regex.DFA, start int32, refuse *[4]uint64, stay []uint64) Exits {
	var none [4]uint64
	if refuse == nil {
		refuse = &none
	}
	t := tr.t
	out := Exits{t: t}
	st := make([]int32, t.maxDepth+1)   // the DFA's state at each depth
	saw := make([]bool, t.maxDepth+1)   // an accepting state was passed
	path := make([]int32, t.maxDepth+1) // the nodes of the path, by depth
	emitted := make([]bool, t.maxDepth+1)
	st[0] = start
	add := func(lo, hi int32) {
		if n := len(out.hi); n > 0 && out.hi[n-1] == lo {
			out.hi[n-1] = hi
			return
		}
		out.lo, out.hi = append(out.lo, lo), append(out.hi, hi)
	}
	// The walk sorts every token into read (stay) or not, as ranges of
	// ids; the shorter side is then set, or cleared from all the tokens
	// (a state that reads most of the vocabulary leaves out few).
	var read, left idRanges
	for i := int32(0); i < int32(len(t.nodeByte)); {
		dep := t.nodeDepth[i]
		b := t.nodeByte[i]
		if refuse[b>>6]&(1<<(b&63)) != 0 {
			left.add(t.idLo[i], t.idLo[t.nodeSkip[i]])
			i = t.nodeSkip[i]
			continue
		}
		if next := d.Step(st[dep-1], b); next >= 0 {
			lp := d.Loops(next)
			loops := [4]uint64{lp[0] &^ refuse[0], lp[1] &^ refuse[1], lp[2] &^ refuse[2], lp[3] &^ refuse[3]}
			if t.readWhole(i, &loops, d.CharLoop(next) && refuse[2]|refuse[3] == 0) {
				read.add(t.idLo[i], t.idLo[t.nodeSkip[i]])
				i = t.nodeSkip[i]
				continue
			}
			st[dep], saw[dep] = next, saw[dep-1] || d.Accept(next)
			path[dep], emitted[dep] = i, false
			read.add(t.idLo[i], t.idHi[i])
			i++
			continue
		}
		if saw[dep-1] {
			// The token leaves the DFA here, or at an accepting state
			// before (a token leaving before its first byte is no exit:
			// the caller reads it from what follows the DFA).
			for k := uint16(1); k < dep; k++ {
				if !emitted[k] {
					add(path[k], path[k]+1)
					emitted[k] = true
				}
			}
			add(i, t.nodeSkip[i])
		}
		left.add(t.idLo[i], t.idLo[t.nodeSkip[i]])
		i = t.nodeSkip[i]
	}
	if read.n <= left.n {
		read.set(t.ids, stay)
		return out
	}
	not := make([]uint64, len(stay))
	left.set(t.ids, not)
	for w, x := range t.idBits[:min(len(stay), len(t.idBits))] {
		stay[w] |= x &^ not[w]
	}
	return out
}

// idRanges are ranges of a trie's ids array, adjacent ones merged, and
// how many ids they hold.
type idRanges struct {
	lo, hi []int32
	n      int
}

func (r *idRanges) add(lo, hi int32) {
	if lo == hi {
		return
	}
	r.n += int(hi - lo)
	if k := len(r.hi); k > 0 && r.hi[k-1] == lo {
		r.hi[k-1] = hi
		return
	}
	r.lo, r.hi = append(r.lo, lo), append(r.hi, hi)
}

// set sets the bits of the ids in r.
func (r *idRanges) set(ids []int32, m []uint64) {
	for k, lo := range r.lo {
		for _, id := range ids[lo:r.hi[k]] {
			m[id>>6] |= 1 << (id & 63)
		}
	}
}

// WalkExits is Walk over the tokens of e's subtrees: it sets in m every
// one whose bytes the automaton accepts from start. (Tokens on the paths
// to the subtrees that it accepts are set too.) loops, when not nil,
// tells the walk which bytes lead a state back to itself, and whether
// every non-ASCII character does (as regex.DFA's Loops and CharLoop; nil
// when unknown): a large subtree that cannot change the state is then
// taken whole.
func WalkExits[S any](e Exits, start S, step func(s *S, b byte) bool, loops func(s *S) (bytes *[4]uint64, chars bool), m []uint64) {
	if len(e.lo) == 0 {
		return
	}
	t := e.t
	walk := make([]S, t.maxDepth+1)
	walk[0] = start
	k, i := 0, e.lo[0]
	for {
		if i >= e.hi[k] {
			if k++; k == len(e.lo) {
				return
			}
			i = max(i, e.lo[k])
			continue
		}
		d := t.nodeDepth[i]
		walk[d] = walk[d-1]
		if !step(&walk[d], t.nodeByte[i]) {
			i = t.nodeSkip[i]
			continue
		}
		if loops != nil && t.nodeSkip[i]-i >= minWholeSubtree && t.nodeSkip[i] <= e.hi[k] {
			// (A node on the path to an exit is not taken whole: its
			// subtree is not all in e.)
			if lp, chars := loops(&walk[d]); lp != nil && t.readWhole(i, lp, chars) {
				for _, id := range t.subtreeIDs(i) {
					m[id>>6] |= 1 << (id & 63)
				}
				i = t.nodeSkip[i]
				continue
			}
		}
		for _, id := range t.ids[t.idLo[i]:t.idHi[i]] {
			m[id>>6] |= 1 << (id & 63)
		}
		i++
	}
}

// minWholeSubtree is the fewest nodes of a subtree for which WalkExits
// asks whether it may take it whole (which may cost the automaton a few
// hundred steps the first time for a state).
const minWholeSubtree = 16

// readWhole reports whether a state whose looping bytes are loops (and
// whose characters all loop, if chars) reads every token of node i's
// subtree from node i on, and ends each back where it was: every byte
// below loops, or every ASCII byte below does and the rest are whole
// characters (but maybe the last).
func (t *tokTrie) readWhole(i int32, loops *[4]uint64, chars bool) bool {
	below := &t.belowSets[t.below[i]]
	return below[0]&^loops[0]|below[1]&^loops[1] == 0 &&
		(below[2]&^loops[2]|below[3]&^loops[3] == 0 || chars && t.validBelow[i])
}
