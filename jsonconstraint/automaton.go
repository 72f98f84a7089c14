package jsonconstraint

import "github.com/govinfer/govinfer/grammar/regex"

// MaxWhitespace is the most consecutive whitespace bytes the automaton
// accepts between tokens of the document, so that a model cannot spend its
// whole budget on blank space.
const MaxWhitespace = 16

// Limits on number literals: they keep every number within an int64 (for
// integers) or a finite float64.
const (
	maxIntDigits  = 18
	maxFracDigits = 18
	maxExpDigits  = 2
)

// pos is the place in a container (or at the top level) where the
// automaton is, outside any scalar.
type pos uint8

const (
	posRootValue pos = iota // top level, before the value
	posRootDone             // top level, after the value: only the end may follow
	posObjStart             // after '{'
	posObjKey               // after ',' in an object: a key must follow
	posObjColon             // after a key
	posObjValue             // after ':'
	posObjAfter             // after a member's value
	posArrStart             // after '['
	posArrValue             // after ',' in an array
	posArrAfter             // after an element
)

// frame is one open container (or the top level).
type frame struct {
	n     *node
	used  uint64 // object: properties present so far
	key   int32  // object: property of the current member, -1 for an additional one, -2-k for patternProperties k
	count uint32 // array: elements so far
	pos   pos
}

// link is an immutable entry of the stack below the top frame.
type link struct {
	f    frame
	next *link
}

// Scalar lexer modes.
const (
	lexNone uint8 = iota
	lexString
	lexKey
	lexNumber
	lexLiteral
)

// String sub-states.
const (
	strBody uint8 = iota
	strEscape
	strHex
	strUTF8
)

// Number sub-states.
const (
	numMinus uint8 = iota // after '-'
	numZero               // after a leading 0
	numInt                // in the integer digits
	numDot                // after '.'
	numFrac               // in the fraction digits
	numE                  // after 'e'
	numESign              // after the exponent's sign
	numExp                // in the exponent digits
)

// unescape maps a JSON short escape's letter to the byte it stands for.
var unescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escapeTo returns a short escape's letter whose character the pattern
// accepts from state st, one leading to the shortest completion; 0 if
// none does.
func escapeTo(pat *regex.DFA, st int32) byte {
	best, bestLen := byte(0), 0
	for _, e := range []byte(`"\\/bfnrt`) {
		if t := pat.Step(st, unescape[e]); t >= 0 && (best == 0 || pat.ShortestLen(t) < bestLen) {
			best, bestLen = e, pat.ShortestLen(t)
		}
	}
	return best
}

// lex is the state of the scalar being read, if any.
type lex struct {
	mode    uint8
	sub     uint8
	n       uint8 // string: hex digits or UTF-8 bytes left; number: digits in the part
	lo, hi  uint8 // string: range of the next UTF-8 continuation byte
	intOnly bool  // number: an integer is expected
	// rule is set when the value's schema has string keywords (then cnt
	// counts its characters and \u escapes are not written) or numeric
	// bounds (then the number is tracked in neg, mant, idig and fdig).
	rule       bool
	neg        bool
	idig, fdig uint8
	t          int32  // key: key trie node (-1: not a property name); literal: trie node
	cnt        uint32 // string with rules: characters so far
	mant       uint64 // bounded number: its digits
	dfa        int32  // string with a pattern: the pattern DFA's state
}

// state is the whole automaton state. It is a small comparable value:
// copying it is a snapshot (the stack below the top is immutable).
type state struct {
	top   frame
	below *link
	ws    uint8
	lx    lex
}

func initialState(g *Grammar) state {
	return state{top: frame{n: g.root, pos: posRootValue, key: -1}}
}

// arena hands out stack links for one mask computation; nil means the heap.
type arena struct {
	links []link
}

func (a *arena) push(l link) *link {
	if a == nil {
		return &l
	}
	if len(a.links) == cap(a.links) {
		a.links = make([]link, 0, max(64, 2*cap(a.links)))
	}
	a.links = append(a.links, l)
	return &a.links[len(a.links)-1]
}

