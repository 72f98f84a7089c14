package tokenizer

// A small backtracking regular-expression engine for pre-tokenizer patterns.
//
// Why not Go's regexp: Hugging Face tokenizers compiles Split patterns with
// Oniguruma, and the Qwen patterns (like GPT-2's) rely on things RE2 does not
// have or does differently:
//   - a negative lookahead, `\s+(?!\S)`, which regexp rejects outright
//     (github.com/sugarme/tokenizer panics loading Qwen's tokenizer.json for
//     this reason);
//   - `\s` meaning Unicode White_Space (NBSP, U+3000, U+2028, ...), where
//     RE2's `\s` is ASCII only.
//
// This engine implements the subset such patterns use, with Oniguruma's
// semantics: ordered alternation (leftmost-first, not longest), greedy and
// lazy quantifiers, character classes with \p{..} general categories and
// scripts, \s \d \w and their negations, case-insensitive groups (?i:...)
// using Unicode simple case folding, and lookahead (?=...) / (?!...).
// Anything else (anchors, backreferences, lookbehind, possessive
// quantifiers, POSIX brackets) is rejected with an error at load time rather
// than silently matched differently.

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// charClass is a set of runes, with an ASCII bitmap for the common case.
type charClass struct {
	ascii   [2]uint64
	items   []classItem
	negated bool
	fold    bool         // case-insensitive: a rune matches if any rune of its case-fold orbit is in items
	anyOf   []*charClass // when set, the class is the union of these instead
}

// classItem is one member of a class: a rune range or a Unicode table,
// possibly negated (as in \S or \P{L} inside a class).
type classItem struct {
	lo, hi rune
	tables []*unicode.RangeTable // when set, the item is their union instead of lo..hi
	neg    bool
}

func (it classItem) has(r rune) bool {
	var in bool
	if it.tables != nil {
		in = unicode.In(r, it.tables...)
	} else {
		in = r >= it.lo && r <= it.hi
	}
	return in != it.neg
}

func (c *charClass) contains(r rune) bool {
	for _, it := range c.items {
		if it.has(r) {
			return true
		}
	}
	return false
}

// slow answers membership without the ASCII bitmap.
func (c *charClass) slow(r rune) bool {
	if c.anyOf != nil {
		for _, sub := range c.anyOf {
			if sub.matches(r) {
				return true
			}
		}
		return false
	}
	in := c.contains(r)
	if !in && c.fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if c.contains(f) {
				in = true
				break
			}
		}
	}
	return in != c.negated
}

// finish fills the ASCII bitmap; call it once the items are final.
func (c *charClass) finish() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		if c.slow(r) {
			c.ascii[r>>6] |= 1 << (r & 63)
		}
	}
}

// matches reports whether r is in the class.
func (c *charClass) matches(r rune) bool {
	if r < utf8.RuneSelf {
		return c.ascii[r>>6]&(1<<(r&63)) != 0
	}
	return c.slow(r)
}

type nodeKind uint8

const (
	nodeChar   nodeKind = iota // one rune from cls
	nodeConcat                 // subs in sequence
	nodeAlt                    // subs tried in order
	nodeRepeat                 // subs[0] repeated min..max (max < 0: unbounded)
	nodeLook                   // lookahead on subs[0]; negate for (?!...)
)

// node is the parsed form of a pattern.
type node struct {
	kind     nodeKind
	cls      *charClass
	subs     []*node
	min, max int
	greedy   bool
	negate   bool
}

// canBeEmpty reports whether n can match the empty string.
func (n *node) canBeEmpty() bool {
	switch n.kind {
	case nodeChar:
		return false
	case nodeConcat:
		for _, s := range n.subs {
			if !s.canBeEmpty() {
				return false
			}
		}
		return true
	case nodeAlt:
		for _, s := range n.subs {
			if s.canBeEmpty() {
				return true
			}
		}
		return len(n.subs) == 0
	case nodeRepeat:
		return n.min == 0 || n.subs[0].canBeEmpty()
	default: // lookahead consumes nothing
		return true
	}
}

