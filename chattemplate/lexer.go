package chattemplate

import (
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind int

const (
	tokEOF tokKind = iota
	tokData
	tokBlockBegin
	tokBlockEnd
	tokVarBegin
	tokVarEnd
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

func (k tokKind) String() string {
	switch k {
	case tokEOF:
		return "end of template"
	case tokData:
		return "template data"
	case tokBlockBegin:
		return "begin of statement block"
	case tokBlockEnd:
		return "end of statement block"
	case tokVarBegin:
		return "begin of print statement"
	case tokVarEnd:
		return "end of print statement"
	case tokName:
		return "name"
	case tokString:
		return "string"
	case tokInt:
		return "integer"
	case tokFloat:
		return "float"
	}
	return "operator"
}

type token struct {
	kind tokKind
	val  string // text for data, names, operators; decoded text for strings
	num  any    // int64, *big.Int or float64 for number tokens
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tokName, tokOp:
		return "'" + t.val + "'"
	}
	return t.kind.String()
}

// lexer splits a template into tokens the way jinja2.lexer.Lexer does with
// trim_blocks=True and lstrip_blocks=True.
type lexer struct {
	src          string
	pos          int
	line         int
	toks         []token
	lineStarting bool // the previous match ended with a newline
}

// operators, longest first.
var operators = []string{"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// normalizeNewlines turns \r\n and \r into \n and drops one trailing newline
// (keep_trailing_newline=False), as Jinja does before lexing.
func normalizeNewlines(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.TrimSuffix(s, "\n")
}

func tokenize(src string) ([]token, error) {
	lx := &lexer{src: normalizeNewlines(src), line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tokEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return syntaxErrorf(lx.line, format, args...)
}

func (lx *lexer) emitData(text string) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tokData, val: text, line: lx.line})
	}
}

// advance moves past n bytes, counting lines.
func (lx *lexer) advance(n int) string {
	s := lx.src[lx.pos : lx.pos+n]
	lx.line += strings.Count(s, "\n")
	lx.pos += n
	return s
}

// findTag returns the index of the next "{%", "{{" or "{#" at or after from.
func (lx *lexer) findTag(from int) int {
	for i := from; i < len(lx.src)-1; i++ {
		if lx.src[i] == '{' {
			switch lx.src[i+1] {
			case '%', '{', '#':
				return i
			}
		}
	}
	return -1
}

// stripBefore applies the opening tag's whitespace control to the text
// before it: "-" strips all whitespace, otherwise lstrip_blocks strips the
// spaces before a block or comment tag that starts its line.
func (lx *lexer) stripBefore(text string, sign byte, isVar bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, pyIsSpace)
	}
	if sign != '+' && !isVar {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || lx.lineStarting {
			rest := text[lpos:]
			if rest != "" && strings.IndexFunc(rest, func(r rune) bool { return !pyIsSpace(r) }) < 0 {
				return text[:lpos]
			}
		}
	}
	return text
}

