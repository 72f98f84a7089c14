package chattemplate

import "math"

// testFunc implements a Jinja test: v is name(args).
type testFunc func(v any, args []any) (bool, error)

var tests map[string]testFunc

func init() {
	cmp := func(op string) testFunc {
		return func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, typeErrorf("test takes exactly one argument")
			}
			return compareOp(op, v, args[0])
		}
	}
	tests = map[string]testFunc{
		"defined":   func(v any, _ []any) (bool, error) { _, u := v.(undefined); return !u, nil },
		"undefined": func(v any, _ []any) (bool, error) { _, u := v.(undefined); return u, nil },
		"none":      func(v any, _ []any) (bool, error) { return v == nil, nil },
		"boolean":   func(v any, _ []any) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && b, nil },
		"false":     func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && !b, nil },
		"integer": func(v any, _ []any) (bool, error) {
			_, isBool := v.(bool)
			return isInt(v) && !isBool, nil
		},
		"float":   func(v any, _ []any) (bool, error) { return isFloat(v), nil },
		"number":  func(v any, _ []any) (bool, error) { return isNumber(v), nil },
		"string":  func(v any, _ []any) (bool, error) { return isString(v), nil },
		"mapping": func(v any, _ []any) (bool, error) { _, ok := v.(*Object); return ok, nil },
		"iterable": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, markup, []any, tuple, *Object, undefined, rangeVal, dictView:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, markup, []any, tuple, *Object, undefined, rangeVal:
				return true, nil
			}
			return false, nil
		},
		"callable": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case *macro, *builtin, *boundMethod, undefined:
				return true, nil
			}
			return false, nil
		},
		"sameas": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, typeErrorf("sameas takes exactly one argument")
			}
			o := args[0]
			switch x := v.(type) {
			case nil, bool:
				return v == o, nil
			case int64:
				y, ok := o.(int64)
				return ok && x == y && x >= -5 && x <= 256, nil
			case string:
				y, ok := o.(string)
				return ok && x == y, nil
			}
			return false, nil
		},
		"escaped": func(v any, _ []any) (bool, error) { _, ok := v.(markup); return ok, nil },
		"odd": func(v any, _ []any) (bool, error) {
			r, err := binaryOp("%", v, int64(2))
			return err == nil && pyEqual(r, int64(1)), err
		},
		"even": func(v any, _ []any) (bool, error) {
			r, err := binaryOp("%", v, int64(2))
			return err == nil && pyEqual(r, int64(0)), err
		},
		"divisibleby": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, typeErrorf("divisibleby takes exactly one argument")
			}
			r, err := binaryOp("%", v, args[0])
			return err == nil && pyEqual(r, int64(0)), err
		},
		"lower": func(v any, _ []any) (bool, error) {
			r, err := strMethod(pyStr(v), "islower", &callArgs{})
			return r == true, err
		},
		"upper": func(v any, _ []any) (bool, error) {
			r, err := strMethod(pyStr(v), "isupper", &callArgs{})
			return r == true, err
		},
		"in": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, typeErrorf("in takes exactly one argument")
			}
			return contains(args[0], v)
		},
		"filter": func(v any, _ []any) (bool, error) { s, ok := v.(string); _, f := filters[s]; return ok && f, nil },
		"test":   func(v any, _ []any) (bool, error) { s, ok := v.(string); _, f := tests[s]; return ok && f, nil },
		"nan":    func(v any, _ []any) (bool, error) { f, ok := v.(float64); return ok && math.IsNaN(f), nil },
	}
	for _, alias := range [][2]string{{"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="},
		{"lt", "<"}, {"lessthan", "<"}, {"<", "<"}, {"le", "<="}, {"<=", "<="},
		{"gt", ">"}, {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}} {
		tests[alias[0]] = cmp(alias[1])
	}
	delete(tests, "nan")
}
