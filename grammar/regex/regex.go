// Package regex compiles regular expressions, in the syntax JSON Schema's
// pattern and vLLM's structured_outputs take (ECMAScript and Python, which
// agree on all but a few escapes), into byte-level DFAs: one table lookup
// a byte, so no pattern costs more than linear time, and every state the
// DFA keeps can still reach a match (dead states are pruned), so a
// generation it constrains never reaches a dead end.
//
// Patterns parse through Go's regexp/syntax (Perl flags) after ECMAScript's
// \uXXXX and \u{...} and Python's \Z are rewritten to its spelling.
// Lookaround, backreferences, word boundaries and multi-line anchors
// cannot be written as a finite automaton and are refused with an *Error
// naming the position. Classes, bounded quantifiers (at most 1000, as RE2),
// alternation, \d \w \s, \p{...} Unicode classes and (?i) are supported.
//
// The same Node type carries the regular parts of grammars (package
// grammar): GBNF and Lark parsers build Nodes, and Ref marks a rule
// reference, which Compile refuses.
package regex

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
)

// Op is the kind of a Node.
type Op uint8

// The Node kinds.
const (
	OpEmpty  Op = iota // the empty string
	OpNone             // nothing
	OpLit              // the bytes Lit
	OpClass            // one character of Ranges
	OpConcat           // Subs in sequence
	OpAlt              // one of Subs
	OpRepeat           // Subs[0], Min to Max times (Max < 0: unbounded)
	OpRef              // the grammar rule Name
)

// Node is a regular expression (or, with OpRef, a grammar rule's body).
type Node struct {
	Op       Op
	Lit      []byte
	Ranges   []rune // pairs lo, hi, inclusive
	Subs     []*Node
	Min, Max int
	Name     string
	Pos      int // where the node starts in its source, for errors
}

// Lit returns the node matching s exactly.
func Lit(s string) *Node { return &Node{Op: OpLit, Lit: []byte(s)} }

// Concat returns the node matching subs in sequence.
func Concat(subs ...*Node) *Node {
	if len(subs) == 1 {
		return subs[0]
	}
	return &Node{Op: OpConcat, Subs: subs}
}

// Alt returns the node matching any of subs.
func Alt(subs ...*Node) *Node {
	if len(subs) == 1 {
		return subs[0]
	}
	return &Node{Op: OpAlt, Subs: subs}
}

// Repeat returns sub repeated min to max times (max < 0: unbounded).
func Repeat(sub *Node, min, max int) *Node {
	return &Node{Op: OpRepeat, Subs: []*Node{sub}, Min: min, Max: max}
}

// AnyChar matches one character (any Unicode scalar value).
func AnyChar() *Node { return &Node{Op: OpClass, Ranges: []rune{0, unicode.MaxRune}} }

// HasRef reports whether n refers to a grammar rule anywhere.
func (n *Node) HasRef() bool {
	if n.Op == OpRef {
		return true
	}
	for _, s := range n.Subs {
		if s.HasRef() {
			return true
		}
	}
	return false
}

// Error is a pattern that does not compile: Pos is the byte offset in the
// pattern where the problem is (-1 when it concerns the whole pattern).
type Error struct {
	Pos int
	Msg string
}

func (e *Error) Error() string {
	if e.Pos < 0 {
		return e.Msg
	}
	return fmt.Sprintf("at byte %d: %s", e.Pos, e.Msg)
}

// MaxPatternBytes bounds a pattern's length.
const MaxPatternBytes = 1 << 16

// Parse parses a pattern. With search, the pattern matches text that
// contains a match (JSON Schema's pattern: unanchored unless it starts with
// ^ or ends with $); otherwise it must match the whole text (vLLM's regex),
// and edge anchors are redundant.
func Parse(pattern string, search bool) (*Node, error) {
	if len(pattern) > MaxPatternBytes {
		return nil, &Error{-1, fmt.Sprintf("the pattern is %d bytes; at most %d are allowed", len(pattern), MaxPatternBytes)}
	}
	src, back := rewrite(pattern)
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		pos := -1
		msg := err.Error()
		if se, ok := err.(*syntax.Error); ok {
			msg = se.Code.String()
			if se.Expr != "" {
				msg += ": " + se.Expr
				if i := strings.Index(src, se.Expr); i >= 0 {
					pos = back(i)
				}
			}
			if se.Code == syntax.ErrInvalidPerlOp || se.Code == syntax.ErrMissingRepeatArgument && strings.HasPrefix(se.Expr, "?") {
				msg += " (lookaround and other Perl-only groups cannot be enforced)"
			}
		}
		return nil, &Error{pos, msg}
	}
	var branches []*syntax.Regexp
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	} else {
		branches = []*syntax.Regexp{re}
	}
	out := make([]*Node, 0, len(branches))
	for _, b := range branches {
		subs := []*syntax.Regexp{b}
		if b.Op == syntax.OpConcat {
			subs = b.Sub
		}
		begin, end := false, false
		if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
			begin, subs = true, subs[1:]
		}
		if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
			end, subs = true, subs[:len(subs)-1]
		}
		var parts []*Node
		if search && !begin {
			parts = append(parts, Repeat(AnyChar(), 0, -1))
		}
		for _, s := range subs {
			n, err := convert(s, pattern)
			if err != nil {
				return nil, err
			}
			parts = append(parts, n)
		}
		if search && !end {
			parts = append(parts, Repeat(AnyChar(), 0, -1))
		}
		if len(parts) == 0 {
			out = append(out, &Node{Op: OpEmpty})
		} else {
			out = append(out, Concat(parts...))
		}
	}
	return Alt(out...), nil
}

