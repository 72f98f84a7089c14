// Package lark parses Lark grammars, the syntax of a Responses custom
// tool's format ({"type": "grammar", "syntax": "lark"}), into a
// grammar.Grammar: rules (lowercase) and terminals (uppercase) defined
// with "name: expansion | expansion", string literals (with the i flag),
// /regular expressions/ (Python syntax, flags i and s), "a".."z" ranges,
// ( ) groups, [ ] and ? for optional items, * and +, ~n and ~n..m
// repetition, "-> alias" (ignored: aliases only name parse-tree nodes),
// ?rule and !rule modifiers and priorities (ignored), %import of Lark's
// common terminals and %ignore. The start rule is start.
//
// Lark lexes before it parses; this package reads the grammar without a
// lexer (terminals are inlined into the rules as regular expressions),
// which accepts the same texts for grammars whose terminals do not
// compete for the same input, as tool grammars such as Codex's
// apply_patch are written.
package lark

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/grammar/regex"
)

// MaxNesting bounds nested groups.
const MaxNesting = 64

// common are the terminals of Lark's common.lark, as regular expressions.
var common = map[string]string{
	"DIGIT": `[0-9]`, "HEXDIGIT": `[0-9a-fA-F]`, "INT": `[0-9]+`, "SIGNED_INT": `[+-]?[0-9]+`,
	"DECIMAL": `[0-9]+\.[0-9]*|\.[0-9]+`, "FLOAT": `[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?`,
	"SIGNED_FLOAT":   `[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)`,
	"NUMBER":         `[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+`,
	"SIGNED_NUMBER":  `[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)`,
	"ESCAPED_STRING": `"([^"\\\n]|\\[^\n])*"`, "LCASE_LETTER": `[a-z]`, "UCASE_LETTER": `[A-Z]`, "LETTER": `[a-zA-Z]`,
	"WORD": `[a-zA-Z]+`, "CNAME": `[_a-zA-Z][_a-zA-Z0-9]*`, "WS_INLINE": `[ \t]+`, "WS": `[ \t\f\r\n]+`,
	"CR": `\r`, "LF": `\n`, "NEWLINE": `(\r?\n)+`, "SH_COMMENT": `#[^\n]*`, "CPP_COMMENT": `//[^\n]*`,
	"C_COMMENT": `/\*([^*]|\*+[^*/])*\*+/`, "SQL_COMMENT": `--[^\n]*`,
}

// Parse compiles a Lark grammar.
func Parse(src string) (*grammar.Grammar, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, src: src, terms: map[string]*regex.Node{}, termPos: map[string]int{}}
	if err := p.definitions(); err != nil {
		return nil, err
	}
	return p.build()
}

type kind uint8

const (
	tName kind = iota
	tString
	tRegex
	tColon
	tPipe
	tLPar
	tRPar
	tLSqb
	tRSqb
	tOp // ? * +
	tTilde
	tDotDot
	tArrow
	tNumber
	tNewline
	tDirective
	tComma
	tDot
)

type token struct {
	k    kind
	text string // names, directives, operators; the value of strings; the pattern of regexes
	flag string // string and regex flags
	pos  int
}

