package jsonconstraint

import (
	"bytes"
	"fmt"
	"math/bits"
	"strings"
)

// setMinimal gives every node its shortest value (node.minimal), by
// relaxation: a node's value is the shortest of its kinds' smallest forms,
// which for objects and arrays are built from their members' and items'
// values, so recursive schemas settle once their base cases do. A node
// with no finite value, or none within MaxMinimalLength bytes, is an error.
func setMinimal(nodes []*node) error {
	for _, n := range nodes {
		n.minimal = nil
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if v, ok := n.smallest(); ok && (n.minimal == nil || len(v) < len(n.minimal)) {
				n.minimal = v
				changed = true
			}
		}
	}
	for _, n := range nodes {
		if n.minimal == nil {
			return fmt.Errorf("jsonconstraint: the schema has a part whose every value is infinite or longer than %d bytes", MaxMinimalLength)
		}
	}
	return nil
}

// smallest returns the shortest value of n from its children's current
// minimal values.
func (n *node) smallest() ([]byte, bool) {
	var best []byte
	found := false
	consider := func(v []byte) {
		if len(v) <= MaxMinimalLength && (!found || len(v) < len(best)) {
			best, found = v, true
		}
	}
	for _, l := range n.literals {
		consider(l)
	}
	if n.kinds&kString != 0 {
		k := 0
		if n.str != nil {
			k = int(n.str.minLen)
		}
		switch {
		case n.str != nil && n.str.pat != nil:
			consider(append(appendEscaped([]byte{'"'}, n.str.pat.Shortest(0)), '"'))
		case k <= MaxMinimalLength:
			consider([]byte(`"` + strings.Repeat("a", k) + `"`))
		}
	}
	if n.kinds&(kNumber|kInteger) != 0 {
		if n.num == nil {
			consider([]byte("0"))
		} else if s, ok := n.num.complete(numPrefix{sub: numStart}, n.kinds&kNumber == 0); ok {
			consider([]byte(s))
		}
	}
	if n.kinds&kObject != 0 {
		if v, ok := n.smallestObject(); ok {
			consider(v)
		}
	}
	if n.kinds&kArray != 0 {
		k := 0
		if n.arr != nil {
			k = int(n.arr.minItems)
		}
		if k == 0 {
			consider([]byte("[]"))
		} else if it := n.items.minimal; it != nil && k*(len(it)+1)+1 <= MaxMinimalLength {
			var b bytes.Buffer
			b.WriteByte('[')
			for i := range k {
				if i > 0 {
					b.WriteByte(',')
				}
				b.Write(it)
			}
			b.WriteByte(']')
			consider(b.Bytes())
		}
	}
	return best, found
}

func (n *node) smallestObject() ([]byte, bool) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for i, p := range n.props {
		if n.required&(1<<i) == 0 {
			continue
		}
		if p.n.minimal == nil {
			return nil, false
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(`"` + p.name + `":`)
		b.Write(p.n.minimal)
		if b.Len() > MaxMinimalLength {
			return nil, false
		}
	}
	b.WriteByte('}')
	return b.Bytes(), true
}

// Completion returns bytes that complete the document from the acceptor's
// position: the value being read finished, then each open container given
// the shortest members or items its schema requires, and closed. It is
// empty once the document is complete.
func (a *Acceptor) Completion() []byte {
	out, _ := a.s.completion()
	return out
}

// completion is Acceptor.Completion; ok is false if the automaton finds
// no way to finish (which a compiled schema never allows).
func (s state) completion() ([]byte, bool) {
	var out []byte
	emit := func(p []byte) bool {
		for _, b := range p {
			if !s.step(b, nil) {
				return false
			}
		}
		out = append(out, p...)
		return true
	}
	var pending []byte
	switch s.lx.mode {
	case lexString, lexKey:
		pending = s.stringCompletion()
	case lexNumber:
		pending = s.numberCompletion()
	case lexLiteral:
		pending = s.target().lits.completion(s.lx.t)
	}
	if !emit(pending) {
		return out, false
	}
	for guard := 0; !s.complete(); guard++ {
		next := s.structureCompletion()
		if guard > 1<<16 || next == nil || !emit(next) {
			return out, false
		}
	}
	return out, true
}