// endTag matches a closing "%}", "}}" or "#}" at pos with its whitespace
// control: "-" eats all following whitespace, "+" nothing, and a plain block
// or comment end one newline (trim_blocks). It returns the length consumed.
func (lx *lexer) endTag(pos int, closing string, trim bool) (int, bool) {
	s := lx.src[pos:]
	switch {
	case strings.HasPrefix(s, "+"+closing):
		return 1 + len(closing), true
	case strings.HasPrefix(s, "-"+closing):
		n := 1 + len(closing)
		rest := s[n:]
		return n + len(rest) - len(strings.TrimLeftFunc(rest, pyIsSpace)), true
	case strings.HasPrefix(s, closing):
		n := len(closing)
		if trim && strings.HasPrefix(s[n:], "\n") {
			n++
		}
		return n, true
	}
	return 0, false
}

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		i := lx.findTag(lx.pos)
		if i < 0 {
			lx.emitData(lx.advance(len(lx.src) - lx.pos))
			return nil
		}
		kind := lx.src[i+1]
		var sign byte
		if i+2 < len(lx.src) && (lx.src[i+2] == '-' || lx.src[i+2] == '+') {
			sign = lx.src[i+2]
		}
		text := lx.src[lx.pos:i]
		if kind == '%' {
			if n, ok := lx.matchRawBegin(i); ok {
				lx.emitData(lx.stripBefore(text, sign, false))
				lx.advance(i - lx.pos)
				lx.advance(n)
				lx.lineStarting = strings.HasSuffix(lx.src[:lx.pos], "\n")
				if err := lx.raw(); err != nil {
					return err
				}
				continue
			}
		}
		lx.emitData(lx.stripBefore(text, sign, kind == '{'))
		lx.advance(i - lx.pos)
		open := 2
		if sign != 0 {
			open = 3
		}
		lx.advance(open)
		switch kind {
		case '#':
			if err := lx.comment(); err != nil {
				return err
			}
		case '%':
			lx.toks = append(lx.toks, token{kind: tokBlockBegin, line: lx.line})
			if err := lx.inside("%}", tokBlockEnd, true); err != nil {
				return err
			}
		case '{':
			lx.toks = append(lx.toks, token{kind: tokVarBegin, line: lx.line})
			if err := lx.inside("}}", tokVarEnd, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchRawBegin matches "{%[-+]? raw [-]?%}" at i.
func (lx *lexer) matchRawBegin(i int) (int, bool) {
	j := i + 2
	if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
		j++
	}
	j = skipSpace(lx.src, j)
	if !strings.HasPrefix(lx.src[j:], "raw") {
		return 0, false
	}
	j += 3
	k := skipSpace(lx.src, j)
	if k == j && k < len(lx.src) && isIdentChar(rune(lx.src[k])) {
		return 0, false
	}
	j = k
	if strings.HasPrefix(lx.src[j:], "-%}") {
		j += 3
		return skipSpace(lx.src, j) - i, true
	}
	if strings.HasPrefix(lx.src[j:], "%}") {
		return j + 2 - i, true
	}
	return 0, false
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// raw copies everything up to "{% endraw %}" as data.
func (lx *lexer) raw() error {
	for from := lx.pos; ; {
		i := strings.Index(lx.src[from:], "{%")
		if i < 0 {
			return lx.errorf("Missing end of raw directive")
		}
		i += from
		j := i + 2
		var sign byte
		if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
			sign = lx.src[j]
			j++
		}
		j = skipSpace(lx.src, j)
		if !strings.HasPrefix(lx.src[j:], "endraw") {
			from = i + 2
			continue
		}
		j = skipSpace(lx.src, j+len("endraw"))
		n, ok := lx.endTag(j, "%}", true)
		if !ok {
			from = i + 2
			continue
		}
		text := lx.stripBefore(lx.src[lx.pos:i], sign, false)
		lx.emitData(text)
		end := lx.advance(j + n - lx.pos)
		lx.lineStarting = strings.HasSuffix(end, "\n")
		return nil
	}
}

func (lx *lexer) comment() error {
	i := strings.Index(lx.src[lx.pos:], "#}")
	if i < 0 {
		return lx.errorf("Missing end of comment tag")
	}
	i += lx.pos
	if i > lx.pos && (lx.src[i-1] == '-' || lx.src[i-1] == '+') {
		i--
	}
	lx.advance(i - lx.pos)
	n, _ := lx.endTag(lx.pos, "#}", true)
	end := lx.advance(n)
	lx.lineStarting = strings.HasSuffix(end, "\n")
	return nil
}

// inside lexes the expression tokens of a block or print tag up to its end.
func (lx *lexer) inside(closing string, endKind tokKind, trim bool) error {
	var balance []byte
	for {
		if lx.pos >= len(lx.src) {
			return lx.errorf("unexpected end of template, expected '%s'", closing)
		}
		if len(balance) == 0 {
			if n, ok := lx.endTag(lx.pos, closing, trim); ok {
				lx.toks = append(lx.toks, token{kind: endKind, line: lx.line})
				end := lx.advance(n)
				lx.lineStarting = strings.HasSuffix(end, "\n")
				return nil
			}
		}
		r, size := utf8.DecodeRuneInString(lx.src[lx.pos:])
		switch {
		case pyIsSpace(r):
			lx.advance(size)
		case r >= '0' && r <= '9':
			if err := lx.number(); err != nil {
				return err
			}
		case isIdentStart(r):
			j := lx.pos + size
			for j < len(lx.src) {
				r2, n2 := utf8.DecodeRuneInString(lx.src[j:])
				if !isIdentChar(r2) {
					break
				}
				j += n2
			}
			line := lx.line
			lx.toks = append(lx.toks, token{kind: tokName, val: lx.advance(j - lx.pos), line: line})
		case r == '\'' || r == '"':
			if err := lx.str(byte(r)); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(lx.src[lx.pos:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return lx.errorf("unexpected char %q at %d", r, lx.pos)
			}
			switch op {
			case "(", "[", "{":
				balance = append(balance, map[string]byte{"(": ')', "[": ']', "{": '}'}[op])
			case ")", "]", "}":
				if len(balance) == 0 {
					return lx.errorf("unexpected '%s'", op)
				}
				if want := balance[len(balance)-1]; want != op[0] {
					return lx.errorf("unexpected '%s', expected '%c'", op, want)
				}
				balance = balance[:len(balance)-1]
			}
			line := lx.line
			lx.toks = append(lx.toks, token{kind: tokOp, val: lx.advance(len(op)), line: line})
		}
	}
}

func isIdentStart(r rune) bool {
	return r == '_' || unicode.IsLetter(r)
}

func isIdentChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r)
}

