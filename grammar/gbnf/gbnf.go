// Package gbnf parses llama.cpp's GBNF grammars (the grammar field of
// llama-server, and vLLM's structured_outputs.grammar) into a
// grammar.Grammar: rules "name ::= expression", alternation with |,
// grouping with ( ), the postfix operators * + ? {m} {m,} {m,n} {,n},
// string literals with escapes (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
// character classes [a-z] and [^...], the any-character dot, and #
// comments. The start rule is root. A rule's body ends where the next
// "name ::=" begins, so bodies may span lines.
package gbnf

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/grammar/regex"
)

// Limits of Parse.
const (
	MaxNesting = 64 // nested groups
)

// Parse compiles a GBNF grammar.
func Parse(src string) (*grammar.Grammar, error) {
	p := &parser{src: src}
	rules, err := p.rules()
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, &grammar.Error{Pos: -1, Msg: "the grammar has no rules"}
	}
	return grammar.Build(rules, "root")
}

type parser struct {
	src   string
	i     int
	depth int
}

func (p *parser) errf(pos int, format string, args ...any) error {
	return &grammar.Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// skip passes whitespace (newlines included) and comments.
func (p *parser) skip() {
	for p.i < len(p.src) {
		switch c := p.src[p.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.i++
		case c == '#':
			for p.i < len(p.src) && p.src[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func (p *parser) name() string {
	start := p.i
	for p.i < len(p.src) && isWordChar(p.src[p.i]) {
		p.i++
	}
	return p.src[start:p.i]
}

// atRuleStart reports whether "name ::=" begins at the current position.
func (p *parser) atRuleStart() bool {
	save := p.i
	defer func() { p.i = save }()
	if p.name() == "" {
		return false
	}
	p.skip()
	return len(p.src)-p.i >= 3 && p.src[p.i:p.i+3] == "::="
}

func (p *parser) rules() ([]grammar.Rule, error) {
	var rules []grammar.Rule
	for {
		p.skip()
		if p.i >= len(p.src) {
			return rules, nil
		}
		start := p.i
		name := p.name()
		if name == "" {
			return nil, p.errf(p.i, "expected a rule name, found %q", p.rest())
		}
		p.skip()
		if len(p.src)-p.i < 3 || p.src[p.i:p.i+3] != "::=" {
			return nil, p.errf(p.i, "expected ::= after the rule name %q", name)
		}
		p.i += 3
		body, err := p.alternatives()
		if err != nil {
			return nil, err
		}
		body.Pos = start
		rules = append(rules, grammar.Rule{Name: name, Body: body})
	}
}

func (p *parser) rest() string {
	r := p.src[p.i:]
	if len(r) > 12 {
		r = r[:12] + "..."
	}
	return r
}

// alternatives parses a|b|c up to a ')' or the next rule.
func (p *parser) alternatives() (*regex.Node, error) {
	var alts []*regex.Node
	for {
		seq, err := p.sequence()
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		p.skip()
		if p.i < len(p.src) && p.src[p.i] == '|' {
			p.i++
			continue
		}
		return regex.Alt(alts...), nil
	}
}

func (p *parser) sequence() (*regex.Node, error) {
	var items []*regex.Node
	for {
		p.skip()
		if p.i >= len(p.src) || p.src[p.i] == '|' || p.src[p.i] == ')' || p.atRuleStart() {
			break
		}
		item, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	if len(items) == 0 {
		return &regex.Node{Op: regex.OpEmpty, Pos: p.i}, nil
	}
	return regex.Concat(items...), nil
}

func (p *parser) item() (*regex.Node, error) {
	start := p.i
	var n *regex.Node
	switch c := p.src[p.i]; {
	case c == '"':
		s, err := p.literal()
		if err != nil {
			return nil, err
		}
		n = &regex.Node{Op: regex.OpLit, Lit: []byte(s)}
		if len(s) == 0 {
			n = &regex.Node{Op: regex.OpEmpty}
		}
	case c == '[':
		cl, err := p.class()
		if err != nil {
			return nil, err
		}
		n = cl
	case c == '.':
		p.i++
		n = regex.AnyChar()
	case c == '(':
		if p.depth >= MaxNesting {
			return nil, p.errf(p.i, "groups nest more than %d deep", MaxNesting)
		}
		p.i++
		p.depth++
		inner, err := p.alternatives()
		if err != nil {
			return nil, err
		}
		p.depth--
		p.skip()
		if p.i >= len(p.src) || p.src[p.i] != ')' {
			return nil, p.errf(start, "this ( is never closed")
		}
		p.i++
		n = inner
	case isWordChar(c):
		n = &regex.Node{Op: regex.OpRef, Name: p.name()}
	default:
		return nil, p.errf(p.i, "unexpected %q", p.rest())
	}
	n.Pos = start
	return p.postfix(n)
}

func (p *parser) postfix(n *regex.Node) (*regex.Node, error) {
	for p.i < len(p.src) {
		start := p.i
		switch p.src[p.i] {
		case '*':
			n = regex.Repeat(n, 0, -1)
		case '+':
			n = regex.Repeat(n, 1, -1)
		case '?':
			n = regex.Repeat(n, 0, 1)
		case '{':
			lo, hi, err := p.braces()
			if err != nil {
				return nil, err
			}
			n = regex.Repeat(n, lo, hi)
			n.Pos = start
			continue
		default:
			return n, nil
		}
		p.i++
		n.Pos = start
	}
	return n, nil
}

// braces parses {m}, {m,}, {m,n} or {,n}.
func (p *parser) braces() (int, int, error) {
	start := p.i
	p.i++
	num := func() (int, bool) {
		s := p.i
		for p.i < len(p.src) && '0' <= p.src[p.i] && p.src[p.i] <= '9' {
			p.i++
		}
		if s == p.i {
			return 0, false
		}
		v, err := strconv.Atoi(p.src[s:p.i])
		return v, err == nil && v <= 1000
	}
	p.skip()
	lo, okLo := num()
	p.skip()
	hi := lo
	if p.i < len(p.src) && p.src[p.i] == ',' {
		p.i++
		p.skip()
		var okHi bool
		if hi, okHi = num(); !okHi {
			hi = -1
		}
		p.skip()
	} else if !okLo {
		return 0, 0, p.errf(start, "expected a count in { }")
	}
	if p.i >= len(p.src) || p.src[p.i] != '}' {
		return 0, 0, p.errf(start, "expected } to close the repetition (counts are at most 1000)")
	}
	p.i++
	if hi >= 0 && hi < lo {
		return 0, 0, p.errf(start, "repetition {%d,%d}: the maximum is below the minimum", lo, hi)
	}
	return lo, hi, nil
}

// escape reads an escape after the backslash at p.i-1.
func (p *parser) escape() (rune, error) {
	start := p.i - 1
	if p.i >= len(p.src) {
		return 0, p.errf(start, "a backslash ends the grammar")
	}
	c := p.src[p.i]
	p.i++
	hex := 0
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'x':
		hex = 2
	case 'u':
		hex = 4
	case 'U':
		hex = 8
	default:
		return rune(c), nil // \\ \" \[ \] \- and any other: the character itself
	}
	if p.i+hex > len(p.src) {
		return 0, p.errf(start, "\\%c needs %d hex digits", c, hex)
	}
	v, err := strconv.ParseUint(p.src[p.i:p.i+hex], 16, 32)
	if err != nil || v > unicode.MaxRune {
		return 0, p.errf(start, "\\%c needs %d hex digits", c, hex)
	}
	p.i += hex
	return rune(v), nil
}

// char reads one character of a literal or class.
func (p *parser) char() (rune, error) {
	if p.src[p.i] == '\\' {
		p.i++
		return p.escape()
	}
	r, size := utf8.DecodeRuneInString(p.src[p.i:])
	if r == utf8.RuneError && size == 1 {
		return 0, p.errf(p.i, "invalid UTF-8")
	}
	p.i += size
	return r, nil
}

func (p *parser) literal() (string, error) {
	start := p.i
	p.i++
	var out []byte
	for {
		if p.i >= len(p.src) {
			return "", p.errf(start, "this string literal is never closed")
		}
		if p.src[p.i] == '"' {
			p.i++
			return string(out), nil
		}
		r, err := p.char()
		if err != nil {
			return "", err
		}
		out = utf8.AppendRune(out, r)
	}
}

func (p *parser) class() (*regex.Node, error) {
	start := p.i
	p.i++
	neg := false
	if p.i < len(p.src) && p.src[p.i] == '^' {
		neg = true
		p.i++
	}
	var ranges []rune
	for {
		if p.i >= len(p.src) {
			return nil, p.errf(start, "this character class is never closed")
		}
		if p.src[p.i] == ']' {
			p.i++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.i+1 < len(p.src) && p.src[p.i] == '-' && p.src[p.i+1] != ']' {
			p.i++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errf(start, "character range %q-%q is backwards", lo, hi)
			}
		}
		ranges = append(ranges, lo, hi)
	}
	if neg {
		ranges = negate(ranges)
	}
	if len(ranges) == 0 {
		return &regex.Node{Op: regex.OpNone}, nil
	}
	return &regex.Node{Op: regex.OpClass, Ranges: ranges}, nil
}

// negate returns the complement of rune ranges in [0, MaxRune].
func negate(ranges []rune) []rune {
	type rr struct{ lo, hi rune }
	var rs []rr
	for i := 0; i < len(ranges); i += 2 {
		rs = append(rs, rr{ranges[i], ranges[i+1]})
	}
	// insertion sort: classes are short
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].lo < rs[j-1].lo; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	var out []rune
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, next, r.lo-1)
		}
		next = max(next, r.hi+1)
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}
