package chattemplate

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// filterFunc implements a Jinja filter: v|name(args).
type filterFunc func(ev *evaluator, v any, a *callArgs) (any, error)

// filters is the filter table; tojson is transformers' version.
var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        filterAbs,
		"attr":       filterAttr,
		"batch":      filterBatch,
		"capitalize": strFilter(pyCapitalize),
		"center":     filterCenter,
		"count":      filterLength,
		"d":          filterDefault,
		"default":    filterDefault,
		"dictsort":   filterDictsort,
		"e":          filterEscape,
		"escape":     filterEscape,
		"first":      filterFirst,
		"float":      filterFloat,
		"format":     filterFormat,
		"indent":     filterIndent,
		"int":        filterInt,
		"items":      filterItems,
		"join":       filterJoin,
		"last":       filterLast,
		"length":     filterLength,
		"list":       filterList,
		"lower":      strFilter(pyLower),
		"map":        filterMap,
		"max":        filterMinMax(1),
		"min":        filterMinMax(-1),
		"reject":     filterSelect(false, false),
		"rejectattr": filterSelect(false, true),
		"replace":    filterReplace,
		"reverse":    filterReverse,
		"round":      filterRound,
		"safe":       filterSafe,
		"select":     filterSelect(true, false),
		"selectattr": filterSelect(true, true),
		"slice":      filterSlice,
		"sort":       filterSort,
		"string":     filterString,
		"sum":        filterSum,
		"title":      strFilter(jinjaTitle),
		"tojson":     filterToJSON,
		"trim":       filterTrim,
		"unique":     filterUnique,
		"upper":      strFilter(pyUpper),
		"wordcount":  filterWordcount,
	}
}

func noArgs(name string, a *callArgs) error {
	if len(a.pos)+len(a.kwVals) > 0 {
		return typeErrorf("%s() takes no arguments", name)
	}
	return nil
}

// strFilter lifts a string function into a filter; the value goes through
// str() first, keeping Markup as Markup.
func strFilter(f func(string) string) filterFunc {
	return func(_ *evaluator, v any, a *callArgs) (any, error) {
		if err := noArgs("filter", a); err != nil {
			return nil, err
		}
		if m, ok := v.(markup); ok {
			return markup(f(string(m))), nil
		}
		return f(pyStr(v)), nil
	}
}