// number lexes an integer (decimal, 0x, 0o, 0b, with "_" separators) or a
// float (digits with a fraction and/or exponent).
func (lx *lexer) number() error {
	s := lx.src[lx.pos:]
	line := lx.line
	digits := func(i int, ok func(byte) bool) int {
		// (_?d)* after a first digit, as Jinja's patterns allow.
		for i < len(s) {
			if ok(s[i]) {
				i++
			} else if s[i] == '_' && i+1 < len(s) && ok(s[i+1]) {
				i += 2
			} else {
				break
			}
		}
		return i
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' {
		base, ok := 0, func(byte) bool { return false }
		switch s[1] {
		case 'x', 'X':
			base, ok = 16, func(c byte) bool { return isDec(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
		case 'o', 'O':
			base, ok = 8, func(c byte) bool { return c >= '0' && c <= '7' }
		case 'b', 'B':
			base, ok = 2, func(c byte) bool { return c == '0' || c == '1' }
		}
		if base != 0 {
			j := 2
			if j < len(s) && s[j] == '_' {
				j++
			}
			if j < len(s) && ok(s[j]) {
				end := digits(j, ok)
				b, good := new(big.Int).SetString(strings.ReplaceAll(s[2:end], "_", ""), base)
				if !good {
					return lx.errorf("invalid integer literal %q", s[:end])
				}
				lx.toks = append(lx.toks, token{kind: tokInt, val: s[:end], num: normBig(b), line: line})
				lx.advance(end)
				return nil
			}
		}
	}
	end := digits(1, isDec)
	isFloatLit := false
	if end+1 < len(s) && s[end] == '.' && isDec(s[end+1]) {
		end = digits(end+2, isDec)
		isFloatLit = true
	}
	if end < len(s) && (s[end] == 'e' || s[end] == 'E') {
		j := end + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDec(s[j]) {
			end = digits(j+1, isDec)
			isFloatLit = true
		}
	}
	lit := s[:end]
	clean := strings.ReplaceAll(lit, "_", "")
	if isFloatLit {
		f, err := strconv.ParseFloat(clean, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			return lx.errorf("invalid float literal %q", lit)
		}
		lx.toks = append(lx.toks, token{kind: tokFloat, val: lit, num: f, line: line})
	} else {
		if len(clean) > 1 && clean[0] == '0' && strings.Trim(clean, "0") != "" {
			// Python rejects leading zeros; Jinja lexes "0" then the rest.
			end = 1
			lit, clean = "0", "0"
		}
		b, ok := new(big.Int).SetString(clean, 10)
		if !ok {
			return lx.errorf("invalid integer literal %q", lit)
		}
		lx.toks = append(lx.toks, token{kind: tokInt, val: lit, num: normBig(b), line: line})
	}
	lx.advance(end)
	return nil
}

// str lexes a quoted string and decodes its Python escape sequences.
func (lx *lexer) str(quote byte) error {
	s := lx.src
	j := lx.pos + 1
	for {
		if j >= len(s) {
			return lx.errorf("unexpected char %q at %d", rune(quote), lx.pos)
		}
		if s[j] == '\\' {
			j += 2
			continue
		}
		if s[j] == quote {
			break
		}
		j++
	}
	if j >= len(s) {
		return lx.errorf("unexpected char %q at %d", rune(quote), lx.pos)
	}
	line := lx.line
	body := s[lx.pos+1 : j]
	val, err := unescapePython(body)
	if err != nil {
		return lx.errorf("%s", err.Error())
	}
	lx.toks = append(lx.toks, token{kind: tokString, val: val, line: line})
	lx.advance(j + 1 - lx.pos)
	return nil
}

// unescapePython decodes the escapes of a Python "unicode-escape" string.
// Unknown escapes stay as written, as in Python.
func unescapePython(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			if c == '\\' {
				return "", errString("\\ at end of string")
			}
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", errString("truncated \\" + string(e) + " escape")
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", errString("truncated \\" + string(e) + " escape")
			}
			if v > unicode.MaxRune {
				return "", errString("illegal Unicode character")
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(v))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

type errString string

func (e errString) Error() string { return string(e) }