// first returns a class holding every rune a match of n can start with, or
// nil if that is unknown. It is meaningful only when n cannot match empty.
func (n *node) first() *charClass {
	switch n.kind {
	case nodeChar:
		return n.cls
	case nodeRepeat:
		return n.subs[0].first()
	case nodeConcat, nodeAlt:
		var parts []*charClass
		for _, s := range n.subs {
			if n.kind == nodeConcat && s.kind == nodeLook {
				continue // consumes nothing
			}
			f := s.first()
			if f == nil {
				return nil
			}
			parts = append(parts, f)
			if n.kind == nodeConcat && !s.canBeEmpty() {
				break
			}
		}
		if len(parts) == 0 {
			return nil
		}
		if len(parts) == 1 {
			return parts[0]
		}
		u := &charClass{anyOf: parts}
		for _, p := range parts {
			u.ascii[0] |= p.ascii[0]
			u.ascii[1] |= p.ascii[1]
		}
		return u
	}
	return nil
}

// parser turns a pattern string into nodes.
type parser struct {
	src  []rune
	pos  int
	fold bool // inside (?i...)
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("pattern %q at offset %d: %s", string(p.src), p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) more() bool { return p.pos < len(p.src) }
func (p *parser) peek() rune { return p.src[p.pos] }
func (p *parser) lookingAt(s string) bool {
	return strings.HasPrefix(string(p.src[p.pos:min(len(p.src), p.pos+len(s))]), s)
}

// parseAlt parses alternatives up to ')' or the end.
func (p *parser) parseAlt() (*node, error) {
	alt := &node{kind: nodeAlt}
	saved := p.fold
	defer func() { p.fold = saved }()
	for {
		seq, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		alt.subs = append(alt.subs, seq)
		if p.more() && p.peek() == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(alt.subs) == 1 {
		return alt.subs[0], nil
	}
	return alt, nil
}

// parseConcat parses a sequence of quantified atoms.
func (p *parser) parseConcat() (*node, error) {
	seq := &node{kind: nodeConcat}
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		if p.lookingAt("(?i)") {
			p.pos += 4
			p.fold = true
			continue
		}
		if p.lookingAt("(?-i)") {
			p.pos += 5
			p.fold = false
			continue
		}
		atom, err := p.parseAtom()
		if err != nil {
			return nil, err
		}
		atom, err = p.parseQuantifier(atom)
		if err != nil {
			return nil, err
		}
		seq.subs = append(seq.subs, atom)
	}
	return seq, nil
}

func (p *parser) parseQuantifier(atom *node) (*node, error) {
	if !p.more() {
		return atom, nil
	}
	lo, hi := -1, -1
	switch p.peek() {
	case '*':
		lo, hi = 0, -1
		p.pos++
	case '+':
		lo, hi = 1, -1
		p.pos++
	case '?':
		lo, hi = 0, 1
		p.pos++
	case '{':
		var ok bool
		var err error
		lo, hi, ok, err = p.parseBraces()
		if err != nil {
			return nil, err
		}
		if !ok {
			return atom, nil
		}
	default:
		return atom, nil
	}
	if atom.kind == nodeLook {
		return nil, p.errorf("quantified lookahead is not supported")
	}
	rep := &node{kind: nodeRepeat, subs: []*node{atom}, min: lo, max: hi, greedy: true}
	if p.more() {
		switch p.peek() {
		case '?':
			rep.greedy = false
			p.pos++
		case '+':
			return nil, p.errorf("possessive quantifiers are not supported")
		}
	}
	if p.more() && strings.ContainsRune("*+?{", p.peek()) {
		return nil, p.errorf("nested quantifier")
	}
	return rep, nil
}

// parseBraces parses {n}, {n,} or {n,m}; ok is false when the brace is not
// a quantifier (Oniguruma then reads it as a literal '{').
func (p *parser) parseBraces() (lo, hi int, ok bool, err error) {
	end := p.pos + 1
	for end < len(p.src) && p.src[end] != '}' {
		end++
	}
	if end >= len(p.src) {
		return 0, 0, false, nil
	}
	body := string(p.src[p.pos+1 : end])
	a, b, comma := strings.Cut(body, ",")
	lo, e1 := strconv.Atoi(a)
	if e1 != nil {
		return 0, 0, false, nil
	}
	hi = lo
	if comma {
		if b == "" {
			hi = -1
		} else if hi, e1 = strconv.Atoi(b); e1 != nil {
			return 0, 0, false, nil
		}
	}
	const limit = 1000
	if lo > limit || hi > limit || (hi >= 0 && hi < lo) {
		return 0, 0, false, p.errorf("bad or too large repeat count {%s}", body)
	}
	p.pos = end + 1
	return lo, hi, true, nil
}

func (p *parser) parseAtom() (*node, error) {
	c := p.peek()
	switch c {
	case '(':
		return p.parseGroup()
	case '[':
		cls, err := p.parseClass()
		if err != nil {
			return nil, err
		}
		return &node{kind: nodeChar, cls: cls}, nil
	case '.':
		p.pos++
		// Oniguruma's '.' matches anything but a newline.
		return p.charNode(classItem{lo: '\n', hi: '\n'}, true), nil
	case '\\':
		it, err := p.parseEscape(false)
		if err != nil {
			return nil, err
		}
		return p.charNode(it, false), nil
	case '^', '$':
		return nil, p.errorf("anchors are not supported")
	case '*', '+', '?':
		return nil, p.errorf("nothing to repeat")
	case ')':
		return nil, p.errorf("unbalanced ')'")
	}
	p.pos++
	return p.charNode(classItem{lo: c, hi: c}, false), nil
}

func (p *parser) charNode(it classItem, negated bool) *node {
	cls := &charClass{items: []classItem{it}, negated: negated, fold: p.fold}
	cls.finish()
	return &node{kind: nodeChar, cls: cls}
}

func (p *parser) parseGroup() (*node, error) {
	p.pos++ // '('
	var look, negate bool
	saved := p.fold
	switch {
	case p.lookingAt("?:"):
		p.pos += 2
	case p.lookingAt("?i:"):
		p.pos += 3
		p.fold = true
	case p.lookingAt("?-i:"):
		p.pos += 4
		p.fold = false
	case p.lookingAt("?="):
		p.pos += 2
		look = true
	case p.lookingAt("?!"):
		p.pos += 2
		look, negate = true, true
	case p.lookingAt("?"):
		return nil, p.errorf("unsupported group syntax")
	}
	inner, err := p.parseAlt()
	p.fold = saved
	if err != nil {
		return nil, err
	}
	if !p.more() || p.peek() != ')' {
		return nil, p.errorf("missing ')'")
	}
	p.pos++
	if look {
		return &node{kind: nodeLook, subs: []*node{inner}, negate: negate}, nil
	}
	return inner, nil
}

// parseClass parses [...] into a class.
func (p *parser) parseClass() (*charClass, error) {
	p.pos++ // '['
	cls := &charClass{fold: p.fold}
	if p.more() && p.peek() == '^' {
		cls.negated = true
		p.pos++
	}
	first := true
	for {
		if !p.more() {
			return nil, p.errorf("missing ']'")
		}
		c := p.peek()
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		if c == '[' {
			return nil, p.errorf("nested classes and POSIX brackets are not supported")
		}
		if p.lookingAt("&&") {
			return nil, p.errorf("class intersection is not supported")
		}
		var it classItem
		if c == '\\' {
			var err error
			if it, err = p.parseEscape(true); err != nil {
				return nil, err
			}
		} else {
			p.pos++
			it = classItem{lo: c, hi: c}
		}
		// A range a-b, unless the '-' is the last thing in the class.
		if it.tables == nil && !it.neg && p.pos+1 < len(p.src) && p.peek() == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			var hi classItem
			if p.peek() == '\\' {
				var err error
				if hi, err = p.parseEscape(true); err != nil {
					return nil, err
				}
			} else {
				hi = classItem{lo: p.peek(), hi: p.peek()}
				p.pos++
			}
			if hi.tables != nil || hi.neg || hi.lo != hi.hi || hi.lo < it.lo {
				return nil, p.errorf("bad class range")
			}
			it.hi = hi.lo
		}
		cls.items = append(cls.items, it)
	}
	cls.finish()
	return cls, nil
}

