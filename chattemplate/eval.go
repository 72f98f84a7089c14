package chattemplate

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"unicode/utf8"
)

// Limits that keep a hostile template from running away; Jinja has no loop
// without an end, but nested loops and big ranges can still take forever.
const (
	maxSteps       = 10_000_000
	maxOutputBytes = 64 << 20
	maxCallDepth   = 500
	maxRange       = 100_000 // the sandbox's MAX_RANGE
)

// frame is one variable scope: the template level, a loop iteration, a
// macro call or a with block.
type frame struct {
	vars   map[string]any
	parent *frame
}

func newFrame(parent *frame) *frame {
	return &frame{vars: make(map[string]any), parent: parent}
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// ctl is the control-flow outcome of running statements.
type ctl int

const (
	ctlNone ctl = iota
	ctlBreak
	ctlContinue
)

// evaluator runs one render.
type evaluator struct {
	steps    int
	maxSteps int
	depth    int
}

// charge spends n steps of the budget on work done inside one operation
// (a filter over a long list, a membership test), so that such work cannot
// run unbounded either.
func (ev *evaluator) charge(n int) error {
	ev.steps += n
	return ev.step()
}

// workSize estimates the work of handing v to a filter: its length.
func workSize(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case tuple:
		return len(x)
	case string:
		return len(x) / 16
	case *Object:
		return x.Len()
	case rangeVal:
		return int(x.len())
	}
	return 0
}

func (ev *evaluator) step() error {
	ev.steps++
	if ev.steps > ev.maxSteps {
		return runtimeErrorf("TemplateRuntimeError", "template exceeded %d evaluation steps", ev.maxSteps)
	}
	return nil
}

func (ev *evaluator) write(out *strings.Builder, s string) error {
	out.WriteString(s)
	if out.Len() > maxOutputBytes {
		return runtimeErrorf("TemplateRuntimeError", "template output exceeded %d bytes", maxOutputBytes)
	}
	return nil
}

// macro is a {% macro %} bound to the scope it was defined in.
type macro struct {
	def     *macroDef
	closure *frame
	name    string
}

// loopInfo is the "loop" variable of a for loop.
type loopInfo struct {
	items []any
	index int
}

func (ev *evaluator) execBody(nodes []node, fr *frame, out *strings.Builder) (ctl, error) {
	for _, n := range nodes {
		c, err := ev.exec(n, fr, out)
		if err != nil || c != ctlNone {
			return c, err
		}
	}
	return ctlNone, nil
}

func (ev *evaluator) exec(n node, fr *frame, out *strings.Builder) (ctl, error) {
	if err := ev.step(); err != nil {
		return ctlNone, err
	}
	switch n := n.(type) {
	case *dataNode:
		return ctlNone, ev.write(out, n.text)
	case *printNode:
		v, err := ev.eval(n.e, fr)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, ev.write(out, pyStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := ev.eval(c, fr)
			if err != nil {
				return ctlNone, err
			}
			if truthy(v) {
				return ev.execBody(n.bodies[i], fr, out)
			}
		}
		return ev.execBody(n.els, fr, out)
	case *forNode:
		return ctlNone, ev.execFor(n, fr, out)
	case *setNode:
		v, err := ev.eval(n.e, fr)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, ev.assign(n.target, v, fr)
	case *setBlockNode:
		var b strings.Builder
		if _, err := ev.execBody(n.body, fr, &b); err != nil {
			return ctlNone, err
		}
		var v any = b.String()
		for _, f := range n.filters {
			var err error
			if v, err = ev.applyFilter(f, v, fr); err != nil {
				return ctlNone, err
			}
		}
		return ctlNone, ev.assign(n.target, v, fr)
	case *filterBlockNode:
		var b strings.Builder
		if _, err := ev.execBody(n.body, fr, &b); err != nil {
			return ctlNone, err
		}
		var v any = b.String()
		for _, f := range n.filters {
			var err error
			if v, err = ev.applyFilter(f, v, fr); err != nil {
				return ctlNone, err
			}
		}
		return ctlNone, ev.write(out, pyStr(v))
	case *macroNode:
		fr.vars[n.m.name] = &macro{def: n.m, closure: fr, name: n.m.name}
		return ctlNone, nil
	case *withNode:
		inner := newFrame(fr)
		for i, t := range n.targets {
			v, err := ev.eval(n.vals[i], fr)
			if err != nil {
				return ctlNone, err
			}
			if err := ev.assign(t, v, inner); err != nil {
				return ctlNone, err
			}
		}
		return ev.execBody(n.body, inner, out)
	case *blockNode:
		return ev.execBody(n.body, fr, out)
	case *breakNode:
		return ctlBreak, nil
	case *continueNode:
		return ctlContinue, nil
	}
	return ctlNone, fmt.Errorf("chattemplate: internal error: unknown node %T", n)
}

