package chattemplate

import (
	"encoding/json"
	"fmt"
	"github.com/govinfer/govinfer/jsonvalue"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Template values inside the interpreter are Go values of these kinds:
//
//	nil            Python None
//	bool           bool
//	int64          int (small)
//	*big.Int       int outside the int64 range (always normalised)
//	float64        float
//	string         str
//	markup         markupsafe.Markup (from |safe)
//	[]any          list
//	tuple          tuple
//	*Object        dict
//	*namespace     jinja2 namespace()
//	undefined      jinja2 Undefined
//	callables      *macro, *builtin, *boundMethod
//	*loopInfo      the loop variable
//	rangeVal       range()
//	dictView       dict.keys()/values()/items()

// markup is a string marked safe; "+" with a plain string HTML-escapes the
// plain side, as markupsafe does.
type markup string

// tuple is a Python tuple: like a list, printed with parentheses.
type tuple []any

// namespace is the mutable attribute bag made by namespace().
type namespace struct{ attrs *Object }

// rangeVal is a Python range object.
type rangeVal struct{ start, stop, step int64 }

func (r rangeVal) len() int64 {
	if r.step > 0 && r.start < r.stop {
		return (r.stop - r.start + r.step - 1) / r.step
	}
	if r.step < 0 && r.start > r.stop {
		return (r.start - r.stop - r.step - 1) / -r.step
	}
	return 0
}

func (r rangeVal) items() []any {
	n := r.len()
	out := make([]any, n)
	for i := int64(0); i < n; i++ {
		out[i] = r.start + i*r.step
	}
	return out
}

// dictView is what dict.keys(), .values() and .items() return.
type dictView struct {
	kind string // "keys", "values" or "items"
	obj  *Object
}

func (d dictView) items() []any {
	out := make([]any, 0, d.obj.Len())
	for _, k := range d.obj.Keys() {
		v, _ := d.obj.Get(k)
		switch d.kind {
		case "keys":
			out = append(out, k)
		case "values":
			out = append(out, v)
		default:
			out = append(out, tuple{k, v})
		}
	}
	return out
}

// undefined is Jinja's Undefined. It renders as "", is false, iterates as
// empty, and raises when used in arithmetic, called or looked into.
type undefined struct {
	name   string // the missing name or attribute
	obj    any    // the object it was looked up on, if hasObj
	hasObj bool
	hint   string // replaces the generated message when set
	kind   string // exception class raised on use; "" means UndefinedError
}

func (u undefined) message() string {
	if u.hint != "" {
		return u.hint
	}
	if !u.hasObj {
		return fmt.Sprintf("'%s' is undefined", u.name)
	}
	return fmt.Sprintf("'%s' has no attribute '%s'", objectTypeRepr(u.obj), u.name)
}

func (u undefined) err() error {
	kind := u.kind
	if kind == "" {
		kind = "UndefinedError"
	}
	return &Error{Kind: kind, Message: u.message()}
}

// objectTypeRepr mirrors jinja2.utils.object_type_repr.
func objectTypeRepr(v any) string {
	if v == nil {
		return "None"
	}
	return typeName(v) + " object"
}

// typeName is the Python class name of a value.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case markup:
		return "Markup"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Object:
		return "dict"
	case *namespace:
		return "Namespace"
	case undefined:
		return "Undefined"
	case *macro:
		return "Macro"
	case *builtin, *boundMethod:
		return "builtin_function_or_method"
	case *loopInfo:
		return "LoopContext"
	case rangeVal:
		return "range"
	case dictView:
		return "dict_" + v.(dictView).kind
	}
	return fmt.Sprintf("%T", v)
}

// fromGo converts a caller's Go value into a template value, deep-copying
// containers. Maps other than *Object are read in sorted key order.
func fromGo(v any) (any, error) {
	return fromGoDepth(v, 0)
}

