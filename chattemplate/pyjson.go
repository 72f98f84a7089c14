package chattemplate

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
)

// pyIsSpace is Python's str.isspace() for one character, which (unlike
// unicode.IsSpace) includes the separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyIsPrintable approximates Python's str.isprintable() for one character.
func pyIsPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	return unicode.IsPrint(r)
}

// pyStrip is Python's str.strip/lstrip/rstrip. With chars == nil it strips
// whitespace, else any of the given characters.
func pyStrip(s string, chars *string, left, right bool) string {
	match := pyIsSpace
	if chars != nil {
		set := *chars
		match = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, match)
	}
	if right {
		s = strings.TrimRightFunc(s, match)
	}
	return s
}

// jsonOptions are the keyword arguments of json.dumps that tojson passes on.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: compact (one line)
	itemSep     string
	keySep      string
	sortKeys    bool
}

// defaultJSONOptions are transformers' tojson defaults: ensure_ascii=False,
// indent=None, separators=None (", " and ": "), sort_keys=False.
func defaultJSONOptions() jsonOptions {
	return jsonOptions{itemSep: ", ", keySep: ": "}
}

// pyJSONDumps is Python's json.dumps of a template value.
func pyJSONDumps(v any, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOptions, level int) error {
	if level > maxJSONDepth {
		return &Error{Kind: "RecursionError", Message: "maximum recursion depth exceeded while encoding a JSON object"}
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(floatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case markup:
		writeJSONString(b, string(x), o.ensureASCII)
	case []any:
		return writeJSONSeq(b, x, o, level)
	case tuple:
		return writeJSONSeq(b, x, o, level)
	case *Object:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.Keys()
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			b.WriteString(jsonNewline(o, level+1))
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			e, _ := x.Get(k)
			if err := writeJSON(b, e, o, level+1); err != nil {
				return err
			}
		}
		b.WriteString(jsonNewline(o, level))
		b.WriteString("}")
	default:
		return typeErrorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonNewline returns the line break and indentation json.dumps writes
// before an item or closing bracket when indent is set, else nothing.
func jsonNewline(o jsonOptions, level int) string {
	if o.indent == nil {
		return ""
	}
	return "\n" + strings.Repeat(*o.indent, level)
}

func writeJSONSeq(b *strings.Builder, items []any, o jsonOptions, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteString("[")
	for i, e := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		b.WriteString(jsonNewline(o, level+1))
		if err := writeJSON(b, e, o, level+1); err != nil {
			return err
		}
	}
	b.WriteString(jsonNewline(o, level))
	b.WriteString("]")
	return nil
}

// writeJSONString writes s as Python's json module does: '"' and '\\'
// escaped, \n \r \t \b \f by name, other control characters as \u00XX, and
// with ensureASCII every non-ASCII character as \uXXXX (surrogate pairs
// above the BMP).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e && r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r >= 0x10000:
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