func errAt(pos int, format string, args ...any) error {
	return &grammar.Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func isNameChar(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// lex splits a grammar into tokens; comments (// and #) are dropped.
func lex(src string) ([]token, error) {
	var out []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '\n':
			out = append(out, token{k: tNewline, pos: i})
			i++
		case c == '#' || c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"':
			start := i
			i++
			var b strings.Builder
			for {
				if i >= len(src) || src[i] == '\n' {
					return nil, errAt(start, "this string is never closed")
				}
				if src[i] == '"' {
					i++
					break
				}
				if src[i] == '\\' {
					r, n, err := unescape(src, i)
					if err != nil {
						return nil, err
					}
					b.WriteRune(r)
					i += n
					continue
				}
				b.WriteByte(src[i])
				i++
			}
			t := token{k: tString, text: b.String(), pos: start}
			if i < len(src) && src[i] == 'i' && (i+1 >= len(src) || !isNameChar(src[i+1])) {
				t.flag = "i"
				i++
			}
			out = append(out, t)
		case c == '/':
			start := i
			i++
			for {
				if i >= len(src) || src[i] == '\n' {
					return nil, errAt(start, "this regular expression is never closed")
				}
				if src[i] == '\\' && i+1 < len(src) {
					i += 2
					continue
				}
				if src[i] == '/' {
					break
				}
				i++
			}
			t := token{k: tRegex, text: strings.ReplaceAll(src[start+1:i], `\/`, `/`), pos: start}
			i++
			for i < len(src) && strings.IndexByte("imsulx", src[i]) >= 0 {
				t.flag += string(src[i])
				i++
			}
			out = append(out, t)
		case c == '%':
			start := i
			i++
			for i < len(src) && isNameChar(src[i]) {
				i++
			}
			out = append(out, token{k: tDirective, text: src[start:i], pos: start})
		case c == '-' && i+1 < len(src) && src[i+1] == '>':
			out = append(out, token{k: tArrow, pos: i})
			i += 2
		case c == '.' && i+1 < len(src) && src[i+1] == '.':
			out = append(out, token{k: tDotDot, pos: i})
			i += 2
		case '0' <= c && c <= '9':
			start := i
			for i < len(src) && '0' <= src[i] && src[i] <= '9' {
				i++
			}
			out = append(out, token{k: tNumber, text: src[start:i], pos: start})
		case isNameChar(c) || (c == '?' || c == '!') && i+1 < len(src) && isNameChar(src[i+1]) && (len(out) == 0 || out[len(out)-1].k == tNewline):
			start := i
			i++
			for i < len(src) && isNameChar(src[i]) {
				i++
			}
			out = append(out, token{k: tName, text: strings.TrimLeft(src[start:i], "?!"), pos: start})
		default:
			k, ok := map[byte]kind{':': tColon, '|': tPipe, '(': tLPar, ')': tRPar, '[': tLSqb, ']': tRSqb,
				'?': tOp, '*': tOp, '+': tOp, '~': tTilde, ',': tComma, '.': tDot}[c]
			if !ok {
				return nil, errAt(i, "unexpected %q", c)
			}
			out = append(out, token{k: k, text: string(c), pos: i})
			i++
		}
	}
	return append(out, token{k: tNewline, pos: len(src)}), nil
}

// unescape reads the escape at src[i] (a backslash) of a string literal.
func unescape(src string, i int) (rune, int, error) {
	if i+1 >= len(src) {
		return 0, 0, errAt(i, "a backslash ends the grammar")
	}
	switch c := src[i+1]; c {
	case 'n':
		return '\n', 2, nil
	case 't':
		return '\t', 2, nil
	case 'r':
		return '\r', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'v':
		return '\v', 2, nil
	case '0':
		return 0, 2, nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if i+2+n > len(src) {
			return 0, 0, errAt(i, "\\%c needs %d hex digits", c, n)
		}
		v, err := strconv.ParseUint(src[i+2:i+2+n], 16, 32)
		if err != nil || v > unicode.MaxRune {
			return 0, 0, errAt(i, "\\%c needs %d hex digits", c, n)
		}
		return rune(v), 2 + n, nil
	}
	r, n := utf8.DecodeRuneInString(src[i+1:])
	return r, 1 + n, nil
}

type def struct {
	name string
	pos  int
	body *regex.Node
}

type parser struct {
	src     string
	toks    []token
	i       int
	depth   int
	rules   []def
	terms   map[string]*regex.Node // terminals, as written (references unresolved)
	termPos map[string]int
	order   []string // terminals in definition order
	ignore  []*regex.Node
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) atEnd() bool { return p.i >= len(p.toks)-1 }

// skipNewlines passes blank lines.
func (p *parser) skipNewlines() {
	for !p.atEnd() && p.peek().k == tNewline {
		p.i++
	}
}

// continues reports whether the definition goes on past the newline at
// p.i: the next non-blank line starts with |.
func (p *parser) continues() bool {
	j := p.i
	for j < len(p.toks)-1 && p.toks[j].k == tNewline {
		j++
	}
	return p.toks[j].k == tPipe
}