func fromGoDepth(v any, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("value nested deeper than %d", maxJSONDepth)
	}
	switch x := v.(type) {
	case nil, bool, string, float64, int64:
		return x, nil
	case markup, undefined:
		return x, nil
	case *big.Int:
		return normBig(new(big.Int).Set(x)), nil
	case json.Number:
		return parseNumber(string(x))
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case *Object:
		if x == nil {
			return nil, nil
		}
		o := NewObject()
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			c, err := fromGoDepth(e, depth+1)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			o.Set(k, c)
		}
		return o, nil
	case []any:
		if x == nil {
			return nil, nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			c, err := fromGoDepth(e, depth+1)
			if err != nil {
				return nil, fmt.Errorf("index %d: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case tuple:
		out := make(tuple, len(x))
		for i, e := range x {
			c, err := fromGoDepth(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return normBig(new(big.Int).SetUint64(rv.Uint())), nil
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return fromGoDepth(rv.Elem().Interface(), depth+1)
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			c, err := fromGoDepth(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("index %d: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map with %s keys is not supported", rv.Type().Key())
		}
		if rv.IsNil() {
			return nil, nil
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		o := NewObject()
		for _, k := range keys {
			c, err := fromGoDepth(rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			o.Set(k, c)
		}
		return o, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}

// parseNumber turns a JSON number literal into an int (when it has no
// fraction or exponent, as Python's json does) or a float.
func parseNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		b, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("invalid number %q", s)
		}
		return normBig(b), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil, fmt.Errorf("invalid number %q", s)
	}
	return f, nil
}

// normBig returns an int64 when b fits, else b.
func normBig(b *big.Int) any {
	if b.IsInt64() {
		return b.Int64()
	}
	return b
}

func toBig(v any) *big.Int {
	switch x := v.(type) {
	case int64:
		return big.NewInt(x)
	case *big.Int:
		return x
	case bool:
		if x {
			return big.NewInt(1)
		}
		return big.NewInt(0)
	}
	return nil
}

// isInt reports whether v is a Python int (bool counts, as in Python).
func isInt(v any) bool {
	switch v.(type) {
	case int64, *big.Int, bool:
		return true
	}
	return false
}

func isNumber(v any) bool {
	return isInt(v) || isFloat(v)
}

func isFloat(v any) bool {
	_, ok := v.(float64)
	return ok
}

func isString(v any) bool {
	switch v.(type) {
	case string, markup:
		return true
	}
	return false
}

// asString returns the text of a str or Markup value.
func asString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case markup:
		return string(x), true
	}
	return "", false
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f
	case bool:
		if x {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// truthy is Python's bool().
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case *big.Int:
		return x.Sign() != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case markup:
		return x != ""
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case *Object:
		return x.Len() > 0
	case undefined:
		return false
	case rangeVal:
		return x.len() > 0
	case dictView:
		return x.obj.Len() > 0
	}
	return true
}

// pyStr is Python's str() of a template value.
func pyStr(v any) string {
	var b strings.Builder
	writeStr(&b, v)
	return b.String()
}

func writeStr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		b.WriteString(x)
	case markup:
		b.WriteString(string(x))
	case undefined:
	default:
		writeRepr(b, v)
	}
}

// pyRepr is Python's repr() of a template value.
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		b.WriteString(floatRepr(x))
	case string:
		writeStringRepr(b, x)
	case markup:
		b.WriteString("Markup(")
		writeStringRepr(b, string(x))
		b.WriteString(")")
	case []any:
		writeSeqRepr(b, "[", "]", x)
	case tuple:
		if len(x) == 1 {
			b.WriteString("(")
			writeRepr(b, x[0])
			b.WriteString(",)")
			return
		}
		writeSeqRepr(b, "(", ")", x)
	case *Object:
		writeDictRepr(b, x)
	case *namespace:
		b.WriteString("<Namespace ")
		writeDictRepr(b, x.attrs)
		b.WriteString(">")
	case undefined:
		b.WriteString("Undefined")
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", x.name)
	case *builtin:
		fmt.Fprintf(b, "<built-in function %s>", x.name)
	case *boundMethod:
		fmt.Fprintf(b, "<built-in method %s of %s object>", x.name, typeName(x.recv))
	case *loopInfo:
		fmt.Fprintf(b, "<LoopContext %d/%d>", x.index+1, len(x.items))
	case rangeVal:
		if x.step == 1 {
			fmt.Fprintf(b, "range(%d, %d)", x.start, x.stop)
		} else {
			fmt.Fprintf(b, "range(%d, %d, %d)", x.start, x.stop, x.step)
		}
	case dictView:
		b.WriteString("dict_" + x.kind + "(")
		writeSeqRepr(b, "[", "]", x.items())
		b.WriteString(")")
	default:
		fmt.Fprintf(b, "<%T>", v)
	}
}