func (ev *evaluator) execFor(n *forNode, fr *frame, out *strings.Builder) error {
	seq, err := ev.eval(n.iter, fr)
	if err != nil {
		return err
	}
	items, err := iterate(seq)
	if err != nil {
		return err
	}
	if n.cond != nil {
		var kept []any
		for _, it := range items {
			if err := ev.step(); err != nil {
				return err
			}
			tmp := newFrame(fr)
			if err := ev.assign(n.target, it, tmp); err != nil {
				return err
			}
			c, err := ev.eval(n.cond, tmp)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := ev.execBody(n.els, newFrame(fr), out)
		return err
	}
	li := &loopInfo{items: items}
	for i, it := range items {
		if err := ev.step(); err != nil {
			return err
		}
		li.index = i
		inner := newFrame(fr)
		if err := ev.assign(n.target, it, inner); err != nil {
			return err
		}
		inner.vars["loop"] = li
		c, err := ev.execBody(n.body, inner, out)
		if err != nil {
			return err
		}
		if c == ctlBreak {
			break
		}
	}
	return nil
}

// assign binds a value to a set/for target in fr.
func (ev *evaluator) assign(t assignTarget, v any, fr *frame) error {
	if t.nsAttr != "" {
		obj, ok := fr.lookup(t.names[0])
		ns, isNS := obj.(*namespace)
		if !ok || !isNS {
			return &Error{Kind: "TemplateRuntimeError", Message: "cannot assign attribute on non-namespace object", Line: t.line}
		}
		ns.attrs.Set(t.nsAttr, v)
		return nil
	}
	if !t.tuple {
		fr.vars[t.names[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) < len(t.names) {
		return valueErrorf("not enough values to unpack (expected %d, got %d)", len(t.names), len(items))
	}
	if len(items) > len(t.names) {
		return valueErrorf("too many values to unpack (expected %d)", len(t.names))
	}
	for i, name := range t.names {
		fr.vars[name] = items[i]
	}
	return nil
}

// iterate lists the items Python's iter() would give.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *Object:
		out := make([]any, 0, x.Len())
		for _, k := range x.Keys() {
			out = append(out, k)
		}
		return out, nil
	case string:
		return chars(x), nil
	case markup:
		return chars(string(x)), nil
	case undefined:
		return nil, nil
	case rangeVal:
		return x.items(), nil
	case dictView:
		return x.items(), nil
	}
	return nil, typeErrorf("'%s' object is not iterable", typeName(v))
}

func chars(s string) []any {
	out := make([]any, 0, utf8.RuneCountInString(s))
	for _, r := range s {
		out = append(out, string(r))
	}
	return out
}

// failIfUndefined turns an Undefined operand into its error.
func failIfUndefined(vs ...any) error {
	for _, v := range vs {
		if u, ok := v.(undefined); ok {
			return u.err()
		}
	}
	return nil
}

func (ev *evaluator) eval(e expr, fr *frame) (any, error) {
	if err := ev.step(); err != nil {
		return nil, err
	}
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := fr.lookup(e.name); ok {
			return v, nil
		}
		return undefined{name: e.name}, nil
	case *attrExpr:
		obj, err := ev.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, e.attr)
	case *itemExpr:
		obj, err := ev.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		key, err := ev.eval(e.key, fr)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return ev.evalSlice(e, fr)
	case *callExpr:
		fn, err := ev.eval(e.fn, fr)
		if err != nil {
			return nil, err
		}
		a, err := ev.evalArgs(e.args, e.kwNames, e.kwVals, fr)
		if err != nil {
			return nil, err
		}
		v, err := ev.call(fn, a)
		return v, withLine(err, e.line)
	case *filterExpr:
		v, err := ev.eval(e.arg, fr)
		if err != nil {
			return nil, err
		}
		return ev.applyFilter(e, v, fr)
	case *testExpr:
		v, err := ev.eval(e.arg, fr)
		if err != nil {
			return nil, err
		}
		args := make([]any, len(e.args))
		for i, a := range e.args {
			if args[i], err = ev.eval(a, fr); err != nil {
				return nil, err
			}
		}
		ok, err := e.fn(v, args)
		if err != nil {
			return nil, withLine(err, e.line)
		}
		return ok != e.negate, nil
	case *binExpr:
		l, err := ev.eval(e.l, fr)
		if err != nil {
			return nil, err
		}
		r, err := ev.eval(e.r, fr)
		if err != nil {
			return nil, err
		}
		v, err := binaryOp(e.op, l, r)
		return v, withLine(err, e.line)
	case *cmpExpr:
		l, err := ev.eval(e.first, fr)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			r, err := ev.eval(e.rest[i], fr)
			if err != nil {
				return nil, err
			}
			if err := ev.charge(workSize(r)); err != nil {
				return nil, err
			}
			ok, err := compareOp(op, l, r)
			if err != nil {
				return nil, withLine(err, e.line)
			}
			if !ok {
				return false, nil
			}
			l = r
		}
		return true, nil
	case *andExpr:
		l, err := ev.eval(e.l, fr)
		if err != nil || !truthy(l) {
			return l, err
		}
		return ev.eval(e.r, fr)
	case *orExpr:
		l, err := ev.eval(e.l, fr)
		if err != nil || truthy(l) {
			return l, err
		}
		return ev.eval(e.r, fr)
	case *notExpr:
		v, err := ev.eval(e.e, fr)
		if err != nil {
			return nil, err
		}
		return !truthy(v), nil
	case *negExpr:
		v, err := ev.eval(e.e, fr)
		if err != nil {
			return nil, err
		}
		r, err := unaryOp("-", v)
		return r, withLine(err, e.line)
	case *posExpr:
		v, err := ev.eval(e.e, fr)
		if err != nil {
			return nil, err
		}
		r, err := unaryOp("+", v)
		return r, withLine(err, e.line)
	case *condExpr:
		c, err := ev.eval(e.cond, fr)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return ev.eval(e.yes, fr)
		}
		if e.no == nil {
			return undefined{hint: fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined.", e.line)}, nil
		}
		return ev.eval(e.no, fr)
	case *listExpr:
		out := make([]any, len(e.items))
		for i, it := range e.items {
			v, err := ev.eval(it, fr)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *tupleExpr:
		out := make(tuple, len(e.items))
		for i, it := range e.items {
			v, err := ev.eval(it, fr)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
		o := NewObject()
		for i, k := range e.keys {
			kv, err := ev.eval(k, fr)
			if err != nil {
				return nil, err
			}
			ks, ok := asString(kv)
			if !ok {
				return nil, typeErrorf("dict keys must be strings here, got '%s'", typeName(kv))
			}
			v, err := ev.eval(e.vals[i], fr)
			if err != nil {
				return nil, err
			}
			o.Set(ks, v)
		}
		return o, nil
	case *concatExpr:
		var b strings.Builder
		for _, it := range e.items {
			v, err := ev.eval(it, fr)
			if err != nil {
				return nil, err
			}
			writeStr(&b, v)
			if b.Len() > maxOutputBytes {
				return nil, runtimeErrorf("TemplateRuntimeError", "string exceeded %d bytes", maxOutputBytes)
			}
		}
		return b.String(), nil
	}
	return nil, fmt.Errorf("chattemplate: internal error: unknown expression %T", e)
}

// withLine records the template line on an *Error that has none.
func withLine(err error, line int) error {
	if e, ok := err.(*Error); ok && e.Line == 0 {
		e.Line = line
	}
	return err
}

// callArgs are evaluated call arguments.
type callArgs struct {
	pos     []any
	kwNames []string
	kwVals  []any
}

func (ev *evaluator) evalArgs(pos []expr, kn []string, kv []expr, fr *frame) (*callArgs, error) {
	a := &callArgs{pos: make([]any, len(pos)), kwNames: kn, kwVals: make([]any, len(kv))}
	for i, p := range pos {
		v, err := ev.eval(p, fr)
		if err != nil {
			return nil, err
		}
		a.pos[i] = v
	}
	for i, p := range kv {
		v, err := ev.eval(p, fr)
		if err != nil {
			return nil, err
		}
		a.kwVals[i] = v
	}
	return a, nil
}

// required marks a parameter without a default in bind.
type requiredMarker struct{}

var required any = requiredMarker{}

// bind matches arguments to named parameters like a Python call; defaults
// holds one entry per parameter (required for none).
func (a *callArgs) bind(fname string, params []string, defaults []any) ([]any, error) {
	if len(a.pos) > len(params) {
		return nil, typeErrorf("%s() takes at most %d argument(s) (%d given)", fname, len(params), len(a.pos))
	}
	out := make([]any, len(params))
	set := make([]bool, len(params))
	for i, v := range a.pos {
		out[i], set[i] = v, true
	}
	for i, name := range a.kwNames {
		j := indexOf(params, name)
		if j < 0 {
			return nil, typeErrorf("%s() got an unexpected keyword argument '%s'", fname, name)
		}
		if set[j] {
			return nil, typeErrorf("%s() got multiple values for argument '%s'", fname, name)
		}
		out[j], set[j] = a.kwVals[i], true
	}
	for i := range params {
		if !set[i] {
			if defaults[i] == required {
				return nil, typeErrorf("%s() missing required argument '%s'", fname, params[i])
			}
			out[i] = defaults[i]
		}
	}
	return out, nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func (ev *evaluator) call(fn any, a *callArgs) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return ev.callMacro(f, a)
	case *builtin:
		return f.fn(ev, a)
	case *boundMethod:
		return callMethod(ev, f, a)
	case undefined:
		return nil, f.err()
	}
	return nil, typeErrorf("'%s' object is not callable", typeName(fn))
}