// wordTables make up Oniguruma's Unicode \w: letters, marks, decimal
// digits and connector punctuation.
func wordTables() []*unicode.RangeTable {
	return []*unicode.RangeTable{unicode.L, unicode.M, unicode.Nd, unicode.Pc}
}

// parseEscape parses a backslash escape into a class item.
func (p *parser) parseEscape(inClass bool) (classItem, error) {
	p.pos++ // '\\'
	if !p.more() {
		return classItem{}, p.errorf("trailing backslash")
	}
	c := p.peek()
	p.pos++
	lit := func(r rune) (classItem, error) { return classItem{lo: r, hi: r}, nil }
	switch c {
	case 's', 'S':
		return classItem{tables: []*unicode.RangeTable{unicode.White_Space}, neg: c == 'S'}, nil
	case 'd', 'D':
		return classItem{tables: []*unicode.RangeTable{unicode.Nd}, neg: c == 'D'}, nil
	case 'w', 'W':
		return classItem{tables: wordTables(), neg: c == 'W'}, nil
	case 'p', 'P':
		name := ""
		if p.more() && p.peek() == '{' {
			end := p.pos + 1
			for end < len(p.src) && p.src[end] != '}' {
				end++
			}
			if end >= len(p.src) {
				return classItem{}, p.errorf("missing '}' in \\p{...}")
			}
			name = string(p.src[p.pos+1 : end])
			p.pos = end + 1
		} else if p.more() {
			name = string(p.peek())
			p.pos++
		}
		neg := c == 'P'
		if strings.HasPrefix(name, "^") {
			name, neg = name[1:], !neg
		}
		t := unicode.Categories[name]
		if t == nil {
			t = unicode.Scripts[name]
		}
		if t == nil {
			return classItem{}, p.errorf("unknown Unicode property %q", name)
		}
		return classItem{tables: []*unicode.RangeTable{t}, neg: neg}, nil
	case 't':
		return lit('\t')
	case 'n':
		return lit('\n')
	case 'r':
		return lit('\r')
	case 'f':
		return lit('\f')
	case 'v':
		return lit('\v')
	case 'a':
		return lit('\a')
	case 'e':
		return lit(0x1B)
	case '0':
		return lit(0)
	case 'x', 'u':
		var digits string
		if c == 'x' && p.more() && p.peek() == '{' {
			end := p.pos + 1
			for end < len(p.src) && p.src[end] != '}' {
				end++
			}
			if end >= len(p.src) {
				return classItem{}, p.errorf("missing '}' in \\x{...}")
			}
			digits = string(p.src[p.pos+1 : end])
			p.pos = end + 1
		} else {
			n := 2
			if c == 'u' {
				n = 4
			}
			if p.pos+n > len(p.src) {
				return classItem{}, p.errorf("short \\%c escape", c)
			}
			digits = string(p.src[p.pos : p.pos+n])
			p.pos += n
		}
		v, err := strconv.ParseUint(digits, 16, 32)
		if err != nil || v > unicode.MaxRune {
			return classItem{}, p.errorf("bad \\%c escape %q", c, digits)
		}
		return lit(rune(v))
	case 'b':
		if inClass {
			return lit('\b')
		}
	}
	if c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
		return classItem{}, p.errorf("unsupported escape \\%c", c)
	}
	return lit(c) // escaped punctuation or any other rune stands for itself
}