func writeSeqRepr(b *strings.Builder, open, closing string, items []any) {
	b.WriteString(open)
	for i, e := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, e)
	}
	b.WriteString(closing)
}

func writeDictRepr(b *strings.Builder, o *Object) {
	b.WriteString("{")
	for i, k := range o.Keys() {
		if i > 0 {
			b.WriteString(", ")
		}
		writeStringRepr(b, k)
		b.WriteString(": ")
		v, _ := o.Get(k)
		writeRepr(b, v)
	}
	b.WriteString("}")
}

// writeStringRepr writes Python's repr() of a str.
func writeStringRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || pyIsPrintable(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
}

// floatRepr is Python's repr() of a float (jsonvalue.FloatRepr).
func floatRepr(f float64) string { return jsonvalue.FloatRepr(f) }

// pyEqual is Python's == on template values.
func pyEqual(a, b any) bool {
	if isNumber(a) && isNumber(b) {
		return numCompare(a, b) == 0
	}
	if sa, ok := asString(a); ok {
		sb, ok := asString(b)
		return ok && sa == sb
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case []any:
		y, ok := b.([]any)
		return ok && seqEqual(x, y)
	case tuple:
		y, ok := b.(tuple)
		return ok && seqEqual(x, y)
	case *Object:
		y, ok := b.(*Object)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.Keys() {
			xv, _ := x.Get(k)
			yv, ok := y.Get(k)
			if !ok || !pyEqual(xv, yv) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	case rangeVal:
		y, ok := b.(rangeVal)
		return ok && seqEqual(x.items(), y.items())
	}
	return a == b
}

func seqEqual(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !pyEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// numCompare compares two numbers exactly (ints as big integers when
// needed); NaN compares as unordered and returns 2.
func numCompare(a, b any) int {
	if isInt(a) && isInt(b) {
		if x, ok := a.(int64); ok {
			if y, ok := b.(int64); ok {
				switch {
				case x < y:
					return -1
				case x > y:
					return 1
				}
				return 0
			}
		}
		return toBig(a).Cmp(toBig(b))
	}
	x, y := toFloat(a), toFloat(b)
	if math.IsNaN(x) || math.IsNaN(y) {
		return 2
	}
	// An int beyond float precision compares exactly against a float.
	if isInt(a) && !math.IsInf(y, 0) {
		return -new(big.Float).SetFloat64(y).Cmp(new(big.Float).SetInt(toBig(a)))
	}
	if isInt(b) && !math.IsInf(x, 0) {
		return new(big.Float).SetFloat64(x).Cmp(new(big.Float).SetInt(toBig(b)))
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// pyCompare orders a and b like Python's < for numbers, strings, lists and
// tuples. ok is false for unordered values (NaN); err reports a TypeError.
func pyCompare(op string, a, b any) (c int, ok bool, err error) {
	if isNumber(a) && isNumber(b) {
		c := numCompare(a, b)
		return c, c != 2, nil
	}
	if sa, ok1 := asString(a); ok1 {
		if sb, ok2 := asString(b); ok2 {
			return strings.Compare(sa, sb), true, nil
		}
	}
	la, aSeq := seqOf(a)
	lb, bSeq := seqOf(b)
	if aSeq && bSeq && typeName(a) == typeName(b) {
		for i := 0; i < len(la) && i < len(lb); i++ {
			if pyEqual(la[i], lb[i]) {
				continue
			}
			return pyCompare(op, la[i], lb[i])
		}
		switch {
		case len(la) < len(lb):
			return -1, true, nil
		case len(la) > len(lb):
			return 1, true, nil
		}
		return 0, true, nil
	}
	return 0, false, typeErrorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

func seqOf(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case tuple:
		return x, true
	}
	return nil, false
}