// stringCompletion finishes the string or key being read.
func (s *state) stringCompletion() []byte {
	l := s.lx
	if l.mode == lexKey && s.top.n.keyM != nil {
		// The key automaton and the names' trie know where a key may
		// end, mid-character too.
		out, _ := s.patternKeyCompletion()
		return out
	}
	var out []byte
	if l.mode == lexString && l.rule {
		if pat := s.target().str.pat; pat != nil {
			st := l.dfa
			if l.sub == strEscape {
				e := escapeTo(pat, st)
				out = append(out, e)
				st = pat.Step(st, unescape[e])
			}
			return append(appendEscaped(out, pat.Shortest(st)), '"')
		}
	}
	switch l.sub {
	case strEscape:
		out = append(out, 'n')
	case strHex:
		for range l.n {
			out = append(out, '0')
		}
	case strUTF8:
		out = append(out, l.lo)
		for range int(l.n) - 1 {
			out = append(out, 0x80)
		}
	}
	if l.mode == lexKey {
		return append(out, s.keyCompletion()...)
	}
	if l.rule {
		if r := s.target().str; r != nil && l.cnt < uint32(r.minLen) {
			out = append(out, strings.Repeat("a", int(r.minLen)-int(l.cnt))...)
		}
	}
	return append(out, '"')
}

// keyCompletion finishes a key being read (at a character boundary) so
// that the object accepts it.
func (s *state) keyCompletion() []byte {
	n := s.top.n
	t := s.lx.t
	if t < 0 {
		return []byte{'"'} // a free key
	}
	usable := func(p int32) bool { return p >= 0 && s.top.used&(1<<p) == 0 }
	if n.extra != nil {
		if p := n.keys.nodes[t].prop; p < 0 || usable(p) {
			return []byte{'"'}
		}
		// The name of a property already present: leave the trie.
		for b := byte('a'); b <= 'z'; b++ {
			if n.keys.child(t, b) < 0 {
				return []byte{b, '"'}
			}
		}
	}
	// Breadth-first to the nearest name of a property not yet present.
	type item struct {
		node, prev int32
		b          byte
	}
	queue := []item{{node: t, prev: -1}}
	for i := 0; i < len(queue); i++ {
		if usable(n.keys.nodes[queue[i].node].prop) {
			var out []byte
			for j := i; queue[j].prev >= 0; j = int(queue[j].prev) {
				out = append(out, queue[j].b)
			}
			for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
			return append(out, '"')
		}
		for _, e := range n.keys.nodes[queue[i].node].edges {
			if n.keys.nodes[e.next].below&^s.top.used != 0 {
				queue = append(queue, item{node: e.next, prev: int32(i), b: e.b})
			}
		}
	}
	return nil
}

// numberCompletion finishes the number being read.
func (s *state) numberCompletion() []byte {
	l := s.lx
	if !l.rule {
		switch l.sub {
		case numMinus, numDot, numE, numESign:
			return []byte{'0'}
		}
		return nil
	}
	p := numPrefix{sub: l.sub, neg: l.neg, mant: l.mant, idig: int(l.idig), fdig: int(l.fdig)}
	out, _ := s.target().num.complete(p, l.intOnly)
	return []byte(out)
}

// completion returns the shortest bytes from literal trie node t to the
// end of a value.
func (t *litTrie) completion(from int32) []byte {
	type item struct {
		node, prev int32
		b          byte
	}
	queue := []item{{node: from, prev: -1}}
	for i := 0; i < len(queue); i++ {
		if t.nodes[queue[i].node].terminal {
			var out []byte
			for j := i; queue[j].prev >= 0; j = int(queue[j].prev) {
				out = append(out, queue[j].b)
			}
			for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
			return out
		}
		for _, e := range t.nodes[queue[i].node].edges {
			queue = append(queue, item{node: e.next, prev: int32(i), b: e.b})
		}
	}
	return nil
}

// structureCompletion returns the next bytes of a completion outside any
// string or key: a whole value where one must come, a required key, a
// separator or a closing bracket.
func (s *state) structureCompletion() []byte {
	v := *s
	if v.lx.mode == lexNumber || v.lx.mode == lexLiteral {
		// A finished scalar: what follows it is decided after it.
		v.lx = lex{}
		v.valueDone()
	}
	n := v.top.n
	switch v.top.pos {
	case posRootValue, posObjValue, posArrValue:
		return v.target().minimal
	case posObjColon:
		return []byte{':'}
	case posObjStart, posObjAfter, posObjKey:
		comma := ""
		if v.top.pos == posObjAfter {
			comma = ","
		}
		if missing := n.required &^ v.top.used; missing != 0 {
			return []byte(comma + `"` + n.props[bits.TrailingZeros64(missing)].name + `"`)
		}
		if v.top.pos != posObjKey {
			return []byte{'}'}
		}
		// After a comma a member must follow: the cheapest one.
		best := -1
		for i, p := range n.props {
			if v.top.used&(1<<i) == 0 && (best < 0 || len(p.name)+len(p.n.minimal) < len(n.props[best].name)+len(n.props[best].n.minimal)) {
				best = i
			}
		}
		if best >= 0 {
			return []byte(`"` + n.props[best].name + `"`)
		}
		if n.keyM != nil {
			k := v
			k.startKey()
			if out, ok := k.patternKeyCompletion(); ok {
				return append([]byte{'"'}, out...)
			}
		}
		return []byte(`""`)
	case posArrStart:
		if n.arr != nil && n.arr.minItems > 0 {
			return n.items.minimal
		}
		return []byte{']'}
	case posArrAfter:
		if n.arr != nil && v.top.count < uint32(n.arr.minItems) {
			return []byte{','}
		}
		return []byte{']'}
	}
	return nil
}