// Program instructions.
type opcode uint8

const (
	opChar   opcode = iota // match one rune of cls
	opRepeat               // greedy run of cls, min..max runes (max < 0: unbounded)
	opSplit                // try x, on failure y; when cls is set, go straight to y unless the next rune is in cls
	opJmp                  // go to x
	opLook                 // run looks[x] at the current position; fail unless it matches (neg: unless it does not)
	opMatch                // success
)

type inst struct {
	op       opcode
	neg      bool
	cls      *charClass
	x, y     int
	min, max int
}

// program is a compiled pattern, safe for concurrent use.
type program struct {
	insts []inst
	looks []*program
}

const maxProgram = 100000

// compilePattern parses and compiles an Oniguruma-style pattern.
func compilePattern(src string) (*program, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("pattern %q is not valid UTF-8", src)
	}
	p := &parser{src: []rune(src)}
	n, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if p.more() {
		return nil, p.errorf("unbalanced ')'")
	}
	return compileNode(n, src)
}

func compileNode(n *node, src string) (*program, error) {
	c := &compiler{prog: &program{}, src: src}
	if err := c.emit(n); err != nil {
		return nil, err
	}
	c.add(inst{op: opMatch})
	return c.prog, nil
}

type compiler struct {
	prog *program
	src  string
}

