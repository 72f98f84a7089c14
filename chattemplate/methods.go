package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// boundMethod is a Python method looked up on a value, e.g. s.startswith.
type boundMethod struct {
	recv any
	name string
}

// builtin is a global function or other Go-implemented callable.
type builtin struct {
	name string
	fn   func(ev *evaluator, a *callArgs) (any, error)
}

var strMethods = map[string]bool{
	"startswith": true, "endswith": true, "split": true, "rsplit": true, "strip": true,
	"lstrip": true, "rstrip": true, "upper": true, "lower": true, "title": true,
	"capitalize": true, "replace": true, "find": true, "rfind": true, "index": true,
	"rindex": true, "count": true, "join": true, "splitlines": true, "isdigit": true,
	"isalpha": true, "isalnum": true, "isspace": true, "isupper": true, "islower": true,
	"isnumeric": true, "isdecimal": true, "center": true, "ljust": true, "rjust": true,
	"zfill": true, "partition": true, "rpartition": true, "swapcase": true,
	"removeprefix": true, "removesuffix": true, "format": true, "casefold": true,
	"istitle": true, "isidentifier": true, "expandtabs": true, "encode": false,
}

var dictMethods = map[string]bool{"keys": true, "values": true, "items": true, "get": true, "copy": true}

var listMethods = map[string]bool{"index": true, "count": true, "copy": true}

// isMethod reports whether name is a safe method of obj's Python type.
func isMethod(obj any, name string) bool {
	switch obj.(type) {
	case string, markup:
		return strMethods[name]
	case *Object:
		return dictMethods[name]
	case []any:
		return listMethods[name]
	case tuple:
		return name == "index" || name == "count"
	}
	return false
}

// unsafeMethod reports methods that exist but that the immutable sandbox
// refuses because they modify their object.
func unsafeMethod(obj any, name string) bool {
	switch obj.(type) {
	case *Object:
		switch name {
		case "pop", "popitem", "setdefault", "update", "clear":
			return true
		}
	case []any:
		switch name {
		case "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse":
			return true
		}
	}
	return false
}

func argString(fname string, v any) (string, error) {
	s, ok := asString(v)
	if !ok {
		return "", typeErrorf("%s() argument must be str, not %s", fname, typeName(v))
	}
	return s, nil
}