func isTerminal(name string) bool {
	n := strings.TrimLeft(name, "_")
	return n != "" && strings.ToUpper(n) == n && n[0] >= 'A' && n[0] <= 'Z'
}

func (p *parser) definitions() error {
	for {
		p.skipNewlines()
		if p.atEnd() {
			return nil
		}
		t := p.next()
		switch t.k {
		case tDirective:
			if err := p.directive(t); err != nil {
				return err
			}
			continue
		case tName:
		default:
			return errAt(t.pos, "expected a rule or terminal definition")
		}
		if p.peek().k == tDot { // priority
			p.next()
			if p.next().k != tNumber {
				return errAt(t.pos, "expected a priority number after %s.", t.text)
			}
		}
		if p.peek().k == tLPar || p.peek().k == 0 && p.peek().text == "{" {
			return errAt(t.pos, "templates are not supported")
		}
		if c := p.next(); c.k != tColon {
			return errAt(c.pos, "expected : after %q", t.text)
		}
		body, err := p.expansions(true)
		if err != nil {
			return err
		}
		if isTerminal(t.text) {
			if _, dup := p.terms[t.text]; dup {
				return errAt(t.pos, "terminal %q is defined twice", t.text)
			}
			p.terms[t.text], p.termPos[t.text] = body, t.pos
			p.order = append(p.order, t.text)
		} else {
			p.rules = append(p.rules, def{t.text, t.pos, body})
		}
	}
}

func (p *parser) directive(t token) error {
	switch t.text {
	case "%import":
		mod := p.next()
		if mod.k != tName {
			return errAt(mod.pos, "expected a module after %%import")
		}
		module := mod.text
		var names, aliases []string
		for p.peek().k == tDot {
			p.next()
			n := p.next()
			if n.k != tName {
				return errAt(n.pos, "expected a name in %%import")
			}
			module += "." + n.text
		}
		switch {
		case p.peek().k == tLPar:
			p.next()
			for p.peek().k != tRPar {
				if p.atEnd() {
					return errAt(mod.pos, "this %%import ( is never closed")
				}
				n := p.next()
				if n.k == tComma {
					continue
				}
				if n.k != tName {
					return errAt(n.pos, "expected a name in %%import ( )")
				}
				names, aliases = append(names, n.text), append(aliases, n.text)
			}
			p.next()
		default:
			i := strings.LastIndexByte(module, '.')
			if i < 0 {
				return errAt(mod.pos, "%%import needs module.NAME")
			}
			names, module = []string{module[i+1:]}, module[:i]
			aliases = names
			if p.peek().k == tArrow {
				p.next()
				a := p.next()
				if a.k != tName {
					return errAt(a.pos, "expected a name after ->")
				}
				aliases = []string{a.text}
			}
		}
		if module != "common" {
			return errAt(mod.pos, "only %%import common.NAME is supported, not %q", module)
		}
		for k, n := range names {
			re, ok := common[n]
			if !ok {
				return errAt(mod.pos, "common has no terminal %q", n)
			}
			node, err := regex.Parse(re, false)
			if err != nil {
				return err
			}
			if _, dup := p.terms[aliases[k]]; !dup {
				p.terms[aliases[k]], p.termPos[aliases[k]] = node, t.pos
				p.order = append(p.order, aliases[k])
			}
		}
	case "%ignore":
		body, err := p.expansions(false)
		if err != nil {
			return err
		}
		p.ignore = append(p.ignore, body)
	default:
		return errAt(t.pos, "%s is not supported (only %%import and %%ignore)", t.text)
	}
	if t := p.peek(); t.k != tNewline {
		return errAt(t.pos, "unexpected text after %s", t.text)
	}
	return nil
}

// expansions parses alternatives up to the end of the definition (top) or
// of the group.
func (p *parser) expansions(top bool) (*regex.Node, error) {
	var alts []*regex.Node
	for {
		seq, err := p.sequence(top)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if top && p.peek().k == tNewline && p.continues() {
			p.skipNewlines()
		}
		if p.peek().k != tPipe {
			return regex.Alt(alts...), nil
		}
		p.next()
	}
}

