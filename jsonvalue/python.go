package jsonvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// DumpOptions are the keyword arguments of Python's json.dumps.
type DumpOptions struct {
	// EnsureASCII escapes every non-ASCII character as \uXXXX.
	EnsureASCII bool
	// Indent, when set, puts each item on its own line indented by it per
	// level; nil writes one line.
	Indent *string
	// ItemSep and KeySep separate items and keys from values.
	ItemSep, KeySep string
	// SortKeys writes object keys in sorted order.
	SortKeys bool
	// Convert turns a value of a type Dumps does not know into one it does
	// (or fails); nil makes such values an error.
	Convert func(v any) (any, error)
}

// PythonOptions are json.dumps's defaults with ensure_ascii=False: one
// line, ", " and ": " (how vLLM writes tool-call arguments and
// transformers' tojson writes template values).
func PythonOptions() DumpOptions { return DumpOptions{ItemSep: ", ", KeySep: ": "} }

// ErrTooDeep is the error of values nested deeper than MaxDepth.
var ErrTooDeep = errors.New("jsonvalue: value nested deeper than the limit")

// Dumps writes v as Python's json.dumps does. It knows nil, bool, string,
// json.Number (written as its literal), int, int64, float64 (Python's float
// repr; NaN and infinities as NaN, Infinity, -Infinity), []any and *Object.
func Dumps(v any, o DumpOptions) (string, error) {
	var b strings.Builder
	if err := dump(&b, v, &o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func dump(b *strings.Builder, v any, o *DumpOptions, level int) error {
	if level > MaxDepth {
		return ErrTooDeep
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		WriteString(b, x, o.EnsureASCII)
	case json.Number:
		b.WriteString(string(x))
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(FloatRepr(x))
		}
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(o.ItemSep)
			}
			newline(b, o, level+1)
			if err := dump(b, e, o, level+1); err != nil {
				return err
			}
		}
		newline(b, o, level)
		b.WriteString("]")
	case *Object:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.Keys()
		if o.SortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.ItemSep)
			}
			newline(b, o, level+1)
			WriteString(b, k, o.EnsureASCII)
			b.WriteString(o.KeySep)
			e, _ := x.Get(k)
			if err := dump(b, e, o, level+1); err != nil {
				return err
			}
		}
		newline(b, o, level)
		b.WriteString("}")
	default:
		if o.Convert == nil {
			return fmt.Errorf("jsonvalue: a %T is not a JSON value", v)
		}
		c, err := o.Convert(v)
		if err != nil {
			return err
		}
		return dump(b, c, o, level)
	}
	return nil
}

// newline writes the line break and indentation json.dumps writes before an
// item or closing bracket when indent is set.
func newline(b *strings.Builder, o *DumpOptions, level int) {
	if o.Indent != nil {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(*o.Indent, level))
	}
}

// WriteString writes s as a JSON string the way Python's json module does:
// '"' and '\\' escaped, \n \r \t \b \f by name, other control characters
// as \u00XX, and with ensureASCII everything outside ' '..'~' as \uXXXX
// (surrogate pairs above the BMP). Invalid UTF-8 becomes U+FFFD, so the
// result is valid JSON.
func WriteString(b *strings.Builder, s string, ensureASCII bool) {
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

// FloatRepr is Python's repr() of a float: the shortest digits that round
// trip, positional for exponents -4 <= e < 16, else scientific with a
// signed, at least two digit exponent; "nan", "inf", "-inf".
func FloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.2345e+06"
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // position of the decimal point after the first digit
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return sign + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return sign + digits[:decpt] + "." + digits[decpt:]
		}
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	es := "+"
	if exp < 0 {
		es, exp = "-", -exp
	}
	return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
}