func isWS(b byte) bool {
	return b == ' ' || b == '\n' || b == '\t' || b == '\r'
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// target is the schema of the value expected at the current position.
func (s *state) target() *node {
	switch s.top.pos {
	case posRootValue:
		return s.top.n
	case posObjValue:
		switch k := s.top.key; {
		case k >= 0:
			return s.top.n.props[k].n
		case k <= -2:
			return s.top.n.pats[-2-k].n
		}
		return s.top.n.extra
	case posArrStart, posArrValue:
		return s.top.n.items
	}
	return nil
}

// valueDone moves the top frame past the value just completed.
func (s *state) valueDone() {
	switch s.top.pos {
	case posRootValue:
		s.top.pos = posRootDone
	case posObjValue:
		if s.top.key >= 0 {
			s.top.used |= 1 << s.top.key
		}
		s.top.pos = posObjAfter
	case posArrStart, posArrValue:
		s.top.count++
		s.top.pos = posArrAfter
	}
}

// canAddKey reports whether another member may start in the top object.
func (s *state) canAddKey() bool {
	n := s.top.n
	return n.extra != nil || n.keyM != nil || (n.keys != nil && n.keys.all&^s.top.used != 0)
}

// canClose reports whether the top object has all its required keys.
func (s *state) canClose() bool {
	return s.top.n.required&^s.top.used == 0
}

func (s *state) pop() {
	s.top = s.below.f
	s.below = s.below.next
	s.valueDone()
}

// numberEnds reports whether the number being read may end here.
func (s *state) numberEnds() bool {
	if s.lx.rule {
		return s.target().num.ends(s.lx.prefix())
	}
	switch s.lx.sub {
	case numZero, numInt, numFrac, numExp:
		return true
	}
	return false
}

// step advances the automaton by one byte; false means the byte cannot
// follow (s is then garbage).
func (s *state) step(b byte, a *arena) bool {
	for {
		switch s.lx.mode {
		case lexString, lexKey:
			return s.stepString(b)
		case lexNumber:
			if ok, consumed := s.stepNumber(b); consumed || !ok {
				return ok
			}
			if s.lx.rule && !s.target().num.ends(s.lx.prefix()) {
				return false
			}
			s.lx = lex{}
			s.valueDone()
			continue // b is read after the number
		case lexLiteral:
			t := s.target().lits
			if c := t.child(s.lx.t, b); c >= 0 {
				s.lx.t = c
				return true
			}
			if !t.nodes[s.lx.t].terminal {
				return false
			}
			s.lx = lex{}
			s.valueDone()
			continue
		}
		return s.stepStructure(b, a)
	}
}

func (s *state) stepStructure(b byte, a *arena) bool {
	if isWS(b) {
		if s.top.pos == posRootDone || s.ws >= MaxWhitespace {
			return false
		}
		s.ws++
		return true
	}
	s.ws = 0
	switch s.top.pos {
	case posRootValue, posObjValue, posArrValue:
		return s.startValue(b, a)
	case posArrStart:
		if b == ']' {
			if r := s.top.n.arr; r != nil && r.minItems > 0 {
				return false
			}
			s.pop()
			return true
		}
		if r := s.top.n.arr; r != nil && r.maxItems == 0 {
			return false
		}
		return s.startValue(b, a)
	case posObjStart:
		if b == '}' && s.canClose() {
			s.pop()
			return true
		}
		return b == '"' && s.canAddKey() && s.startKey()
	case posObjKey:
		return b == '"' && s.startKey()
	case posObjColon:
		if b == ':' {
			s.top.pos = posObjValue
			return true
		}
	case posObjAfter:
		if b == ',' && s.canAddKey() {
			s.top.pos = posObjKey
			return true
		}
		if b == '}' && s.canClose() {
			s.pop()
			return true
		}
	case posArrAfter:
		r := s.top.n.arr
		if b == ',' {
			if r != nil && r.maxItems >= 0 && s.top.count >= uint32(r.maxItems) {
				return false
			}
			s.top.pos = posArrValue
			return true
		}
		if b == ']' {
			if r != nil && s.top.count < uint32(r.minItems) {
				return false
			}
			s.pop()
			return true
		}
	}
	return false
}

func (s *state) startKey() bool {
	s.lx = lex{mode: lexKey, t: -1, dfa: -1}
	if s.top.n.keys != nil {
		s.lx.t = 0
	}
	if s.top.n.keyM != nil {
		s.lx.dfa = 0 // the key automaton's state (see keyMatcher)
	}
	return true
}

func (s *state) startValue(b byte, a *arena) bool {
	n := s.target()
	switch {
	case b == '{' && n.kinds&kObject != 0:
		s.below = a.push(link{f: s.top, next: s.below})
		s.top = frame{n: n, pos: posObjStart, key: -1}
		return true
	case b == '[' && n.kinds&kArray != 0:
		s.below = a.push(link{f: s.top, next: s.below})
		s.top = frame{n: n, pos: posArrStart, key: -1}
		return true
	case b == '"' && n.kinds&kString != 0:
		s.lx = lex{mode: lexString, rule: n.str != nil}
		return true
	case (b == '-' || isDigit(b)) && n.kinds&(kNumber|kInteger) != 0:
		s.lx = lex{mode: lexNumber, intOnly: n.kinds&kNumber == 0, sub: numInt, n: 1}
		switch {
		case b == '-':
			s.lx.sub, s.lx.n = numMinus, 0
		case b == '0':
			s.lx.sub = numZero
		}
		if n.num != nil {
			l := &s.lx
			l.rule = true
			if b == '-' {
				l.neg = true
			} else {
				l.mant, l.idig = uint64(b-'0'), 1
			}
			return n.num.feasible(l.prefix(), l.intOnly)
		}
		return true
	case n.lits != nil:
		if c := n.lits.child(0, b); c >= 0 {
			s.lx = lex{mode: lexLiteral, t: c}
			return true
		}
	}
	return false
}

// prefix returns the bounded number being read.
func (l *lex) prefix() numPrefix {
	return numPrefix{sub: l.sub, neg: l.neg, mant: l.mant, idig: int(l.idig), fdig: int(l.fdig)}
}

// stepBounded reads b in a number whose schema bounds it: at most
// boundDigits digits, no exponent, and every prefix one that some
// continuation completes in range.
func (s *state) stepBounded(b byte) (ok, consumed bool) {
	l := &s.lx
	p := l.prefix()
	digit := isDigit(b)
	d := uint64(b - '0')
	switch l.sub {
	case numMinus:
		if !digit {
			return false, true
		}
		p.mant, p.idig, p.sub = d, 1, numInt
		if b == '0' {
			p.sub = numZero
		}
	case numZero, numInt:
		switch {
		case digit && l.sub == numInt && p.idig < boundDigits:
			p.mant, p.idig = p.mant*10+d, p.idig+1
		case digit:
			return false, true
		case b == '.' && !l.intOnly && p.idig < boundDigits:
			p.sub = numDot
		default:
			return true, false
		}
	case numDot:
		if !digit || p.idig >= boundDigits {
			return false, true
		}
		p.mant, p.fdig, p.sub = p.mant*10+d, 1, numFrac
	case numFrac:
		switch {
		case digit && p.idig+p.fdig < boundDigits:
			p.mant, p.fdig = p.mant*10+d, p.fdig+1
		case digit:
			return false, true
		default:
			return true, false
		}
	default:
		return false, true
	}
	if !s.target().num.feasible(p, l.intOnly) {
		return false, true
	}
	l.sub, l.mant, l.idig, l.fdig = p.sub, p.mant, uint8(p.idig), uint8(p.fdig)
	return true, true
}

// stepNumber reads b in a number. consumed is false when b ends the number
// (ok then says whether it may end there).
func (s *state) stepNumber(b byte) (ok, consumed bool) {
	if s.lx.rule {
		return s.stepBounded(b)
	}
	l := &s.lx
	digit := isDigit(b)
	frac := !l.intOnly && b == '.'
	exp := !l.intOnly && (b == 'e' || b == 'E')
	switch l.sub {
	case numMinus:
		switch {
		case b == '0':
			l.sub = numZero
		case digit:
			l.sub, l.n = numInt, 1
		default:
			return false, true
		}
	case numZero, numInt:
		switch {
		case digit && l.sub == numInt && l.n < maxIntDigits:
			l.n++
		case digit:
			return false, true
		case frac:
			l.sub, l.n = numDot, 0
		case exp:
			l.sub, l.n = numE, 0
		default:
			return true, false
		}
	case numDot:
		if !digit {
			return false, true
		}
		l.sub, l.n = numFrac, 1
	case numFrac:
		switch {
		case digit && l.n < maxFracDigits:
			l.n++
		case digit:
			return false, true
		case exp:
			l.sub, l.n = numE, 0
		default:
			return true, false
		}
	case numE:
		switch {
		case b == '+' || b == '-':
			l.sub = numESign
		case digit:
			l.sub, l.n = numExp, 1
		default:
			return false, true
		}
	case numESign:
		if !digit {
			return false, true
		}
		l.sub, l.n = numExp, 1
	case numExp:
		switch {
		case digit && l.n < maxExpDigits:
			l.n++
		case digit:
			return false, true
		default:
			return true, false
		}
	}
	return true, true
}

// stepString reads b inside a string value or an object key.
func (s *state) stepString(b byte) bool {
	l := &s.lx
	switch l.sub {
	case strBody:
		var pat *regex.DFA
		if l.rule && b != '"' {
			// Every other byte here starts a character. A pattern's DFA
			// counts them itself (it holds the lengths), so that the
			// state, and the masks cached by it, repeat in a string.
			r := s.target().str
			if pat = r.pat; pat != nil {
				if b != '\\' {
					if l.dfa = pat.Step(l.dfa, b); l.dfa < 0 {
						return false
					}
				}
			} else {
				if r.maxLen >= 0 && l.cnt >= uint32(r.maxLen) {
					return false
				}
				l.cnt++
			}
		}
		switch {
		case b == '"':
			if l.mode == lexKey {
				return s.endKey()
			}
			if l.rule {
				r := s.target().str
				if r.pat != nil && !r.pat.Accept(l.dfa) || r.pat == nil && l.cnt < uint32(r.minLen) {
					return false
				}
			}
			s.lx = lex{}
			s.valueDone()
			return true
		case b == '\\':
			if l.mode == lexKey {
				return false // keys are written without escapes
			}
			if pat != nil && escapeTo(pat, l.dfa) == 0 {
				return false // no escaped character can continue the pattern
			}
			l.sub = strEscape
			return true
		case b < 0x20:
			return false
		case b < 0x80:
		case b >= 0xC2 && b <= 0xDF:
			l.sub, l.n, l.lo, l.hi = strUTF8, 1, 0x80, 0xBF
		case b == 0xE0:
			l.sub, l.n, l.lo, l.hi = strUTF8, 2, 0xA0, 0xBF
		case b == 0xED:
			l.sub, l.n, l.lo, l.hi = strUTF8, 2, 0x80, 0x9F // no surrogates
		case b >= 0xE1 && b <= 0xEF:
			l.sub, l.n, l.lo, l.hi = strUTF8, 2, 0x80, 0xBF
		case b == 0xF0:
			l.sub, l.n, l.lo, l.hi = strUTF8, 3, 0x90, 0xBF
		case b >= 0xF1 && b <= 0xF3:
			l.sub, l.n, l.lo, l.hi = strUTF8, 3, 0x80, 0xBF
		case b == 0xF4:
			l.sub, l.n, l.lo, l.hi = strUTF8, 3, 0x80, 0x8F
		default:
			return false
		}
	case strUTF8:
		if b < l.lo || b > l.hi {
			return false
		}
		if l.rule {
			if pat := s.target().str.pat; pat != nil {
				if l.dfa = pat.Step(l.dfa, b); l.dfa < 0 {
					return false
				}
			}
		}
		l.n--
		l.lo, l.hi = 0x80, 0xBF
		if l.n == 0 {
			l.sub = strBody
		}
	case strEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			l.sub = strBody
			if l.rule {
				if pat := s.target().str.pat; pat != nil {
					if l.dfa = pat.Step(l.dfa, unescape[b]); l.dfa < 0 {
						return false
					}
				}
			}
		case 'u':
			if l.rule {
				return false // counted strings are written without \u escapes
			}
			l.sub, l.n = strHex, 4
		default:
			return false
		}
		return true
	case strHex:
		if !isDigit(b) && (b|0x20 < 'a' || b|0x20 > 'f') {
			return false
		}
		l.n--
		if l.n == 0 {
			l.sub = strBody
		}
		return true
	}
	if l.mode == lexKey {
		return s.keyByte(b)
	}
	return true
}