// optChars reads the optional chars argument of strip-like methods.
func optChars(fname string, a *callArgs) (*string, error) {
	if len(a.pos) == 0 || a.pos[0] == nil {
		return nil, nil
	}
	s, err := argString(fname, a.pos[0])
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func callMethod(ev *evaluator, m *boundMethod, a *callArgs) (any, error) {
	switch recv := m.recv.(type) {
	case string:
		return strMethod(recv, m.name, a)
	case markup:
		v, err := strMethod(string(recv), m.name, a)
		if s, ok := v.(string); ok && err == nil {
			return markup(s), nil
		}
		return v, err
	case *Object:
		switch m.name {
		case "keys", "values", "items":
			return dictView{kind: m.name, obj: recv}, nil
		case "copy":
			o := NewObject()
			for _, k := range recv.Keys() {
				v, _ := recv.Get(k)
				o.Set(k, v)
			}
			return o, nil
		case "get":
			p, err := a.bind("get", []string{"key", "default"}, []any{required, nil})
			if err != nil {
				return nil, err
			}
			if k, ok := asString(p[0]); ok {
				if v, ok := recv.Get(k); ok {
					return v, nil
				}
			}
			return p[1], nil
		}
	case []any, tuple:
		items, _ := seqOf(recv)
		switch m.name {
		case "copy":
			return append([]any{}, items...), nil
		case "count":
			if len(a.pos) != 1 {
				return nil, typeErrorf("count() takes exactly one argument")
			}
			n := int64(0)
			for _, it := range items {
				if pyEqual(it, a.pos[0]) {
					n++
				}
			}
			return n, nil
		case "index":
			if len(a.pos) < 1 {
				return nil, typeErrorf("index expected at least 1 argument, got 0")
			}
			for i, it := range items {
				if pyEqual(it, a.pos[0]) {
					return int64(i), nil
				}
			}
			return nil, valueErrorf("%s is not in list", pyRepr(a.pos[0]))
		}
	}
	return nil, typeErrorf("'%s' object has no callable attribute '%s'", typeName(m.recv), m.name)
}

func strMethod(s, name string, a *callArgs) (any, error) {
	switch name {
	case "startswith", "endswith":
		if len(a.pos) < 1 {
			return nil, typeErrorf("%s() takes at least 1 argument (0 given)", name)
		}
		var prefixes []any
		switch p := a.pos[0].(type) {
		case tuple:
			prefixes = p
		default:
			prefixes = []any{p}
		}
		for _, p := range prefixes {
			ps, ok := asString(p)
			if !ok {
				return nil, typeErrorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			if name == "startswith" && strings.HasPrefix(s, ps) || name == "endswith" && strings.HasSuffix(s, ps) {
				return true, nil
			}
		}
		return false, nil
	case "strip", "lstrip", "rstrip":
		chars, err := optChars(name, a)
		if err != nil {
			return nil, err
		}
		return pyStrip(s, chars, name != "rstrip", name != "lstrip"), nil
	case "split", "rsplit":
		p, err := a.bind(name, []string{"sep", "maxsplit"}, []any{nil, int64(-1)})
		if err != nil {
			return nil, err
		}
		maxsplit, ok := p[1].(int64)
		if !ok {
			return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(p[1]))
		}
		var parts []string
		if p[0] == nil {
			parts = splitWhitespace(s, int(maxsplit), name == "rsplit")
		} else {
			sep, err := argString(name, p[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, valueErrorf("empty separator")
			}
			switch {
			case maxsplit < 0:
				parts = strings.Split(s, sep)
			case name == "split":
				parts = strings.SplitN(s, sep, int(maxsplit)+1)
			default:
				parts = rsplitN(s, sep, int(maxsplit))
			}
		}
		out := make([]any, len(parts))
		for i, x := range parts {
			out[i] = x
		}
		return out, nil
	case "upper":
		return pyUpper(s), nil
	case "lower", "casefold":
		return pyLower(s), nil
	case "swapcase":
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "replace":
		p, err := a.bind(name, []string{"old", "new", "count"}, []any{required, required, int64(-1)})
		if err != nil {
			return nil, err
		}
		old, err := argString(name, p[0])
		if err != nil {
			return nil, err
		}
		nw, err := argString(name, p[1])
		if err != nil {
			return nil, err
		}
		n, _ := p[2].(int64)
		return strings.Replace(s, old, nw, int(n)), nil
	case "find", "rfind", "index", "rindex", "count":
		if len(a.pos) < 1 {
			return nil, typeErrorf("%s() takes at least 1 argument (0 given)", name)
		}
		sub, err := argString(name, a.pos[0])
		if err != nil {
			return nil, err
		}
		switch name {
		case "count":
			if sub == "" {
				return int64(len([]rune(s)) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		case "find", "index":
			i := strings.Index(s, sub)
			if i < 0 && name == "index" {
				return nil, valueErrorf("substring not found")
			}
			return runeIndex(s, i), nil
		default:
			i := strings.LastIndex(s, sub)
			if i < 0 && name == "rindex" {
				return nil, valueErrorf("substring not found")
			}
			return runeIndex(s, i), nil
		}
	case "join":
		if len(a.pos) != 1 {
			return nil, typeErrorf("join() takes exactly one argument")
		}
		items, err := iterate(a.pos[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			str, ok := asString(it)
			if !ok {
				return nil, typeErrorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = str
		}
		return strings.Join(parts, s), nil
	case "splitlines":
		var out []any = []any{}
		lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n"), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for _, l := range lines {
			out = append(out, l)
		}
		return out, nil
	case "isdigit", "isnumeric", "isdecimal":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }) < 0, nil
	case "isalpha":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) }) < 0, nil
	case "isalnum":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) < 0, nil
	case "isspace":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !pyIsSpace(r) }) < 0, nil
	case "isupper", "islower":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsLower(r) {
				cased = true
				if name == "isupper" && unicode.IsLower(r) || name == "islower" && unicode.IsUpper(r) {
					return false, nil
				}
			}
		}
		return cased, nil
	case "istitle":
		return s != "" && pyTitle(s) == s && strings.IndexFunc(s, unicode.IsLetter) >= 0, nil
	case "isidentifier":
		if s == "" {
			return false, nil
		}
		for i, r := range s {
			if i == 0 && !isIdentStart(r) || !isIdentChar(r) {
				return false, nil
			}
		}
		return true, nil
	case "center", "ljust", "rjust":
		p, err := a.bind(name, []string{"width", "fillchar"}, []any{required, " "})
		if err != nil {
			return nil, err
		}
		w, ok := p[0].(int64)
		fill, _ := asString(p[1])
		if !ok || len([]rune(fill)) != 1 {
			return nil, typeErrorf("%s() arguments must be an integer width and a one-character fill", name)
		}
		return pad(s, int(w), fill, name), nil
	case "zfill":
		if len(a.pos) != 1 {
			return nil, typeErrorf("zfill() takes exactly one argument")
		}
		w, ok := a.pos[0].(int64)
		if !ok {
			return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(a.pos[0]))
		}
		n := len([]rune(s))
		if int(w) <= n {
			return s, nil
		}
		sign := ""
		if s != "" && (s[0] == '+' || s[0] == '-') {
			sign, s = s[:1], s[1:]
		}
		return sign + strings.Repeat("0", int(w)-n) + s, nil
	case "partition", "rpartition":
		if len(a.pos) != 1 {
			return nil, typeErrorf("%s() takes exactly one argument", name)
		}
		sep, err := argString(name, a.pos[0])
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, valueErrorf("empty separator")
		}
		i := strings.Index(s, sep)
		if name == "rpartition" {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "rpartition" {
				return tuple{"", "", s}, nil
			}
			return tuple{s, "", ""}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	case "removeprefix", "removesuffix":
		if len(a.pos) != 1 {
			return nil, typeErrorf("%s() takes exactly one argument", name)
		}
		x, err := argString(name, a.pos[0])
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return strings.TrimPrefix(s, x), nil
		}
		return strings.TrimSuffix(s, x), nil
	case "expandtabs":
		return strings.ReplaceAll(s, "\t", "        "), nil
	case "format":
		return strFormat(s, a)
	}
	return nil, typeErrorf("'str' object has no callable attribute '%s'", name)
}