// completionLen is len(completion()), for budgets.
func (s state) completionLen() int {
	out, _ := s.completion()
	return len(out)
}

// growth bounds how much one byte can lengthen a completion (see
// byteGrowth).
func (g *Grammar) growth() int { return g.byteGrowth }

// maxNumberCompletion bounds the completion of a number: a sign, 18
// integer digits, a point, 18 fraction digits, and an exponent of two
// digits with its sign.
const maxNumberCompletion = 1 + 18 + 1 + 18 + 1 + 1 + 2

// pendingCompletion bounds what an unfinished escape or UTF-8 sequence
// adds to a completion (the four hex digits of \u).
const pendingCompletion = 4

// byteGrowth bounds how many bytes one byte of output can add to the
// completion of any state of the grammar rooted at root. A byte can start
// a value, which then completes to the smallest form of the kind it
// chose (an object's required members, an array's required items, a
// string's required characters, a bounded number's digits, the rest of
// a literal), which may be longer than the node's smallest value of any
// kind; begin a member or item after a comma, or a key, which needs the
// key, its colon and the value's smallest form; or leave an escape or a
// UTF-8 sequence open.
func byteGrowth(root *node) int {
	seen := map[*node]bool{root: true}
	todo := []*node{root}
	most := pendingCompletion
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		most = max(most, len(n.minimal))
		for _, l := range n.literals {
			most = max(most, len(l))
		}
		if n.kinds&kString != 0 {
			k := 0
			if n.str != nil {
				k = int(n.str.minLen)
				if n.str.pat != nil {
					k = 2 * n.str.pat.MaxShortest() // escapes double a byte
				}
			}
			most = max(most, k+2+pendingCompletion)
		}
		if n.kinds&(kNumber|kInteger) != 0 && n.num != nil {
			most = max(most, maxNumberCompletion)
		}
		if n.kinds&kObject != 0 {
			if v, ok := n.smallestObject(); ok {
				most = max(most, len(v))
			}
			for _, p := range n.props {
				most = max(most, len(`,"":`)+len(p.name)+len(p.n.minimal)+1)
			}
			if n.extra != nil {
				// A free key: its quotes, colon and value, or one letter
				// more to step off the name of a property already used.
				most = max(most, len(`,"":`)+1+len(n.extra.minimal)+1)
			}
			if n.keyM != nil {
				// A pattern key: the longest completion of the key
				// automaton from any state, with its colon and value.
				k := n.keyM.maxCompletion()
				for _, p := range n.pats {
					most = max(most, len(`,"":`)+k+len(p.n.minimal)+1)
				}
				if n.extra != nil {
					most = max(most, len(`,"":`)+k+len(n.extra.minimal)+1)
				}
			}
		}
		if n.kinds&kArray != 0 && n.items != nil {
			k := 1
			if n.arr != nil {
				k = max(k, int(n.arr.minItems))
			}
			most = max(most, 2+k*(len(n.items.minimal)+1))
		}
		next := []*node{n.extra, n.items}
		for _, p := range n.props {
			next = append(next, p.n)
		}
		for _, p := range n.pats {
			next = append(next, p.n)
		}
		for _, c := range next {
			if c != nil && !seen[c] {
				seen[c] = true
				todo = append(todo, c)
			}
		}
	}
	return most + 2
}

// appendEscaped appends text as the inside of a JSON string, with short
// escapes only (a pattern's DFA admits no other control character).
func appendEscaped(out, text []byte) []byte {
	for _, b := range text {
		switch b {
		case '"', '\\':
			out = append(out, '\\', b)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, b)
		}
	}
	return out
}