// keyByte follows a key's byte in the property-name trie, and in the key
// automaton of patternProperties if any.
func (s *state) keyByte(b byte) bool {
	n := s.top.n
	if s.lx.t >= 0 {
		s.lx.t = n.keys.child(s.lx.t, b)
	}
	// Names of properties not yet present lie ahead.
	named := s.lx.t >= 0 && n.keys.nodes[s.lx.t].below&^s.top.used != 0
	if n.keyM != nil {
		if s.lx.dfa >= 0 {
			s.lx.dfa = n.keyM.step(s.lx.dfa, b)
		}
		return named || s.lx.dfa >= 0
	}
	if s.lx.t >= 0 && n.extra == nil && !named {
		return false // only names of properties already present lie ahead
	}
	return s.lx.t >= 0 || n.extra != nil
}

func (s *state) endKey() bool {
	n := s.top.n
	p := int32(-1)
	if s.lx.t >= 0 {
		p = n.keys.nodes[s.lx.t].prop
	}
	switch {
	case p >= 0:
		if s.top.used&(1<<p) != 0 {
			return false // a repeated key
		}
		s.top.key = p
	case n.keyM != nil:
		k := n.keyM.patternOf(s.lx.dfa)
		if k == -2 {
			return false
		}
		s.top.key = int32(-2 - k) // -1: an additional property
	case n.extra != nil:
		s.top.key = -1
	default:
		return false
	}
	s.lx = lex{}
	s.top.pos = posObjColon
	return true
}