func runeIndex(s string, byteIdx int) int64 {
	if byteIdx < 0 {
		return -1
	}
	return int64(len([]rune(s[:byteIdx])))
}

func pad(s string, w int, fill, how string) string {
	n := len([]rune(s))
	if w <= n {
		return s
	}
	total := w - n
	switch how {
	case "ljust":
		return s + strings.Repeat(fill, total)
	case "rjust":
		return strings.Repeat(fill, total) + s
	}
	// CPython's pad: the extra character goes left when both the padding
	// and the width are odd.
	left := total/2 + (total & w & 1)
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, total-left)
}

// splitWhitespace is str.split() / str.rsplit() without a separator.
func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if !fromRight {
		var out []string
		rest := strings.TrimLeftFunc(s, pyIsSpace)
		for rest != "" {
			if maxsplit >= 0 && len(out) == maxsplit {
				out = append(out, rest)
				return out
			}
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				out = append(out, rest)
				break
			}
			out = append(out, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
		}
		if out == nil {
			out = []string{}
		}
		return out
	}
	var rev []string
	rest := strings.TrimRightFunc(s, pyIsSpace)
	for rest != "" {
		if maxsplit >= 0 && len(rev) == maxsplit {
			rev = append(rev, rest)
			break
		}
		i := strings.LastIndexFunc(rest, pyIsSpace)
		if i < 0 {
			rev = append(rev, rest)
			break
		}
		_, size := decodeLastRune(rest[:i+1])
		rev = append(rev, rest[i+size:])
		rest = strings.TrimRightFunc(rest[:i], pyIsSpace)
	}
	out := make([]string, len(rev))
	for i, x := range rev {
		out[len(rev)-1-i] = x
	}
	return out
}

func decodeLastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			r := []rune(s[i:])
			return r[0], len(s) - i
		}
	}
	return 0, 1
}

func rsplitN(s, sep string, n int) []string {
	var rev []string
	for len(rev) < n {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	rev = append(rev, s)
	out := make([]string, len(rev))
	for i, x := range rev {
		out[len(rev)-1-i] = x
	}
	return out
}

// pyTitle is str.title(): a letter after a non-letter is upper-cased, others
// lower-cased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = unicode.IsLetter(r)
	}
	return b.String()
}

func pyCapitalize(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i == 0 {
			b.WriteRune(unicode.ToTitle(r))
		} else {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// strFormat is a subset of str.format: "{}" / "{0}" / "{name}" fields
// without format specs.
func strFormat(s string, a *callArgs) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '{' && i+1 < len(s) && s[i+1] == '{' || c == '}' && i+1 < len(s) && s[i+1] == '}' {
			b.WriteByte(c)
			i++
			continue
		}
		if c != '{' {
			if c == '}' {
				return nil, valueErrorf("Single '}' encountered in format string")
			}
			b.WriteByte(c)
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, valueErrorf("Single '{' encountered in format string")
		}
		field := s[i+1 : i+j]
		i += j
		if strings.ContainsAny(field, ":!.[") {
			return nil, valueErrorf("format fields with specs are not supported: {%s}", field)
		}
		var v any
		switch {
		case field == "":
			if auto >= len(a.pos) {
				return nil, &Error{Kind: "IndexError", Message: fmt.Sprintf("Replacement index %d out of range for positional args tuple", auto)}
			}
			v = a.pos[auto]
			auto++
		default:
			if n, err := strconv.Atoi(field); err == nil {
				if n >= len(a.pos) {
					return nil, &Error{Kind: "IndexError", Message: fmt.Sprintf("Replacement index %d out of range for positional args tuple", n)}
				}
				v = a.pos[n]
			} else {
				k := indexOf(a.kwNames, field)
				if k < 0 {
					return nil, &Error{Kind: "KeyError", Message: "'" + field + "'"}
				}
				v = a.kwVals[k]
			}
		}
		b.WriteString(pyStr(v))
	}
	return b.String(), nil
}

