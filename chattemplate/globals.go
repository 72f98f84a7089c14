package chattemplate

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// globalFuncs builds the functions every template sees. now supplies the
// clock for strftime_now.
func globalFuncs(now func() time.Time) map[string]any {
	return map[string]any{
		"range": &builtin{name: "range", fn: builtinRange},
		"dict": &builtin{name: "dict", fn: func(_ *evaluator, a *callArgs) (any, error) {
			o := NewObject()
			if len(a.pos) > 1 {
				return nil, typeErrorf("dict expected at most 1 argument, got %d", len(a.pos))
			}
			if len(a.pos) == 1 {
				src, ok := a.pos[0].(*Object)
				if !ok {
					return nil, typeErrorf("dict() argument must be a mapping here, not %s", typeName(a.pos[0]))
				}
				for _, k := range src.Keys() {
					v, _ := src.Get(k)
					o.Set(k, v)
				}
			}
			for i, k := range a.kwNames {
				o.Set(k, a.kwVals[i])
			}
			return o, nil
		}},
		"namespace": &builtin{name: "namespace", fn: func(_ *evaluator, a *callArgs) (any, error) {
			ns := &namespace{attrs: NewObject()}
			for _, p := range a.pos {
				src, ok := p.(*Object)
				if !ok {
					return nil, typeErrorf("namespace() positional arguments must be mappings")
				}
				for _, k := range src.Keys() {
					v, _ := src.Get(k)
					ns.attrs.Set(k, v)
				}
			}
			for i, k := range a.kwNames {
				ns.attrs.Set(k, a.kwVals[i])
			}
			return ns, nil
		}},
		"raise_exception": &builtin{name: "raise_exception", fn: func(_ *evaluator, a *callArgs) (any, error) {
			if len(a.pos) != 1 || len(a.kwVals) != 0 {
				return nil, typeErrorf("raise_exception() takes exactly one argument")
			}
			return nil, &Error{Kind: "TemplateError", Message: pyStr(a.pos[0])}
		}},
		"strftime_now": &builtin{name: "strftime_now", fn: func(_ *evaluator, a *callArgs) (any, error) {
			if len(a.pos) != 1 || len(a.kwVals) != 0 {
				return nil, typeErrorf("strftime_now() takes exactly one argument")
			}
			f, ok := asString(a.pos[0])
			if !ok {
				return nil, typeErrorf("strftime() argument 1 must be str, not %s", typeName(a.pos[0]))
			}
			return strftime(now(), f), nil
		}},
	}
}

func builtinRange(_ *evaluator, a *callArgs) (any, error) {
	if len(a.kwVals) > 0 {
		return nil, typeErrorf("range() takes no keyword arguments")
	}
	var n []int64
	for _, p := range a.pos {
		i, ok := intVal(p).(int64)
		if !ok {
			return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(p))
		}
		n = append(n, i)
	}
	r := rangeVal{step: 1}
	switch len(n) {
	case 1:
		r.stop = n[0]
	case 2:
		r.start, r.stop = n[0], n[1]
	case 3:
		r.start, r.stop, r.step = n[0], n[1], n[2]
		if r.step == 0 {
			return nil, valueErrorf("range() arg 3 must not be zero")
		}
	default:
		return nil, typeErrorf("range expected 1 to 3 arguments, got %d", len(n))
	}
	if r.len() > maxRange {
		return nil, runtimeErrorf("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	return r, nil
}

// parseIntBase parses an integer literal in base (0 means auto-detect a
// 0x/0o/0b prefix) the way int(s, base) does.
func parseIntBase(s string, base int) (any, error) {
	if base != 0 && (base < 2 || base > 36) {
		return nil, valueErrorf("int() base must be >= 2 and <= 36, or 0")
	}
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if base == 0 || base == 16 || base == 8 || base == 2 {
		ls := strings.ToLower(s)
		for _, pre := range []struct {
			p string
			b int
		}{{"0x", 16}, {"0o", 8}, {"0b", 2}} {
			if strings.HasPrefix(ls, pre.p) && (base == 0 || base == pre.b) {
				s, base = s[2:], pre.b
			}
		}
		if base == 0 {
			base = 10
		}
	}
	if s == "" {
		return nil, strconv.ErrSyntax
	}
	b, ok := new(big.Int).SetString(s, base)
	if !ok {
		return nil, strconv.ErrSyntax
	}
	if neg {
		b.Neg(b)
	}
	return normBig(b), nil
}

func bigFromFloat(f float64) (*big.Int, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	b, _ := new(big.Float).SetFloat64(f).Int(nil)
	return b, true
}

// strftime formats t with C strftime directives (the common ones).
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'e':
			b.WriteString(t.Format("_2"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'j':
			b.WriteString(t.Format("002"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'f':
			b.WriteString(t.Format(".000000")[1:])
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