func (ev *evaluator) callMacro(m *macro, a *callArgs) (any, error) {
	d := m.def
	ev.depth++
	defer func() { ev.depth-- }()
	if ev.depth > maxCallDepth {
		return nil, runtimeErrorf("RecursionError", "maximum recursion depth exceeded")
	}
	fr := newFrame(m.closure)
	np := len(d.params)
	if len(a.pos) > np && !d.usesVarargs {
		return nil, typeErrorf("macro '%s' takes not more than %d argument(s)", d.name, np)
	}
	set := make([]bool, np)
	for i, v := range a.pos {
		if i < np {
			fr.vars[d.params[i]] = v
			set[i] = true
		}
	}
	var varargs tuple = tuple{}
	if len(a.pos) > np {
		varargs = append(varargs, a.pos[np:]...)
	}
	kwargs := NewObject()
	for i, name := range a.kwNames {
		j := indexOf(d.params, name)
		switch {
		case j >= 0 && set[j]:
			return nil, typeErrorf("macro '%s' got multiple values for argument '%s'", d.name, name)
		case j >= 0:
			fr.vars[name] = a.kwVals[i]
			set[j] = true
		case name == "caller" && d.usesCaller:
			fr.vars["caller"] = a.kwVals[i]
		case d.usesKwargs:
			kwargs.Set(name, a.kwVals[i])
		default:
			return nil, typeErrorf("macro '%s' takes no keyword argument '%s'", d.name, name)
		}
	}
	firstDefault := np - len(d.defaults)
	for i, name := range d.params {
		if set[i] {
			continue
		}
		if i >= firstDefault {
			v, err := ev.eval(d.defaults[i-firstDefault], fr)
			if err != nil {
				return nil, err
			}
			fr.vars[name] = v
			continue
		}
		fr.vars[name] = undefined{name: name, hint: fmt.Sprintf("parameter '%s' was not provided", name)}
	}
	fr.vars["varargs"] = varargs
	fr.vars["kwargs"] = kwargs
	if _, ok := fr.vars["caller"]; !ok {
		fr.vars["caller"] = undefined{name: "caller"}
	}
	var b strings.Builder
	if _, err := ev.execBody(d.body, fr, &b); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func (ev *evaluator) applyFilter(f *filterExpr, v any, fr *frame) (any, error) {
	if err := ev.charge(workSize(v)); err != nil {
		return nil, err
	}
	a, err := ev.evalArgs(f.args, f.kwNames, f.kwVals, fr)
	if err != nil {
		return nil, err
	}
	r, err := f.fn(ev, v, a)
	return r, withLine(err, f.line)
}

func (ev *evaluator) evalSlice(e *sliceExpr, fr *frame) (any, error) {
	obj, err := ev.eval(e.obj, fr)
	if err != nil {
		return nil, err
	}
	var idx [3]any
	for i, part := range []expr{e.start, e.stop, e.step} {
		if part == nil {
			continue
		}
		if idx[i], err = ev.eval(part, fr); err != nil {
			return nil, err
		}
	}
	return sliceValue(obj, idx[0], idx[1], idx[2])
}

// sliceValue is obj[start:stop:step] for lists, tuples and strings.
func sliceValue(obj, start, stop, step any) (any, error) {
	if err := failIfUndefined(obj); err != nil {
		return nil, err
	}
	var items []any
	isStr := false
	switch x := obj.(type) {
	case []any:
		items = x
	case tuple:
		items = x
	case string, markup:
		s, _ := asString(x)
		items = chars(s)
		isStr = true
	case rangeVal:
		items = x.items()
	default:
		return nil, typeErrorf("'%s' object is not subscriptable", typeName(obj))
	}
	n := int64(len(items))
	st := int64(1)
	if step != nil {
		s, ok := sliceIndex(step)
		if !ok {
			return nil, typeErrorf("slice indices must be integers or None")
		}
		if s == 0 {
			return nil, valueErrorf("slice step cannot be zero")
		}
		st = s
	}
	lo, hi := int64(0), n
	if st < 0 {
		lo, hi = n-1, -1
	}
	clamp := func(v any, def int64) (int64, error) {
		if v == nil {
			return def, nil
		}
		i, ok := sliceIndex(v)
		if !ok {
			return 0, typeErrorf("slice indices must be integers or None")
		}
		if i < 0 {
			i += n
			if i < 0 {
				if st < 0 {
					return -1, nil
				}
				return 0, nil
			}
		}
		if i >= n {
			if st < 0 {
				return n - 1, nil
			}
			return n, nil
		}
		return i, nil
	}
	var err error
	if lo, err = clamp(start, lo); err != nil {
		return nil, err
	}
	if hi, err = clamp(stop, hi); err != nil {
		return nil, err
	}
	var out []any
	if st > 0 {
		for i := lo; i < hi; i += st {
			out = append(out, items[i])
		}
	} else {
		for i := lo; i > hi; i += st {
			out = append(out, items[i])
		}
	}
	switch obj.(type) {
	case tuple:
		return tuple(out), nil
	case []any, rangeVal:
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	if isStr {
		var b strings.Builder
		for _, c := range out {
			b.WriteString(c.(string))
		}
		if m, ok := obj.(markup); ok {
			_ = m
			return markup(b.String()), nil
		}
		return b.String(), nil
	}
	return out, nil
}

func sliceIndex(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.Sign() < 0 {
			return math.MinInt64 / 2, true
		}
		return math.MaxInt64 / 2, true
	}
	return 0, false
}

// getAttr is jinja2's sandboxed getattr: Python attributes (methods) first,
// then items.
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, x.err()
	case *Object:
		if isMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
		if unsafeMethod(obj, name) {
			return unsafeUndefined(obj, name), nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := x.attrs.Get(name); ok {
			return v, nil
		}
	case *loopInfo:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	default:
		if isMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
		if unsafeMethod(obj, name) {
			return unsafeUndefined(obj, name), nil
		}
	}
	return undefined{name: name, obj: obj, hasObj: true}, nil
}