func (p *parser) sequence(top bool) (*regex.Node, error) {
	var items []*regex.Node
	for {
		t := p.peek()
		if !top && t.k == tNewline && !p.atEnd() {
			p.next() // groups may span lines
			continue
		}
		switch t.k {
		case tNewline, tPipe, tRPar, tRSqb:
			if len(items) == 0 {
				return &regex.Node{Op: regex.OpEmpty, Pos: t.pos}, nil
			}
			return regex.Concat(items...), nil
		case tArrow: // an alias names the tree node only
			p.next()
			if a := p.next(); a.k != tName {
				return nil, errAt(a.pos, "expected a name after ->")
			}
			continue
		}
		item, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
}

func (p *parser) item() (*regex.Node, error) {
	t := p.next()
	var n *regex.Node
	switch t.k {
	case tString:
		n = regex.Lit(t.text)
		if t.text == "" {
			n = &regex.Node{Op: regex.OpEmpty}
		}
		if p.peek().k == tDotDot {
			p.next()
			hi := p.next()
			lo, _ := utf8.DecodeRuneInString(t.text)
			h, _ := utf8.DecodeRuneInString(hi.text)
			if hi.k != tString || utf8.RuneCountInString(t.text) != 1 || utf8.RuneCountInString(hi.text) != 1 || h < lo {
				return nil, errAt(t.pos, "a range is two one-character strings, low first")
			}
			n = &regex.Node{Op: regex.OpClass, Ranges: []rune{lo, h}}
		} else if t.flag == "i" {
			var err error
			if n, err = regex.Parse("(?i)"+quoteMeta(t.text), false); err != nil {
				return nil, errAt(t.pos, "%v", err)
			}
		}
	case tRegex:
		flags := ""
		for _, f := range t.flag {
			switch f {
			case 'i', 's':
				flags += string(f)
			case 'u', 'l':
			default:
				return nil, errAt(t.pos, "the regular expression flag %c is not supported", f)
			}
		}
		pat := t.text
		if flags != "" {
			pat = "(?" + flags + ")" + pat
		}
		var err error
		if n, err = regex.Parse(pat, false); err != nil {
			if re, ok := err.(*regex.Error); ok && re.Pos >= 0 {
				return nil, errAt(t.pos+1+max(0, re.Pos-len(pat)+len(t.text)), "%s", re.Msg)
			}
			return nil, errAt(t.pos, "%v", err)
		}
	case tName:
		n = &regex.Node{Op: regex.OpRef, Name: t.text}
	case tLPar, tLSqb:
		if p.depth >= MaxNesting {
			return nil, errAt(t.pos, "groups nest more than %d deep", MaxNesting)
		}
		p.depth++
		inner, err := p.expansions(false)
		if err != nil {
			return nil, err
		}
		p.depth--
		closer := tRPar
		if t.k == tLSqb {
			closer = tRSqb
		}
		if c := p.next(); c.k != closer {
			return nil, errAt(t.pos, "this %s is never closed", map[kind]string{tLPar: "(", tLSqb: "["}[t.k])
		}
		n = inner
		if t.k == tLSqb {
			n = regex.Repeat(inner, 0, 1)
		}
	default:
		return nil, errAt(t.pos, "unexpected %q", p.src[t.pos:min(len(p.src), t.pos+8)])
	}
	n.Pos = t.pos
	for {
		switch t := p.peek(); t.k {
		case tOp:
			p.next()
			switch t.text {
			case "?":
				n = regex.Repeat(n, 0, 1)
			case "*":
				n = regex.Repeat(n, 0, -1)
			case "+":
				n = regex.Repeat(n, 1, -1)
			}
		case tTilde:
			p.next()
			lo, err := p.count()
			if err != nil {
				return nil, err
			}
			hi := lo
			if p.peek().k == tDotDot {
				p.next()
				if hi, err = p.count(); err != nil {
					return nil, err
				}
			}
			if hi < lo {
				return nil, errAt(t.pos, "repetition ~%d..%d: the maximum is below the minimum", lo, hi)
			}
			n = regex.Repeat(n, lo, hi)
		default:
			return n, nil
		}
		n.Pos = t.pos
	}
}

func (p *parser) count() (int, error) {
	t := p.next()
	v, err := strconv.Atoi(t.text)
	if t.k != tNumber || err != nil || v > 1000 {
		return 0, errAt(t.pos, "expected a repetition count (at most 1000)")
	}
	return v, nil
}

func quoteMeta(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// build inlines the terminals (which cannot recurse), inserts the ignored
// terminals between the items of rules, and compiles.
func (p *parser) build() (*grammar.Grammar, error) {
	resolved := map[string]*regex.Node{}
	visiting := map[string]bool{}
	var resolve func(name string, at int) (*regex.Node, error)
	var inline func(n *regex.Node) (*regex.Node, error)
	resolve = func(name string, at int) (*regex.Node, error) {
		if n, ok := resolved[name]; ok {
			return n, nil
		}
		body, ok := p.terms[name]
		if !ok {
			return nil, errAt(at, "terminal %q is not defined (import it with %%import common.%s?)", name, name)
		}
		if visiting[name] {
			return nil, errAt(p.termPos[name], "terminal %q refers to itself; terminals must be regular", name)
		}
		visiting[name] = true
		n, err := inline(body)
		if err != nil {
			return nil, err
		}
		visiting[name] = false
		resolved[name] = n
		return n, nil
	}
	inline = func(n *regex.Node) (*regex.Node, error) {
		if n.Op == regex.OpRef {
			if !isTerminal(n.Name) {
				return n, nil
			}
			return resolve(n.Name, n.Pos)
		}
		if len(n.Subs) == 0 {
			return n, nil
		}
		c := *n
		c.Subs = make([]*regex.Node, len(n.Subs))
		for i, s := range n.Subs {
			var err error
			if c.Subs[i], err = inline(s); err != nil {
				return nil, err
			}
		}
		return &c, nil
	}
	for _, name := range p.order {
		if _, err := resolve(name, p.termPos[name]); err != nil {
			return nil, err
		}
		if t := resolved[name]; t.HasRef() {
			return nil, errAt(p.termPos[name], "terminal %q refers to a rule", name)
		}
	}
	var ign *regex.Node
	if len(p.ignore) > 0 {
		var alts []*regex.Node
		for _, n := range p.ignore {
			r, err := inline(n)
			if err != nil {
				return nil, err
			}
			alts = append(alts, r)
		}
		ign = regex.Repeat(regex.Alt(alts...), 0, -1)
	}
	rules := make([]grammar.Rule, 0, len(p.rules))
	for _, d := range p.rules {
		body, err := inline(d.body)
		if err != nil {
			return nil, err
		}
		if ign != nil {
			body = withIgnore(body, ign)
			if d.name == "start" {
				body = regex.Concat(ign, body, ign)
			}
		}
		body.Pos = d.pos
		rules = append(rules, grammar.Rule{Name: d.name, Body: body})
	}
	if len(rules) == 0 {
		return nil, errAt(-1, "the grammar has no rules")
	}
	return grammar.Build(rules, "start")
}

// withIgnore puts ign between the items of every sequence of a rule (not
// inside terminals, which were inlined as reference-free nodes).
func withIgnore(n *regex.Node, ign *regex.Node) *regex.Node {
	if !n.HasRef() {
		return n
	}
	c := *n
	c.Subs = make([]*regex.Node, 0, 2*len(n.Subs))
	for i, s := range n.Subs {
		if n.Op == regex.OpConcat && i > 0 {
			c.Subs = append(c.Subs, ign)
		}
		c.Subs = append(c.Subs, withIgnore(s, ign))
	}
	if n.Op == regex.OpRepeat {
		// Between repetitions too: x* becomes (x ign)* around the body.
		c.Subs = []*regex.Node{regex.Concat(withIgnore(n.Subs[0], ign), ign)}
	}
	return &c
}