func (c *compiler) add(in inst) int {
	c.prog.insts = append(c.prog.insts, in)
	return len(c.prog.insts) - 1
}

func (c *compiler) emit(n *node) error {
	if len(c.prog.insts) > maxProgram {
		return fmt.Errorf("pattern %q compiles to more than %d instructions", c.src, maxProgram)
	}
	switch n.kind {
	case nodeChar:
		c.add(inst{op: opChar, cls: n.cls})
	case nodeConcat:
		for _, s := range n.subs {
			if err := c.emit(s); err != nil {
				return err
			}
		}
	case nodeAlt:
		var jumps []int
		for i, s := range n.subs {
			split := -1
			if i < len(n.subs)-1 {
				// A guard skips alternatives that cannot start with the
				// next rune without setting up a backtracking point.
				var guard *charClass
				if !s.canBeEmpty() {
					guard = s.first()
				}
				split = c.add(inst{op: opSplit, cls: guard})
				c.prog.insts[split].x = split + 1
			}
			if err := c.emit(s); err != nil {
				return err
			}
			if split >= 0 {
				jumps = append(jumps, c.add(inst{op: opJmp}))
				c.prog.insts[split].y = len(c.prog.insts)
			}
		}
		for _, j := range jumps {
			c.prog.insts[j].x = len(c.prog.insts)
		}
	case nodeRepeat:
		return c.emitRepeat(n)
	case nodeLook:
		sub, err := compileNode(n.subs[0], c.src)
		if err != nil {
			return err
		}
		c.prog.looks = append(c.prog.looks, sub)
		c.add(inst{op: opLook, x: len(c.prog.looks) - 1, neg: n.negate})
	}
	return nil
}

func (c *compiler) emitRepeat(n *node) error {
	body := n.subs[0]
	if body.kind == nodeChar && n.greedy {
		c.add(inst{op: opRepeat, cls: body.cls, min: n.min, max: n.max})
		return nil
	}
	if body.canBeEmpty() && n.max != n.min {
		return fmt.Errorf("pattern %q: a repeated expression that can match the empty string is not supported", c.src)
	}
	for i := 0; i < n.min; i++ {
		if err := c.emit(body); err != nil {
			return err
		}
	}
	// optional emits one optional copy of body, returning the split.
	optional := func() (int, error) {
		split := c.add(inst{op: opSplit})
		if err := c.emit(body); err != nil {
			return 0, err
		}
		return split, nil
	}
	setSplit := func(split, bodyStart, after int) {
		if n.greedy {
			c.prog.insts[split].x, c.prog.insts[split].y = bodyStart, after
		} else {
			c.prog.insts[split].x, c.prog.insts[split].y = after, bodyStart
		}
	}
	if n.max < 0 {
		split, err := optional()
		if err != nil {
			return err
		}
		c.add(inst{op: opJmp, x: split})
		setSplit(split, split+1, len(c.prog.insts))
		return nil
	}
	var splits []int
	for i := n.min; i < n.max; i++ {
		split, err := optional()
		if err != nil {
			return err
		}
		splits = append(splits, split)
	}
	for _, s := range splits {
		setSplit(s, s+1, len(c.prog.insts))
	}
	return nil
}