func unsafeUndefined(obj any, name string) undefined {
	return undefined{name: name, obj: obj, hasObj: true, kind: "SecurityError",
		hint: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj))}
}

// getItem is jinja2's getitem: obj[key], falling back to an attribute for
// string keys.
func getItem(obj, key any) (any, error) {
	if u, ok := obj.(undefined); ok {
		return nil, u.err()
	}
	switch x := obj.(type) {
	case *Object:
		if k, ok := asString(key); ok {
			if v, ok := x.Get(k); ok {
				return v, nil
			}
		}
	case []any, tuple, string, markup, rangeVal:
		if i, ok := sliceIndex(key); ok {
			var items []any
			switch y := x.(type) {
			case []any:
				items = y
			case tuple:
				items = y
			case rangeVal:
				items = y.items()
			default:
				s, _ := asString(y)
				items = chars(s)
			}
			if i < 0 {
				i += int64(len(items))
			}
			if i >= 0 && i < int64(len(items)) {
				return items[i], nil
			}
			return undefined{obj: obj, hasObj: true, hint: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), pyRepr(key))}, nil
		}
	case *namespace:
		if k, ok := asString(key); ok {
			if v, ok := x.attrs.Get(k); ok {
				return v, nil
			}
		}
	case *loopInfo:
	default:
		if _, ok := key.(tuple); !ok && !isString(key) {
			return undefined{obj: obj, hasObj: true, hint: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), pyRepr(key))}, nil
		}
	}
	if k, ok := asString(key); ok {
		return getAttr(obj, k)
	}
	return undefined{obj: obj, hasObj: true, hint: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), pyRepr(key))}, nil
}

func (l *loopInfo) attr(name string) (any, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index + 1), true
	case "index0":
		return int64(l.index), true
	case "revindex":
		return int64(n - l.index), true
	case "revindex0":
		return int64(n - l.index - 1), true
	case "first":
		return l.index == 0, true
	case "last":
		return l.index == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if l.index == 0 {
			return undefined{hint: "there is no previous item", name: "previtem"}, true
		}
		return l.items[l.index-1], true
	case "nextitem":
		if l.index == n-1 {
			return undefined{hint: "there is no next item", name: "nextitem"}, true
		}
		return l.items[l.index+1], true
	case "cycle":
		return &builtin{name: "cycle", fn: func(_ *evaluator, a *callArgs) (any, error) {
			if len(a.pos) == 0 {
				return nil, typeErrorf("no items for cycling given")
			}
			return a.pos[l.index%len(a.pos)], nil
		}}, true
	}
	return nil, false
}
