package chattemplate

// Statement nodes.
type (
	node interface{}

	dataNode  struct{ text string }
	printNode struct{ e expr }
	ifNode    struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		target assignTarget
		iter   expr
		cond   expr // optional filter: for x in xs if cond
		body   []node
		els    []node
		line   int
	}
	setNode struct {
		target assignTarget
		e      expr
	}
	setBlockNode struct {
		target  assignTarget
		filters []*filterExpr // applied in order to the rendered body
		body    []node
	}
	macroNode       struct{ m *macroDef }
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	withNode struct {
		targets []assignTarget
		vals    []expr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
	// blockNode is {% block %} and transformers' {% generation %}: the body
	// renders in place.
	blockNode struct{ body []node }
)

// assignTarget is the left side of set/for: one name, a tuple of names, or
// a namespace attribute (ns.attr).
type assignTarget struct {
	names  []string
	tuple  bool
	nsAttr string // set when the target is names[0].nsAttr
	line   int
}

// macroDef is a parsed {% macro %}.
type macroDef struct {
	name                    string
	params                  []string
	defaults                []expr // for the last len(defaults) params
	body                    []node
	usesVarargs, usesKwargs bool
	usesCaller              bool
}

// Expression nodes.
type (
	expr interface{}

	constExpr struct{ v any }
	nameExpr  struct {
		name string
		line int
	}
	attrExpr struct {
		obj  expr
		attr string
	}
	itemExpr struct {
		obj, key expr
	}
	sliceExpr struct {
		obj               expr
		start, stop, step expr // nil when omitted
	}
	callExpr struct {
		fn      expr
		args    []expr
		kwNames []string
		kwVals  []expr
		line    int
	}
	filterExpr struct {
		arg     expr // nil inside filter blocks
		name    string
		fn      filterFunc
		args    []expr
		kwNames []string
		kwVals  []expr
		line    int
	}
	testExpr struct {
		arg    expr
		name   string
		fn     testFunc
		args   []expr
		negate bool
		line   int
	}
	binExpr struct {
		op   string
		l, r expr
		line int
	}
	cmpExpr struct {
		first expr
		ops   []string
		rest  []expr
		line  int
	}
	andExpr struct{ l, r expr }
	orExpr  struct{ l, r expr }
	notExpr struct{ e expr }
	negExpr struct {
		e    expr
		line int
	}
	posExpr struct {
		e    expr
		line int
	}
	condExpr struct {
		cond, yes, no expr // no is nil when there is no else
		line          int
	}
	listExpr   struct{ items []expr }
	tupleExpr  struct{ items []expr }
	dictExpr   struct{ keys, vals []expr }
	concatExpr struct{ items []expr }
)
