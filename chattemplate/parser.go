package chattemplate

import (
	"fmt"
	"strings"
)

// parser builds the statement tree from the token stream, following the
// grammar of jinja2.parser.Parser.
type parser struct {
	toks []token
	pos  int
	// names referenced in the macro bodies being parsed (innermost last),
	// to know whether a macro uses varargs, kwargs or caller.
	macroNames []map[string]bool
	// names are all the names the template reads (Template.Reads).
	names map[string]bool
	depth int
}

// maxParseDepth bounds expression and block nesting.
const maxParseDepth = 200

// parse returns the statement tree of src and the names its expressions
// read.
func parse(src string) ([]node, map[string]bool, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, nil, err
	}
	p := &parser{toks: toks, names: map[string]bool{}}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, nil, err
	}
	if end != "" {
		return nil, nil, syntaxErrorf(p.cur().line, "Encountered unknown tag '%s'.", end)
	}
	return body, p.names, nil
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) failf(format string, args ...any) error {
	return syntaxErrorf(p.cur().line, format, args...)
}

func (p *parser) isOp(v string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == v
}

func (p *parser) isName(v string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == v
}

func (p *parser) skipOp(v string) bool {
	if p.isOp(v) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(v string) bool {
	if p.isName(v) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(v string) error {
	if !p.skipOp(v) {
		return p.failf("expected token '%s', got %s", v, p.cur().describe())
	}
	return nil
}

func (p *parser) expectKind(k tokKind) (token, error) {
	if p.cur().kind != k {
		return token{}, p.failf("expected token '%s', got %s", k, p.cur().describe())
	}
	return p.next(), nil
}

func (p *parser) expectName() (string, error) {
	t, err := p.expectKind(tokName)
	return t.val, err
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.failf("template nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse reads statements until a block tag whose name is in ends (which
// it consumes up to the name) and returns that name, or until the end of
// the template (returning "").
func (p *parser) subparse(ends []string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if len(ends) > 0 {
				return nil, "", p.failf("Unexpected end of template. Jinja was looking for the following tags: %s.", quoteList(ends))
			}
			return body, "", nil
		case tokData:
			p.next()
			body = append(body, &dataNode{text: t.val})
		case tokVarBegin:
			p.next()
			e, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tokVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &printNode{e: e})
		case tokBlockBegin:
			p.next()
			nt := p.cur()
			if nt.kind != tokName {
				return nil, "", p.failf("tag name expected")
			}
			for _, e := range ends {
				if nt.val == e {
					p.next()
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, "", p.failf("unexpected %s", t.describe())
		}
	}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, " or ")
}

func (p *parser) endBlock() error {
	_, err := p.expectKind(tokBlockEnd)
	return err
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(t.line)
	case "set":
		return p.parseSet(t.line)
	case "macro":
		return p.parseMacro()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "break", "continue":
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "block":
		if _, err := p.expectName(); err != nil {
			return nil, err
		}
		p.skipName("scoped")
		p.skipName("required")
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endblock"})
		if err != nil {
			return nil, err
		}
		if p.cur().kind == tokName {
			p.next()
		}
		return &blockNode{body: body}, p.endBlock()
	case "generation":
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &blockNode{body: body}, p.endBlock()
	}
	return nil, syntaxErrorf(t.line, "Encountered unknown tag '%s'.", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endBlock(); err != nil {
				return nil, err
			}
			n.els, _, err = p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return n, p.endBlock()
	}
}

func (p *parser) parseFor(line int) (node, error) {
	target, err := p.parseAssignTarget(false, "in")
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.failf("expected token 'in', got %s", p.cur().describe())
	}
	iter, err := p.parseTuple(false, false, "recursive")
	if err != nil {
		return nil, err
	}
	n := &forNode{target: target, iter: iter, line: line}
	if p.skipName("if") {
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.failf("recursive for loops are not supported")
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, end, err := p.subparse([]string{"endfor", "else"})
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.subparse([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return n, p.endBlock()
}

func (p *parser) parseSet(line int) (node, error) {
	target, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		e, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: target, e: e}, p.endBlock()
	}
	filters, err := p.parseFilterChain()
	if err != nil {
		return nil, err
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.subparse([]string{"endset"})
	if err != nil {
		return nil, err
	}
	return &setBlockNode{target: target, filters: filters, body: body}, p.endBlock()
}

// parseFilterChain parses "|f(args)|g" (the leading pipe optional for the
// first filter of a {% filter %} block).
func (p *parser) parseFilterChain() ([]*filterExpr, error) {
	var out []*filterExpr
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func (p *parser) parseFilterBlock() (node, error) {
	first, err := p.parseFilter(nil)
	if err != nil {
		return nil, err
	}
	rest, err := p.parseFilterChain()
	if err != nil {
		return nil, err
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.subparse([]string{"endfilter"})
	if err != nil {
		return nil, err
	}
	return &filterBlockNode{filters: append([]*filterExpr{first}, rest...), body: body}, p.endBlock()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for !p.isBlockEnd() {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.vals = append(n.vals, v)
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.subparse([]string{"endwith"})
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.endBlock()
}

func (p *parser) isBlockEnd() bool { return p.cur().kind == tokBlockEnd }

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		pname, err := p.expectName()
		if err != nil {
			return nil, err
		}
		m.params = append(m.params, pname)
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return nil, p.failf("non-default argument follows default argument")
		}
	}
	p.next()
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	p.macroNames = append(p.macroNames, map[string]bool{})
	body, _, err := p.subparse([]string{"endmacro"})
	used := p.macroNames[len(p.macroNames)-1]
	p.macroNames = p.macroNames[:len(p.macroNames)-1]
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tokName {
		p.next()
	}
	m.body = body
	m.usesVarargs, m.usesKwargs, m.usesCaller = used["varargs"], used["kwargs"], used["caller"]
	return &macroNode{m: m}, p.endBlock()
}

// parseAssignTarget parses a name, a tuple of names, or (withNamespace)
// name.attr. Parsing stops before a name listed in extraEnd.
func (p *parser) parseAssignTarget(withNamespace bool, extraEnd ...string) (assignTarget, error) {
	t := assignTarget{line: p.cur().line}
	if withNamespace && p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "." {
		t.names = []string{p.next().val}
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return t, err
		}
		t.nsAttr = attr
		return t, nil
	}
	paren := p.skipOp("(")
	for {
		name, err := p.expectName()
		if err != nil {
			return t, err
		}
		switch name {
		case "true", "false", "none", "True", "False", "None":
			return t, p.failf("can't assign to constant '%s'", name)
		}
		t.names = append(t.names, name)
		if !p.skipOp(",") {
			break
		}
		t.tuple = true
		if p.isOp(")") || p.isOp("=") || p.isBlockEnd() {
			break
		}
		stop := false
		for _, e := range extraEnd {
			if p.isName(e) {
				stop = true
			}
		}
		if stop {
			break
		}
	}
	if paren {
		t.tuple = true
		if err := p.expectOp(")"); err != nil {
			return t, err
		}
	}
	return t, nil
}

// parseTuple parses a comma-separated expression list; one item without a
// trailing comma is returned as is. withCond chooses conditional
// expressions (a if b else c) for the items; explicit allows "()".
func (p *parser) parseTuple(withCond, explicit bool, extraEnd ...string) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
		}
		if p.tupleEnds(extraEnd) {
			break
		}
		e, err := p.parseExpression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		if len(items) == 1 {
			return items[0], nil
		}
		if !explicit {
			return nil, p.failf("Expected an expression, got %s", p.cur().describe())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) tupleEnds(extra []string) bool {
	t := p.cur()
	switch t.kind {
	case tokVarEnd, tokBlockEnd, tokEOF:
		return true
	case tokOp:
		return t.val == ")"
	case tokName:
		for _, e := range extra {
			if t.val == e {
				return true
			}
		}
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		line := p.next().line
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.skipName("else") {
			if no, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{cond: cond, yes: e, no: no, line: line}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.skipName("or") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.skipName("and") {
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{e: e}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &cmpExpr{first: first, line: line}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tokName && p.peek().val == "in":
			op = "not in"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	items := []expr{first}
	for p.skipOp("~") {
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if len(items) == 1 {
		return first, nil
	}
	return &concatExpr{items: items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "**", l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	switch {
	case p.isOp("-"):
		line := p.next().line
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &negExpr{e: inner, line: line}
	case p.isOp("+"):
		line := p.next().line
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &posExpr{e: inner, line: line}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		if n := len(p.macroNames); n > 0 {
			p.macroNames[n-1][t.val] = true
		}
		p.names[t.val] = true
		return &nameExpr{name: t.val, line: t.line}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tokInt, tokFloat:
		p.next()
		return &constExpr{v: t.num}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(true, true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			var items []expr
			for !p.isOp("]") {
				if len(items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				items = append(items, e)
			}
			p.next()
			return &listExpr{items: items}, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.failf("unexpected %s", t.describe())
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp(".") || p.isOp("["):
			var err error
			if e, err = p.parseSubscript(e); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			p.next()
			t, err := p.parseTest(e)
			if err != nil {
				return nil, err
			}
			e = t
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.kind {
		case tokName:
			return &attrExpr{obj: obj, attr: a.val}, nil
		case tokInt:
			return &itemExpr{obj: obj, key: &constExpr{v: a.num}}, nil
		}
		return nil, syntaxErrorf(a.line, "expected name or number")
	}
	var keys []expr
	for !p.isOp("]") {
		if len(keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		k, err := p.parseSubscribed(obj)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	p.next()
	switch len(keys) {
	case 0:
		return nil, p.failf("expected subscript expression")
	case 1:
		if s, ok := keys[0].(*sliceExpr); ok {
			return s, nil
		}
		return &itemExpr{obj: obj, key: keys[0]}, nil
	}
	return &itemExpr{obj: obj, key: &tupleExpr{items: keys}}, nil
}

// parseSubscribed parses one subscript: an expression or a slice a:b:c.
func (p *parser) parseSubscribed(obj expr) (expr, error) {
	var parts [3]expr
	if !p.isOp(":") {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		parts[0] = e
	}
	p.next() // ':'
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[1] = e
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			e, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			parts[2] = e
		}
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// parseCallArgs parses "(a, b, k=v)"; the opening parenthesis is current.
func (p *parser) parseCallArgs() (args []expr, kwNames []string, kwVals []expr, err error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, err
	}
	for !p.isOp(")") {
		if len(args)+len(kwVals) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, nil, p.failf("*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, nil, err
			}
			kwNames = append(kwNames, name)
			kwVals = append(kwVals, v)
			continue
		}
		if len(kwVals) > 0 {
			return nil, nil, nil, p.failf("invalid syntax for function call expression")
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, v)
	}
	p.next()
	return args, kwNames, kwVals, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kn, kv, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwNames: kn, kwVals: kv, line: line}, nil
}

// parseFilter parses "name" or "name(args)" after a pipe.
func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	line := p.cur().line
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.next()
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	fn, ok := filters[name]
	if !ok {
		return nil, &Error{Kind: "TemplateAssertionError", Message: fmt.Sprintf("No filter named '%s'.", name), Line: line}
	}
	f := &filterExpr{arg: arg, name: name, fn: fn, line: line}
	if p.isOp("(") {
		if f.args, f.kwNames, f.kwVals, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	line := p.cur().line
	negate := p.skipName("not")
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.next()
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	fn, ok := tests[name]
	if !ok {
		return nil, &Error{Kind: "TemplateAssertionError", Message: fmt.Sprintf("No test named '%s'.", name), Line: line}
	}
	t := &testExpr{arg: arg, name: name, fn: fn, negate: negate, line: line}
	c := p.cur()
	switch {
	case p.isOp("("):
		args, kn, _, err := p.parseCallArgs()
		if err != nil {
			return nil, err
		}
		if len(kn) > 0 {
			return nil, p.failf("keyword arguments to tests are not supported")
		}
		t.args = args
	case c.kind == tokString || c.kind == tokInt || c.kind == tokFloat ||
		(c.kind == tokOp && (c.val == "[" || c.val == "{")) ||
		(c.kind == tokName && c.val != "else" && c.val != "or" && c.val != "and"):
		if p.isName("is") {
			return nil, p.failf("You cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args = []expr{a}
	}
	return t, nil
}
