package chattemplate

import (
	"math"
	"math/big"
	"math/bits"
	"strings"
)

// htmlEscape is markupsafe.escape for plain strings.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

// escapeForMarkup returns the text of v escaped unless it is already markup.
func escapeForMarkup(v any) string {
	if m, ok := v.(markup); ok {
		return string(m)
	}
	return htmlEscape(pyStr(v))
}

func unaryOp(op string, v any) (any, error) {
	if err := failIfUndefined(v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case bool:
		v = toBig(x).Int64()
	}
	switch x := v.(type) {
	case int64:
		if op == "+" {
			return x, nil
		}
		if x == math.MinInt64 {
			return normBig(new(big.Int).Neg(big.NewInt(x))), nil
		}
		return -x, nil
	case *big.Int:
		if op == "+" {
			return x, nil
		}
		return normBig(new(big.Int).Neg(x)), nil
	case float64:
		if op == "+" {
			return x, nil
		}
		return -x, nil
	}
	return nil, typeErrorf("bad operand type for unary %s: '%s'", op, typeName(v))
}

func intVal(v any) any {
	if b, ok := v.(bool); ok {
		if b {
			return int64(1)
		}
		return int64(0)
	}
	return v
}

// maxBigBits caps integer results so that 2**10**9 fails instead of hanging.
const maxBigBits = 1 << 16