func filterAbs(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := failIfUndefined(v); err != nil {
		return nil, err
	}
	if !isNumber(v) {
		return nil, typeErrorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if c, _, _ := pyCompare("<", v, int64(0)); c < 0 {
		return unaryOp("-", v)
	}
	return intVal(v), nil
}

func filterAttr(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("attr", []string{"name"}, []any{required})
	if err != nil {
		return nil, err
	}
	name, err := argString("attr", p[0])
	if err != nil {
		return nil, err
	}
	return getAttr(v, name)
}

func filterBatch(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("batch", []string{"linecount", "fill_with"}, []any{required, nil})
	if err != nil {
		return nil, err
	}
	n, ok := p[0].(int64)
	if !ok || n <= 0 {
		return nil, valueErrorf("batch size must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		row := append([]any{}, items[i:end]...)
		if a := len(row); a < int(n) && len(a2(p)) > 0 {
			for j := a; j < int(n); j++ {
				row = append(row, p[1])
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// a2 returns the fill_with argument as a one-element slice when given.
func a2(p []any) []any {
	if p[1] == nil {
		return nil
	}
	return p[1:]
}

func filterCenter(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("center", []string{"width"}, []any{int64(80)})
	if err != nil {
		return nil, err
	}
	w, ok := p[0].(int64)
	if !ok {
		return nil, typeErrorf("width must be an integer")
	}
	return pad(pyStr(v), int(w), " ", "center"), nil
}

func filterLength(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("length", a); err != nil {
		return nil, err
	}
	n, err := pyLen(v)
	return int64(n), err
}

// pyLen is Python's len().
func pyLen(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return len([]rune(x)), nil
	case markup:
		return len([]rune(string(x))), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case *Object:
		return x.Len(), nil
	case undefined:
		return 0, nil
	case rangeVal:
		return int(x.len()), nil
	case dictView:
		return x.obj.Len(), nil
	case *namespace:
		return x.attrs.Len(), nil
	}
	return 0, typeErrorf("object of type '%s' has no len()", typeName(v))
}

func filterDefault(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("default", []string{"default_value", "boolean"}, []any{"", false})
	if err != nil {
		return nil, err
	}
	if _, isU := v.(undefined); isU || (truthy(p[1]) && !truthy(v)) {
		return p[0], nil
	}
	return v, nil
}

func filterDictsort(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("dictsort", []string{"case_sensitive", "by", "reverse"}, []any{false, "key", false})
	if err != nil {
		return nil, err
	}
	o, ok := v.(*Object)
	if !ok {
		return nil, typeErrorf("dictsort needs a mapping, got %s", typeName(v))
	}
	pos := 0
	switch p[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, &Error{Kind: "FilterArgumentError", Message: "You can only sort by either 'key' or 'value'"}
	}
	items := dictView{kind: "items", obj: o}.items()
	err = sortValues(items, func(x any) (any, error) {
		return sortKey(x.(tuple)[pos], truthy(p[0])), nil
	}, truthy(p[2]))
	return items, err
}

// sortKey lower-cases strings unless caseSensitive, as Jinja's
// ignore_case does.
func sortKey(v any, caseSensitive bool) any {
	if s, ok := asString(v); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

// sortValues sorts items stably by key(item) with Python ordering.
func sortValues(items []any, key func(any) (any, error), reverse bool) error {
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		c, _, err := pyCompare("<", a, b)
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		return c < 0
	})
	if cmpErr != nil {
		return cmpErr
	}
	sorted := make([]any, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func filterEscape(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("escape", a); err != nil {
		return nil, err
	}
	return markup(escapeForMarkup(v)), nil
}

func filterFirst(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("first", a); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("last", a); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterFloat(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("float", []string{"default"}, []any{0.0})
	if err != nil {
		return nil, err
	}
	switch {
	case isNumber(v):
		return toFloat(v), nil
	case isString(v):
		s, _ := asString(v)
		f, err := strconv.ParseFloat(strings.TrimFunc(s, pyIsSpace), 64)
		if err == nil || math.IsInf(f, 0) {
			return f, nil
		}
	}
	return p[0], nil
}

func filterInt(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("int", []string{"default", "base"}, []any{int64(0), int64(10)})
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64, bool:
		return intVal(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return p[0], nil
		}
		return truncFloat(x), nil
	case string, markup:
		s, _ := asString(x)
		s = strings.ReplaceAll(strings.TrimFunc(s, pyIsSpace), "_", "")
		base, _ := p[1].(int64)
		if n, err := parseIntBase(s, int(base)); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return truncFloat(f), nil
		}
	default:
		if isInt(v) {
			return v, nil
		}
	}
	return p[0], nil
}

func truncFloat(f float64) any {
	t := math.Trunc(f)
	if t >= -9.2e18 && t <= 9.2e18 {
		return int64(t)
	}
	b, _ := bigFromFloat(t)
	return b
}

func filterFormat(_ *evaluator, v any, a *callArgs) (any, error) {
	s, _ := asString(v)
	if len(a.kwVals) > 0 {
		return nil, &Error{Kind: "FilterArgumentError", Message: "format filter with keyword arguments is not supported"}
	}
	if len(a.pos) == 1 {
		return percentFormat(s, a.pos[0])
	}
	return percentFormat(s, tuple(a.pos))
}

func filterIndent(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("indent", []string{"width", "first", "blank"}, []any{int64(4), false, false})
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := p[0].(type) {
	case int64:
		ind = strings.Repeat(" ", int(max(w, 0)))
	case string:
		ind = w
	default:
		return nil, typeErrorf("indent width must be an integer or string")
	}
	s := pyStr(v) + "\n"
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1]
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n")
			if truthy(p[2]) || strings.TrimFunc(l, pyIsSpace) != "" {
				b.WriteString(ind)
			}
		} else if truthy(p[1]) {
			b.WriteString(ind)
		}
		b.WriteString(l)
	}
	return b.String(), nil
}

func filterItems(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("items", a); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case undefined:
		return []any{}, nil
	case *Object:
		return dictView{kind: "items", obj: x}.items(), nil
	}
	return nil, typeErrorf("Can only get item pairs from a mapping.")
}

func filterJoin(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("join", []string{"d", "attribute"}, []any{"", nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if p[1] != nil {
		if items, err = mapAttr(items, p[1], nil); err != nil {
			return nil, err
		}
	}
	sep := pyStr(p[0])
	parts := make([]string, len(items))
	anyMarkup := false
	for i, it := range items {
		if _, ok := it.(markup); ok {
			anyMarkup = true
		}
		parts[i] = pyStr(it)
	}
	if anyMarkup {
		for i, it := range items {
			parts[i] = escapeForMarkup(it)
		}
		return markup(strings.Join(parts, escapeForMarkup(p[0]))), nil
	}
	return strings.Join(parts, sep), nil
}

func filterList(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("list", a); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

// attrPath resolves "a.b.0" on v the way Jinja's make_attrgetter does.
func attrPath(v any, path any) (any, error) {
	if n, ok := path.(int64); ok {
		return getItem(v, n)
	}
	s, ok := asString(path)
	if !ok {
		return nil, typeErrorf("attribute must be a string or an integer")
	}
	for _, part := range strings.Split(s, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func mapAttr(items []any, attr any, def any) ([]any, error) {
	out := make([]any, len(items))
	for i, it := range items {
		v, err := attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		if _, isU := v.(undefined); isU && def != nil {
			v = def
		}
		out[i] = v
	}
	return out, nil
}

func filterMap(ev *evaluator, v any, a *callArgs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(a.pos) == 0 {
		var attr, def any
		for i, k := range a.kwNames {
			switch k {
			case "attribute":
				attr = a.kwVals[i]
			case "default":
				def = a.kwVals[i]
			default:
				return nil, &Error{Kind: "FilterArgumentError", Message: "Unexpected keyword argument '" + k + "'"}
			}
		}
		if attr == nil {
			return nil, &Error{Kind: "FilterArgumentError", Message: "map requires a filter argument"}
		}
		return mapAttr(items, attr, def)
	}
	name, ok := asString(a.pos[0])
	if !ok {
		return nil, typeErrorf("map filter name must be a string")
	}
	f, ok := filters[name]
	if !ok {
		return nil, &Error{Kind: "TemplateRuntimeError", Message: "No filter named '" + name + "' found."}
	}
	rest := &callArgs{pos: a.pos[1:], kwNames: a.kwNames, kwVals: a.kwVals}
	out := make([]any, len(items))
	for i, it := range items {
		if out[i], err = f(ev, it, rest); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func filterMinMax(sign int) filterFunc {
	return func(_ *evaluator, v any, a *callArgs) (any, error) {
		p, err := a.bind("min/max", []string{"case_sensitive", "attribute"}, []any{false, nil})
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		key := func(x any) (any, error) {
			if p[1] != nil {
				var err error
				if x, err = attrPath(x, p[1]); err != nil {
					return nil, err
				}
			}
			return sortKey(x, truthy(p[0])), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			c, _, err := pyCompare("<", k, bk)
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterSelect(keep, byAttr bool) filterFunc {
	return func(ev *evaluator, v any, a *callArgs) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		args := a.pos
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, typeErrorf("selectattr/rejectattr need an attribute name")
			}
			attr, args = args[0], args[1:]
		}
		test := func(x any) (bool, error) { return truthy(x), nil }
		if len(args) > 0 {
			name, ok := asString(args[0])
			if !ok {
				return nil, typeErrorf("test name must be a string")
			}
			t, ok := tests[name]
			if !ok {
				return nil, &Error{Kind: "TemplateRuntimeError", Message: "No test named '" + name + "' found."}
			}
			targs := args[1:]
			test = func(x any) (bool, error) { return t(x, targs) }
		}
		out := []any{}
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func filterReplace(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("replace", []string{"old", "new", "count"}, []any{required, required, nil})
	if err != nil {
		return nil, err
	}
	n := -1
	if c, ok := p[2].(int64); ok {
		n = int(c)
	}
	s := pyStr(v)
	out := strings.Replace(s, pyStr(p[0]), pyStr(p[1]), n)
	if _, ok := v.(markup); ok {
		return markup(out), nil
	}
	return out, nil
}

func filterReverse(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("reverse", a); err != nil {
		return nil, err
	}
	if s, ok := asString(v); ok {
		r := []rune(s)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return string(r), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out, nil
}

func filterRound(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("round", []string{"precision", "method"}, []any{int64(0), "common"})
	if err != nil {
		return nil, err
	}
	if !isNumber(v) {
		return nil, typeErrorf("type %s doesn't define __round__ method", typeName(v))
	}
	prec, _ := p[0].(int64)
	f := toFloat(v)
	scale := math.Pow(10, float64(prec))
	switch p[1] {
	case "common":
		return roundHalfEven(f*scale) / scale, nil
	case "ceil":
		return math.Ceil(f*scale) / scale, nil
	case "floor":
		return math.Floor(f*scale) / scale, nil
	}
	return nil, &Error{Kind: "FilterArgumentError", Message: "method must be common, ceil or floor"}
}

// roundHalfEven approximates Python's round() (ties to even).
func roundHalfEven(x float64) float64 { return math.RoundToEven(x) }

func filterSafe(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("safe", a); err != nil {
		return nil, err
	}
	return markup(pyStr(v)), nil
}

func filterSlice(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("slice", []string{"slices", "fill_with"}, []any{required, nil})
	if err != nil {
		return nil, err
	}
	n, ok := p[0].(int64)
	if !ok || n <= 0 {
		return nil, valueErrorf("slices must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	per, extra := len(items)/int(n), len(items)%int(n)
	out := []any{}
	for i := 0; i < int(n); i++ {
		start := i*per + min(i, extra)
		end := start + per
		if i < extra {
			end++
		}
		row := append([]any{}, items[start:end]...)
		if p[1] != nil && i >= extra {
			row = append(row, p[1])
		}
		out = append(out, row)
	}
	return out, nil
}

func filterSort(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("sort", []string{"reverse", "case_sensitive", "attribute"}, []any{false, false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := append([]any{}, items...)
	err = sortValues(out, func(x any) (any, error) {
		if p[2] != nil {
			var err error
			if x, err = attrPath(x, p[2]); err != nil {
				return nil, err
			}
		}
		return sortKey(x, truthy(p[1])), nil
	}, truthy(p[0]))
	return out, err
}

func filterString(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("string", a); err != nil {
		return nil, err
	}
	if m, ok := v.(markup); ok {
		return m, nil
	}
	return pyStr(v), nil
}

func filterSum(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("sum", []string{"attribute", "start"}, []any{nil, int64(0)})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if p[0] != nil {
		if items, err = mapAttr(items, p[0], nil); err != nil {
			return nil, err
		}
	}
	total := p[1]
	for _, it := range items {
		if total, err = binaryOp("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterToJSON(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, []any{false, nil, nil, false})
	if err != nil {
		return nil, err
	}
	o := defaultJSONOptions()
	o.EnsureASCII = truthy(p[0])
	o.SortKeys = truthy(p[3])
	switch ind := p[1].(type) {
	case nil:
	case int64:
		s := strings.Repeat(" ", int(max(ind, 0)))
		o.Indent = &s
		o.ItemSep = ","
	case string:
		o.Indent = &ind
		o.ItemSep = ","
	default:
		return nil, typeErrorf("indent must be an integer or a string")
	}
	if p[2] != nil {
		seps, ok := seqOf(p[2])
		if !ok || len(seps) != 2 {
			return nil, valueErrorf("separators must be a pair of strings")
		}
		is, ok1 := asString(seps[0])
		ks, ok2 := asString(seps[1])
		if !ok1 || !ok2 {
			return nil, valueErrorf("separators must be a pair of strings")
		}
		o.ItemSep, o.KeySep = is, ks
	}
	return pyJSONDumps(v, o)
}

func filterTrim(_ *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("trim", []string{"chars"}, []any{nil})
	if err != nil {
		return nil, err
	}
	var chars *string
	if p[0] != nil {
		s := pyStr(p[0])
		chars = &s
	}
	out := pyStrip(pyStr(v), chars, true, true)
	if _, ok := v.(markup); ok {
		return markup(out), nil
	}
	return out, nil
}

func filterUnique(ev *evaluator, v any, a *callArgs) (any, error) {
	p, err := a.bind("unique", []string{"case_sensitive", "attribute"}, []any{false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	var seen []any
	for _, it := range items {
		k := it
		if p[1] != nil {
			if k, err = attrPath(it, p[1]); err != nil {
				return nil, err
			}
		}
		k = sortKey(k, truthy(p[0]))
		if err := ev.charge(len(seen)); err != nil {
			return nil, err
		}
		dup := false
		for _, s := range seen {
			if pyEqual(s, k) {
				dup = true
				break
			}
		}
		if !dup {
			seen = append(seen, k)
			out = append(out, it)
		}
	}
	return out, nil
}

func filterWordcount(_ *evaluator, v any, a *callArgs) (any, error) {
	if err := noArgs("wordcount", a); err != nil {
		return nil, err
	}
	n := 0
	in := false
	for _, r := range pyStr(v) {
		w := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
		if w && !in {
			n++
		}
		in = w
	}
	return int64(n), nil
}