// frame is a backtracking point. For a greedy run (lo >= 0) it stands for
// every shorter end position down to lo.
type frame struct {
	pc, pos, lo int
}

// matcher holds the scratch space of one matching goroutine.
type matcher struct {
	stack []frame
}

// decodeAt decodes the rune at s[i]; s is valid UTF-8.
func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// matchAt runs prog anchored at s[start:] and returns the end of the first
// match in priority order, or -1.
func (m *matcher) matchAt(prog *program, s string, start int) int {
	base := len(m.stack)
	pc, pos := 0, start
	for {
		in := &prog.insts[pc]
		ok := true
		switch in.op {
		case opChar:
			ok = false
			if pos < len(s) {
				r, n := rune(s[pos]), 1
				if r >= utf8.RuneSelf {
					r, n = utf8.DecodeRuneInString(s[pos:])
				}
				if in.cls.matches(r) {
					pos += n
					pc++
					ok = true
				}
			}
		case opRepeat:
			end, count, minEnd := pos, 0, -1
			if in.min == 0 {
				minEnd = pos
			}
			for (in.max < 0 || count < in.max) && end < len(s) {
				r, n := rune(s[end]), 1
				if r >= utf8.RuneSelf {
					r, n = utf8.DecodeRuneInString(s[end:])
				}
				if !in.cls.matches(r) {
					break
				}
				end += n
				count++
				if count == in.min {
					minEnd = end
				}
			}
			if count < in.min {
				ok = false
				break
			}
			if end > minEnd {
				m.stack = append(m.stack, frame{pc: pc + 1, pos: end, lo: minEnd})
			}
			pos = end
			pc++
		case opSplit:
			if in.cls != nil {
				if pos >= len(s) {
					pc = in.y
					break
				}
				r := rune(s[pos])
				if r >= utf8.RuneSelf {
					r, _ = utf8.DecodeRuneInString(s[pos:])
				}
				if !in.cls.matches(r) {
					pc = in.y
					break
				}
			}
			m.stack = append(m.stack, frame{pc: in.y, pos: pos, lo: -1})
			pc = in.x
		case opJmp:
			pc = in.x
		case opLook:
			found := m.matchAt(prog.looks[in.x], s, pos) >= 0
			ok = found != in.neg
			pc++
		case opMatch:
			m.stack = m.stack[:base]
			return pos
		}
		if ok {
			continue
		}
		if len(m.stack) == base {
			return -1
		}
		f := m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
		if f.lo >= 0 { // give back one rune of a greedy run
			_, n := utf8.DecodeLastRuneInString(s[:f.pos])
			f.pos -= n
			if f.pos > f.lo {
				m.stack = append(m.stack, f)
			}
		}
		pc, pos = f.pc, f.pos
	}
}

// span is a piece of a pre-token split: s[start:end], and whether the
// pattern matched it.
type span struct {
	start, end int
	match      bool
}

// split cuts s at the matches of prog, like Hugging Face's Split
// pre-tokenizer (Oniguruma find_iter): every match is a span and so is every
// stretch between matches. Spans are appended to dst.
func (m *matcher) split(prog *program, s string, dst []span) []span {
	gap := 0 // start of the current unmatched stretch
	for pos := 0; pos < len(s); {
		end := m.matchAt(prog, s, pos)
		if end < 0 || end == pos {
			if end == pos { // an empty match still ends the unmatched stretch
				if gap < pos {
					dst = append(dst, span{gap, pos, false})
				}
				gap = pos
			}
			_, n := decodeAt(s, pos)
			pos += n
			continue
		}
		if gap < pos {
			dst = append(dst, span{gap, pos, false})
		}
		dst = append(dst, span{pos, end, true})
		pos, gap = end, end
	}
	if gap < len(s) {
		dst = append(dst, span{gap, len(s), false})
	}
	return dst
}