func binaryOp(op string, l, r any) (any, error) {
	if err := failIfUndefined(l, r); err != nil {
		return nil, err
	}
	if isNumber(l) && isNumber(r) {
		return numericOp(op, intVal(l), intVal(r))
	}
	switch op {
	case "+":
		if ls, ok := asString(l); ok {
			if rs, ok := asString(r); ok {
				_, lm := l.(markup)
				_, rm := r.(markup)
				if lm || rm {
					return markup(escapeForMarkup(l) + escapeForMarkup(r)), nil
				}
				return ls + rs, nil
			}
		}
		switch x := l.(type) {
		case []any:
			if y, ok := r.([]any); ok {
				out := make([]any, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
			return nil, typeErrorf(`can only concatenate list (not "%s") to list`, typeName(r))
		case tuple:
			if y, ok := r.(tuple); ok {
				out := make(tuple, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
			return nil, typeErrorf(`can only concatenate tuple (not "%s") to tuple`, typeName(r))
		case string:
			return nil, typeErrorf(`can only concatenate str (not "%s") to str`, typeName(r))
		}
	case "*":
		if isInt(r) {
			if v, ok, err := repeat(l, intVal(r)); ok {
				return v, err
			}
		}
		if isInt(l) {
			if v, ok, err := repeat(r, intVal(l)); ok {
				return v, err
			}
		}
	case "%":
		if s, ok := asString(l); ok {
			out, err := percentFormat(s, r)
			if err != nil {
				return nil, err
			}
			if _, m := l.(markup); m {
				return markup(out), nil
			}
			return out, nil
		}
	}
	return nil, typeErrorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

// repeat is seq * n for strings, lists and tuples.
func repeat(seq, n any) (any, bool, error) {
	count, ok := n.(int64)
	if !ok {
		return nil, true, runtimeErrorf("OverflowError", "cannot fit 'int' into an index-sized integer")
	}
	if count < 0 {
		count = 0
	}
	size := func(unit int) error {
		if unit > 0 && count > int64(maxOutputBytes/unit) {
			return runtimeErrorf("MemoryError", "repetition result too large")
		}
		return nil
	}
	switch x := seq.(type) {
	case string:
		if err := size(len(x)); err != nil {
			return nil, true, err
		}
		return strings.Repeat(x, int(count)), true, nil
	case markup:
		if err := size(len(x)); err != nil {
			return nil, true, err
		}
		return markup(strings.Repeat(string(x), int(count))), true, nil
	case []any:
		if err := size(len(x) * 8); err != nil {
			return nil, true, err
		}
		out := make([]any, 0, len(x)*int(count))
		for i := int64(0); i < count; i++ {
			out = append(out, x...)
		}
		return out, true, nil
	case tuple:
		if err := size(len(x) * 8); err != nil {
			return nil, true, err
		}
		out := make(tuple, 0, len(x)*int(count))
		for i := int64(0); i < count; i++ {
			out = append(out, x...)
		}
		return out, true, nil
	}
	return nil, false, nil
}

func numericOp(op string, l, r any) (any, error) {
	if isFloat(l) || isFloat(r) || op == "/" {
		if op == "**" && isInt(l) && isInt(r) {
			// int ** int with a negative exponent gives a float
			x, y := toFloat(l), toFloat(r)
			if x == 0 && y < 0 {
				return nil, runtimeErrorf("ZeroDivisionError", "0.0 cannot be raised to a negative power")
			}
			return math.Pow(x, y), nil
		}
		return floatOp(op, toFloat(l), toFloat(r))
	}
	if x, ok := l.(int64); ok {
		if y, ok := r.(int64); ok {
			switch op {
			case "+":
				sum := x + y
				if (x >= 0) != (y >= 0) || (sum >= 0) == (x >= 0) {
					return sum, nil
				}
			case "-":
				d := x - y
				if (x >= 0) != (y >= 0) && (d >= 0) != (x >= 0) {
					break
				}
				return d, nil
			case "*":
				hi, lo := bits.Mul64(uint64(absI(x)), uint64(absI(y)))
				if hi == 0 && lo <= math.MaxInt64 && x != math.MinInt64 && y != math.MinInt64 {
					p := int64(lo)
					if (x < 0) != (y < 0) {
						p = -p
					}
					return p, nil
				}
			}
		}
	}
	a, b := toBig(l), toBig(r)
	z := new(big.Int)
	switch op {
	case "+":
		z.Add(a, b)
	case "-":
		z.Sub(a, b)
	case "*":
		if a.BitLen()+b.BitLen() > maxBigBits {
			return nil, runtimeErrorf("OverflowError", "integer result too large")
		}
		z.Mul(a, b)
	case "//", "%":
		if b.Sign() == 0 {
			if op == "%" {
				return nil, runtimeErrorf("ZeroDivisionError", "integer modulo by zero")
			}
			return nil, runtimeErrorf("ZeroDivisionError", "integer division or modulo by zero")
		}
		q, m := new(big.Int).DivMod(a, b, new(big.Int)) // Euclidean: m >= 0
		if m.Sign() != 0 && b.Sign() < 0 {
			// Python floors: remainder takes the divisor's sign
			q.Add(q, big.NewInt(1))
			m.Add(m, b)
		}
		if op == "//" {
			z = q
		} else {
			z = m
		}
	case "**":
		if b.Sign() < 0 {
			return math.Pow(toFloat(a), toFloat(b)), nil
		}
		if a.BitLen() > 1 && (!b.IsInt64() || int64(a.BitLen())*b.Int64() > maxBigBits) {
			return nil, runtimeErrorf("OverflowError", "integer result too large")
		}
		z.Exp(a, b, nil)
	default:
		return nil, typeErrorf("unsupported operand %s", op)
	}
	return normBig(z), nil
}

func absI(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func floatOp(op string, x, y float64) (any, error) {
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/":
		if y == 0 {
			return nil, runtimeErrorf("ZeroDivisionError", "division by zero")
		}
		return x / y, nil
	case "//":
		if y == 0 {
			return nil, runtimeErrorf("ZeroDivisionError", "float floor division by zero")
		}
		return math.Floor(x / y), nil
	case "%":
		if y == 0 {
			return nil, runtimeErrorf("ZeroDivisionError", "float modulo")
		}
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return m, nil
	case "**":
		if x == 0 && y < 0 {
			return nil, runtimeErrorf("ZeroDivisionError", "0.0 cannot be raised to a negative power")
		}
		return math.Pow(x, y), nil
	}
	return nil, typeErrorf("unsupported operand %s", op)
}

func compareOp(op string, l, r any) (bool, error) {
	switch op {
	case "==":
		return pyEqual(l, r), nil
	case "!=":
		return !pyEqual(l, r), nil
	case "in":
		return contains(r, l)
	case "not in":
		ok, err := contains(r, l)
		return !ok, err
	}
	if err := failIfUndefined(l, r); err != nil {
		return false, err
	}
	c, ordered, err := pyCompare(op, l, r)
	if err != nil || !ordered {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, typeErrorf("unknown comparison %s", op)
}

// contains is Python's "item in container".
func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string, markup:
		s, _ := asString(c)
		sub, ok := asString(item)
		if !ok {
			if u, isU := item.(undefined); isU {
				return false, u.err()
			}
			return false, typeErrorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(s, sub), nil
	case *Object:
		k, ok := asString(item)
		if !ok {
			return false, nil
		}
		_, found := c.Get(k)
		return found, nil
	case undefined:
		return false, nil
	case *namespace:
		return false, typeErrorf("argument of type 'Namespace' is not iterable")
	}
	items, err := iterate(container)
	if err != nil {
		return false, typeErrorf("argument of type '%s' is not iterable", typeName(container))
	}
	for _, it := range items {
		if pyEqual(it, item) {
			return true, nil
		}
	}
	return false, nil
}