// rewrite turns ECMAScript's \uXXXX and \u{X...} and Python's \Z into Go's
// \x{...} and \z, and returns a map from offsets in the result back to the
// pattern.
func rewrite(p string) (string, func(int) int) {
	if !strings.Contains(p, `\u`) && !strings.Contains(p, `\Z`) {
		return p, func(i int) int { return i }
	}
	var b strings.Builder
	var marks [][2]int // (offset in result, offset in p) at each rewrite
	for i := 0; i < len(p); i++ {
		if p[i] != '\\' || i+1 >= len(p) {
			b.WriteByte(p[i])
			continue
		}
		switch c := p[i+1]; {
		case c == 'Z':
			marks = append(marks, [2]int{b.Len(), i})
			b.WriteString(`\z`)
			i++
		case c == 'u' && i+2 < len(p) && p[i+2] == '{':
			if j := strings.IndexByte(p[i:], '}'); j > 0 {
				marks = append(marks, [2]int{b.Len(), i})
				b.WriteString(`\x` + p[i+2:i+j+1])
				i += j
				continue
			}
			b.WriteString(p[i : i+2])
			i++
		case c == 'u' && i+6 <= len(p) && isHex(p[i+2:i+6]):
			marks = append(marks, [2]int{b.Len(), i})
			b.WriteString(`\x{` + p[i+2:i+6] + `}`)
			i += 5
		default:
			b.WriteString(p[i : i+2])
			i++
		}
	}
	return b.String(), func(off int) int {
		back := off
		for _, m := range marks {
			if m[0] <= off {
				back = m[1] + (off - m[0])
			}
		}
		return min(back, len(p))
	}
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// convert turns a parsed pattern into a Node; anchors and assertions that
// an automaton over the text cannot check are errors.
func convert(re *syntax.Regexp, pattern string) (*Node, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return &Node{Op: OpNone}, nil
	case syntax.OpEmptyMatch:
		return &Node{Op: OpEmpty}, nil
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase == 0 {
			return &Node{Op: OpLit, Lit: []byte(string(re.Rune))}, nil
		}
		subs := make([]*Node, len(re.Rune))
		for i, r := range re.Rune {
			rs := []rune{r, r}
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				rs = append(rs, f, f)
			}
			subs[i] = &Node{Op: OpClass, Ranges: rs}
		}
		return Concat(subs...), nil
	case syntax.OpCharClass:
		return &Node{Op: OpClass, Ranges: re.Rune}, nil
	case syntax.OpAnyCharNotNL:
		return &Node{Op: OpClass, Ranges: []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}}, nil
	case syntax.OpAnyChar:
		return AnyChar(), nil
	case syntax.OpCapture:
		return convert(re.Sub[0], pattern)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := convert(re.Sub[0], pattern)
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return Repeat(sub, 0, -1), nil
		case syntax.OpPlus:
			return Repeat(sub, 1, -1), nil
		case syntax.OpQuest:
			return Repeat(sub, 0, 1), nil
		}
		return Repeat(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		subs := make([]*Node, len(re.Sub))
		for i, s := range re.Sub {
			n, err := convert(s, pattern)
			if err != nil {
				return nil, err
			}
			subs[i] = n
		}
		if re.Op == syntax.OpConcat {
			return &Node{Op: OpConcat, Subs: subs}, nil
		}
		return &Node{Op: OpAlt, Subs: subs}, nil
	}
	what := map[syntax.Op]string{
		syntax.OpBeginLine: "a line anchor (multi-line ^)", syntax.OpEndLine: "a line anchor (multi-line $)",
		syntax.OpBeginText: "an anchor ^ inside the pattern", syntax.OpEndText: "an anchor $ inside the pattern",
		syntax.OpWordBoundary: `a word boundary \b`, syntax.OpNoWordBoundary: `a word boundary \B`,
	}[re.Op]
	if what == "" {
		what = re.Op.String()
	}
	pos := strings.Index(pattern, re.String())
	return nil, &Error{pos, what + " cannot be enforced by a finite automaton; anchor only at the start or end"}
}