// percentFormat is printf-style "fmt % args" for %s %r %d %i %f %x %o %e %g %%.
func percentFormat(f string, arg any) (string, error) {
	var args []any
	if t, ok := arg.(tuple); ok {
		args = t
	} else {
		args = []any{arg}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && strings.IndexByte("-+ #0123456789.", f[j]) >= 0 {
			j++
		}
		if j >= len(f) {
			return "", valueErrorf("incomplete format")
		}
		spec, verb := f[i+1:j], f[j]
		i = j
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return "", typeErrorf("not enough arguments for format string")
		}
		v := args[next]
		next++
		var s string
		switch verb {
		case 's':
			s = fmt.Sprintf("%"+spec+"s", pyStr(v))
		case 'r':
			s = fmt.Sprintf("%"+spec+"s", pyRepr(v))
		case 'd', 'i', 'x', 'X', 'o':
			if !isNumber(v) {
				return "", typeErrorf("%%%c format: a real number is required, not %s", verb, typeName(v))
			}
			n := intVal(v)
			if fl, ok := n.(float64); ok {
				n = int64(fl)
			}
			gv := map[byte]string{'d': "d", 'i': "d", 'x': "x", 'X': "X", 'o': "o"}[verb]
			s = fmt.Sprintf("%"+spec+gv, toBig(n))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			if !isNumber(v) {
				return "", typeErrorf("must be real number, not %s", typeName(v))
			}
			if !strings.Contains(spec, ".") && verb != 'g' && verb != 'G' {
				spec += ".6"
			}
			s = fmt.Sprintf("%"+spec+string(verb), toFloat(v))
		default:
			return "", valueErrorf("unsupported format character '%c'", verb)
		}
		b.WriteString(s)
	}
	if next < len(args) {
		if _, ok := arg.(tuple); ok {
			return "", typeErrorf("not all arguments converted during string formatting")
		}
	}
	return b.String(), nil
}

// Full case mappings (Unicode SpecialCasing.txt, unconditional part) that
// Go's per-rune ToUpper/ToLower lack but Python's str.upper/lower apply.
var (
	upperSpecial = map[rune]string{'ß': "SS", 'ŉ': "ʼN", 'ǰ': "J̌", 'ΐ': "Ϊ́", 'ΰ': "Ϋ́", 'և': "ԵՒ",
		'ẖ': "H̱", 'ẗ': "T̈", 'ẘ': "W̊", 'ẙ': "Y̊", 'ẚ': "Aʾ",
		'ﬀ': "FF", 'ﬁ': "FI", 'ﬂ': "FL", 'ﬃ': "FFI", 'ﬄ': "FFL", 'ﬅ': "ST", 'ﬆ': "ST",
		'ﬓ': "ՄՆ", 'ﬔ': "ՄԵ", 'ﬕ': "ՄԻ", 'ﬖ': "ՎՆ", 'ﬗ': "ՄԽ"}
	lowerSpecial = map[rune]string{'İ': "i̇"}
)

func pyUpper(s string) string { return mapSpecial(s, upperSpecial, unicode.ToUpper) }
func pyLower(s string) string { return mapSpecial(s, lowerSpecial, unicode.ToLower) }

func mapSpecial(s string, special map[rune]string, f func(rune) rune) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if m, ok := special[r]; ok {
			b.WriteString(m)
		} else {
			b.WriteRune(f(r))
		}
	}
	return b.String()
}

// jinjaTitle is Jinja's title filter: each word (split at whitespace,
// hyphens and opening brackets) gets an upper-case first character and a
// lower-case rest.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		sep := pyIsSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case sep:
			b.WriteRune(r)
		case start:
			b.WriteString(pyUpper(string(r)))
		default:
			b.WriteString(pyLower(string(r)))
		}
		start = sep
	}
	return b.String()
}