// complete reports whether the document may end here.
func (s state) complete() bool {
	switch s.lx.mode {
	case lexNumber:
		if !s.numberEnds() {
			return false
		}
		s.lx = lex{}
		s.valueDone()
	case lexLiteral:
		if !s.target().lits.nodes[s.lx.t].terminal {
			return false
		}
		s.lx = lex{}
		s.valueDone()
	}
	return s.lx.mode == lexNone && s.top.pos == posRootDone
}

// Acceptor is a byte-level incremental recogniser for a Grammar. Its zero
// value is not usable; make one with NewAcceptor. Copying an Acceptor value
// (or calling Clone) snapshots it in constant time.
type Acceptor struct {
	s state
}

// NewAcceptor returns an acceptor at the start of a document.
func NewAcceptor(g *Grammar) *Acceptor {
	return &Acceptor{s: initialState(g)}
}

// Clone returns an independent copy.
func (a *Acceptor) Clone() *Acceptor {
	c := *a
	return &c
}

// Step reads one byte; it returns false, and the acceptor stays where it
// was, if the byte cannot continue the document.
func (a *Acceptor) Step(b byte) bool {
	s := a.s
	if !s.step(b, nil) {
		return false
	}
	a.s = s
	return true
}

// Push reads bytes; it returns false, and the acceptor stays where it was,
// if they cannot continue the document.
func (a *Acceptor) Push(p []byte) bool {
	s := a.s
	for _, b := range p {
		if !s.step(b, nil) {
			return false
		}
	}
	a.s = s
	return true
}

// Complete reports whether the bytes pushed so far form a whole document.
func (a *Acceptor) Complete() bool {
	return a.s.complete()
}
