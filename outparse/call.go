package outparse

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/jsonconstraint"
)

// Limits of a call grammar.
const (
	MaxCallTools  = 128 // tools per request
	MaxCallParams = 64  // parameters per tool
)

// CallTool is a tool a CallGrammar knows.
type CallTool struct {
	Name string
	// Parameters is the JSON Schema of the arguments (an object schema);
	// empty means none.
	Parameters []byte
	// Strict compiles Parameters strictly (a keyword that cannot be
	// enforced is an error) and, under tool_choice "auto", constrains the
	// arguments of this tool's calls.
	Strict bool
	// Grammar, when set, constrains the string parameter GrammarParam
	// (a custom tool's input): its raw value must be a whole match of the
	// grammar, and the tool's calls are constrained under tool_choice
	// "auto" too, from the moment one opens.
	Grammar      *grammar.Grammar
	GrammarParam string
}

// CallOptions configure NewCallGrammar.
type CallOptions struct {
	Tools []CallTool
	// Force requires one call: of Function when it is set, else of any
	// tool (tool_choice "required" or a named function); every tool's
	// arguments are then constrained. Without it calls are the model's
	// choice (tool_choice "auto") and only strict tools' arguments are.
	Force    bool
	Function string
	// Thinking says the prompt left the model thinking.
	Thinking bool
	// Auto constrains every tool's calls under tool_choice "auto", from
	// the moment the model opens one: the name is a declared tool's and
	// the arguments follow its schema (compiled leniently: a keyword the
	// automaton does not enforce is ignored unless the tool is strict,
	// and a tool whose schema cannot be compiled leniently is left
	// unconstrained).
	Auto bool
	// ContentJSON or ContentGrammar, at most one, constrains the answer
	// under tool_choice "auto" (a response format or structured output
	// beside tools): the turn is either calls, opened where the answer
	// would start, or an answer the format accepts whole.
	ContentJSON    *jsonconstraint.Grammar
	ContentGrammar *grammar.Grammar
}

// The grammar's fixed texts, as the chat template writes them.
const (
	callOpenText = toolCallOpen + "\n" + functionOpen // "<tool_call>\n<function="
	paramEnd     = "\n" + paramClose + "\n"           // ends a parameter value
	callEnd      = functionClose + "\n" + toolCallClose
)

// CallGrammar is the grammar of Qwen3.5 tool calls over a request's
// tools, compiled once per request; NewConstraint starts a generation
// under it. A constrained call is
//
//	<tool_call>\n<function=NAME>\n
//	<parameter=P>\nVALUE\n</parameter>\n   (each parameter at most once, required ones all)
//	</function>\n</tool_call>
//
// where a parameter whose schema allows strings has its VALUE written raw
// under the schema's string keywords (a TextRule) and any other parameter
// has it written as JSON under its schema (jsonconstraint), and no VALUE
// holds a tag that would end it early. A forced call comes right after
// the prompt or, with thinking, after the reasoning, which may not end the
// turn; then only the end of sequence may follow.
type CallGrammar struct {
	cv       *CallVocab
	v        *jsonconstraint.Vocab
	force    bool
	thinking bool
	watch    bool // look for calls in free text (some tool is constrained)
	tools    []callTool
	names    byteTrie // "NAME>\n" -> tool
	margin   int      // the most one token can add to a completion, bounded
	schemas  map[string]ToolSchema
	// The answer's format, if any (CallOptions.ContentJSON and
	// ContentGrammar).
	contentJSON *jsonconstraint.Grammar
	contentGram *grammar.Grammar
}

type callTool struct {
	name        string
	constrained bool
	params      []callParam
	required    uint64
	keys        byteTrie // "<parameter=P>\n" -> p, "</function>\n</tool_call>" -> closeAction
	rest        []byte   // the shortest remainder after the name
}

type callParam struct {
	name    string
	text    *jsonconstraint.TextRule // raw values
	gram    *grammar.Grammar         // raw values under a grammar
	json    *jsonconstraint.Grammar  // JSON values
	minimal []byte
}

const closeAction = MaxCallParams

// NewCallGrammar compiles the tools' parameter schemas into a call
// grammar over a call vocabulary.
func NewCallGrammar(cv *CallVocab, o CallOptions) (*CallGrammar, error) {
	if len(o.Tools) > MaxCallTools {
		return nil, fmt.Errorf("outparse: %d tools; at most %d are supported", len(o.Tools), MaxCallTools)
	}
	if o.ContentJSON != nil && o.ContentGrammar != nil {
		return nil, errors.New("outparse: two formats for the answer")
	}
	g := &CallGrammar{cv: cv, v: cv.v, force: o.Force, thinking: o.Thinking, schemas: map[string]ToolSchema{}}
	maxExtra := 0
	if !o.Force {
		g.contentJSON, g.contentGram = o.ContentJSON, o.ContentGrammar
		switch {
		case g.contentJSON != nil:
			maxExtra = g.contentJSON.Growth()
		case g.contentGram != nil:
			maxExtra = grammarGrowth
		}
	}
	for i, t := range o.Tools {
		if strings.ContainsAny(t.Name, ">\n") || t.Name == "" {
			return nil, fmt.Errorf("outparse: tool %d: the function name %q is empty or holds '>' or a newline", i, t.Name)
		}
		if o.Force && o.Function != "" && t.Name != o.Function {
			continue
		}
		ct := callTool{name: t.Name, constrained: o.Force || t.Strict || t.Grammar != nil || o.Auto}
		if ct.constrained {
			if err := ct.compile(t); err != nil {
				if o.Force || t.Strict || t.Grammar != nil {
					return nil, err
				}
				ct = callTool{name: t.Name} // auto only: leave it free
			}
		}
		if ct.constrained {
			g.watch = true
			ts := ToolSchema{}
			for _, p := range ct.params {
				if p.text != nil || p.gram != nil {
					ts[p.name] = []string{"string"}
				} else {
					ts[p.name] = []string{jsonType}
				}
				// One token may start this parameter (its key, smallest
				// value and end join the completion) or, inside its value,
				// open a part whose smallest form is the longest in it.
				extra := len(paramOpen) + len(p.name) + 2 + len(p.minimal) + len(paramEnd)
				if p.json != nil {
					extra = max(extra, p.json.Growth())
				}
				if p.gram != nil {
					extra += grammarGrowth
				}
				maxExtra = max(maxExtra, extra)
			}
			g.schemas[t.Name] = ts
		}
		g.names.add(t.Name+callNameClose, int32(len(g.tools)), 0, false)
		g.tools = append(g.tools, ct)
	}
	if o.Force && len(g.tools) == 0 {
		if o.Function != "" {
			return nil, fmt.Errorf("outparse: no tool is named %q", o.Function)
		}
		return nil, errors.New("outparse: a call is required but there are no tools")
	}
	g.margin = maxExtra + len(callOpenText) + 16
	return g, nil
}

// jsonType marks a parameter whose value is written as JSON: it is kept
// as that JSON (re-encoded with Python's separators).
const jsonType = "json"

// Schemas returns the parameter types the output parser needs for the
// constrained tools' calls (Options.Tools).
func (g *CallGrammar) Schemas() map[string]ToolSchema { return g.schemas }

// compile reads a tool's parameters schema.
func (ct *callTool) compile(t CallTool) error {
	var b bytes.Buffer
	if len(bytes.TrimSpace(t.Parameters)) > 0 && string(bytes.TrimSpace(t.Parameters)) != "null" {
		pg, err := jsonconstraint.CompileWith(t.Parameters, jsonconstraint.Options{Strict: t.Strict})
		if err != nil {
			return fmt.Errorf("outparse: tool %q: %w", t.Name, err)
		}
		if !pg.Object() {
			return fmt.Errorf("outparse: tool %q: the parameters schema does not allow an object", t.Name)
		}
		props := pg.Properties()
		if len(props) > MaxCallParams {
			return fmt.Errorf("outparse: tool %q has %d parameters; at most %d are supported", t.Name, len(props), MaxCallParams)
		}
		for i, p := range props {
			if strings.ContainsAny(p.Name, ">\n") || p.Name == "" {
				return fmt.Errorf("outparse: tool %q: the parameter name %q is empty or holds '>' or a newline", t.Name, p.Name)
			}
			cp := callParam{name: p.Name}
			if t.Grammar != nil && p.Name == t.GrammarParam {
				cp.gram = t.Grammar
				cp.minimal = t.Grammar.Completion(t.Grammar.Start())
			} else if r := p.Grammar.TextRule(); r != nil {
				cp.text = r
				cp.minimal = []byte(r.Minimal())
			} else {
				cp.json = p.Grammar
				cp.minimal = p.Grammar.Minimal()
			}
			for _, tag := range valueEnds {
				if bytes.Contains(cp.minimal, []byte(tag)) {
					return fmt.Errorf("outparse: tool %q: parameter %q: its values would hold %q", t.Name, p.Name, tag)
				}
			}
			if p.Required {
				ct.required |= 1 << i
				fmt.Fprintf(&b, "%s%s>\n%s%s", paramOpen, p.Name, cp.minimal, paramEnd)
			}
			ct.keys.add(paramOpen+p.Name+">\n", int32(i), 1<<i, false)
			ct.params = append(ct.params, cp)
		}
	}
	ct.keys.add(callEnd, closeAction, 0, true)
	b.WriteString(callEnd)
	ct.rest = b.Bytes()
	return nil
}

// validUTF8Prefix reports whether b is valid UTF-8 but for a last
// character that may be incomplete.
func validUTF8Prefix(b []byte) bool {
	var r jsonconstraint.TextRule
	t := r.Start()
	for _, c := range b {
		if !t.Step(c) {
			return false
		}
	}
	return true
}

// byteTrie is a trie of byte strings, none a prefix of another, each
// ending at a node with an action; below holds the parameters the strings
// through a node lead to, and closeBelow whether the close string does.
type byteTrie struct {
	nodes []trieNode
}

type trieNode struct {
	edges      []trieEdge
	action     int32
	below      uint64
	closeBelow bool
}

type trieEdge struct {
	b    byte
	next int32
}

func (t *byteTrie) add(s string, action int32, bit uint64, closes bool) {
	if len(t.nodes) == 0 {
		t.nodes = []trieNode{{action: -1}}
	}
	n := int32(0)
	t.nodes[0].below |= bit
	t.nodes[0].closeBelow = t.nodes[0].closeBelow || closes
	for i := 0; i < len(s); i++ {
		next := t.child(n, s[i])
		if next < 0 {
			next = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{action: -1})
			t.nodes[n].edges = append(t.nodes[n].edges, trieEdge{s[i], next})
		}
		n = next
		t.nodes[n].below |= bit
		t.nodes[n].closeBelow = t.nodes[n].closeBelow || closes
	}
	t.nodes[n].action = action
}

func (t *byteTrie) child(n int32, b byte) int32 {
	if int(n) >= len(t.nodes) {
		return -1
	}
	for _, e := range t.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}

// shortest returns the shortest path from node n to a node with an
// action that ok accepts, and that action; false if there is none.
func (t *byteTrie) shortest(n int32, ok func(node int32) bool) ([]byte, int32, bool) {
	type item struct {
		node, prev int32
		b          byte
	}
	queue := []item{{node: n, prev: -1}}
	for i := 0; i < len(queue); i++ {
		nd := queue[i].node
		if t.nodes[nd].action >= 0 && ok(nd) {
			var out []byte
			for j := i; queue[j].prev >= 0; j = int(queue[j].prev) {
				out = append(out, queue[j].b)
			}
			for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
			return out, t.nodes[nd].action, true
		}
		for _, e := range t.nodes[nd].edges {
			queue = append(queue, item{node: e.next, prev: int32(i), b: e.b})
		}
	}
	return nil, -1, false
}

// Phases of a call state.
const (
	phThink    uint8 = iota // reasoning: watching for "</think>" and "<tool_call>"
	phFree                  // free text (auto): watching for "<tool_call>"
	phFreeCall              // inside a call of an unconstrained tool: watching for "</tool_call>"
	phLit                   // writing a fixed text
	phName                  // writing a tool's name
	phKeys                  // choosing a parameter or the end of the call
	phRaw                   // a raw parameter value
	phJSON                  // a JSON parameter value
	phEnd                   // after a forced call: only the end of sequence
	phAfter                 // after a constrained call (auto): the end of sequence or another call
	phContent               // an answer under a format, or "<tool_call>" opening a call instead
)

// nextCall opens another call after a constrained one (auto).
const nextCall = "\n" + toolCallOpen

// Fixed texts and the phase after each.
const (
	litAfterThink uint8 = iota
	litAfterOpen
	litOpen
	litParamEnd
	litAfterThinkContent
)

var literals = [...]struct {
	text string
	next uint8
}{
	litAfterThink: {afterThink + callOpenText, phName},
	litAfterOpen:  {"\n" + functionOpen, phName},
	litOpen:       {callOpenText, phName},
	litParamEnd:   {paramClose + "\n", phKeys},
	// The answer after the reasoning, under a format (phContent).
	litAfterThinkContent: {afterThink, phContent},
}

// The watchers of the free phases and of parameter values.
var (
	thinkWatch = newWatcher(thinkClose, toolCallOpen)
	openWatch  = newWatcher(toolCallOpen)
	closeWatch = newWatcher(toolCallClose)
	valueWatch = newWatcher(valueEnds...)
)

// callState is where a generation is in a CallGrammar: a comparable value
// (copying it is a snapshot), so masks can be cached by it.
type callState struct {
	phase  uint8
	lit    uint8
	dead   bool  // raw: the value itself cannot continue, only its end
	ac     int16 // watcher state
	pos    int16 // literal: bytes written; raw: bytes of paramEnd matched
	tool   int16
	param  int16
	node   int32 // names or keys trie node
	used   uint64
	text   jsonconstraint.Text // raw: the value so far
	before jsonconstraint.Text // raw: the value before a possible end
	gs     grammar.State       // raw under a grammar, or an answer's: the grammar's state
	json   jsonconstraint.Acceptor
	// An answer under a format (phContent) uses gs or json for the
	// answer, dead when the answer cannot go on, and pos for the bytes
	// of "<tool_call>" written instead (-1 once it cannot be).
}

// start returns the state before the first generated byte.
func (g *CallGrammar) start() callState {
	switch {
	case g.thinking:
		return callState{phase: phThink}
	case g.force:
		return callState{phase: phLit, lit: litOpen}
	case g.content():
		var s callState
		g.enterContent(&s)
		return s
	}
	return callState{phase: phFree}
}

// content reports whether the answer has a format.
func (g *CallGrammar) content() bool { return g.contentJSON != nil || g.contentGram != nil }

// enterContent starts the answer under its format.
func (g *CallGrammar) enterContent(s *callState) {
	s.phase, s.pos, s.dead = phContent, 0, false
	if g.contentGram != nil {
		s.gs = g.contentGram.Start()
	} else {
		s.json = *jsonconstraint.NewAcceptor(g.contentJSON)
	}
}

// contentComplete reports whether the answer so far is a whole one.
func (g *CallGrammar) contentComplete(s *callState) bool {
	if s.dead {
		return false
	}
	if g.contentGram != nil {
		return g.contentGram.Complete(s.gs)
	}
	return s.json.Complete()
}

// stepContent reads a byte where the answer is written under its format:
// the answer goes on, or "<tool_call>" opens a call instead (at the
// start only).
func (g *CallGrammar) stepContent(s *callState, b byte) bool {
	lit := s.pos >= 0 && toolCallOpen[s.pos] == b
	alive := false
	if !s.dead {
		if g.contentGram != nil {
			if gs := g.contentGram.Step(s.gs, b); gs != grammar.Dead {
				s.gs, alive = gs, true
			}
		} else {
			alive = s.json.Step(b)
		}
	}
	switch {
	case lit && int(s.pos)+1 == len(toolCallOpen):
		s.enterLit(litAfterOpen)
	case lit:
		s.pos++
		s.dead = !alive
	case alive:
		s.pos = -1
	default:
		return false
	}
	return true
}

func (s *callState) enterLit(l uint8) { s.phase, s.lit, s.pos = phLit, l, 0 }

// step advances s by one byte; false means the byte cannot come (s is
// then garbage).
func (g *CallGrammar) step(s *callState, b byte) bool {
	switch s.phase {
	case phThink:
		var hit int
		s.ac, hit = thinkWatch.step(s.ac, b)
		switch {
		case hit == 0 && g.force:
			s.enterLit(litAfterThink)
		case hit == 0 && g.content():
			s.enterLit(litAfterThinkContent)
		case hit == 0:
			s.phase, s.ac = phFree, 0
		case hit == 1 && g.watch:
			s.enterLit(litAfterOpen)
		}
		return true
	case phFree:
		if g.watch {
			var hit int
			if s.ac, hit = openWatch.step(s.ac, b); hit >= 0 {
				s.enterLit(litAfterOpen)
			}
		}
		return true
	case phFreeCall:
		var hit int
		if s.ac, hit = closeWatch.step(s.ac, b); hit >= 0 {
			s.phase, s.ac = phFree, 0
			if g.content() {
				// No free text after a call when the answer has a
				// format: the end, or another call.
				s.phase, s.pos = phAfter, 0
			}
		}
		return true
	case phContent:
		return g.stepContent(s, b)
	case phLit:
		l := &literals[s.lit]
		if l.text[s.pos] != b {
			return false
		}
		if s.pos++; int(s.pos) == len(l.text) {
			s.phase, s.node = l.next, 0
			if l.next == phContent {
				g.enterContent(s)
			}
		}
		return true
	case phName:
		n := g.names.child(s.node, b)
		if n < 0 {
			return false
		}
		s.node = n
		if a := g.names.nodes[n].action; a >= 0 {
			s.tool = int16(a)
			if g.tools[a].constrained {
				s.phase, s.node, s.used = phKeys, 0, 0
			} else {
				s.phase, s.ac = phFreeCall, 0
			}
		}
		return true
	case phKeys:
		t := &g.tools[s.tool]
		n := t.keys.child(s.node, b)
		if n < 0 || !t.viable(n, s.used) {
			return false
		}
		s.node = n
		switch a := t.keys.nodes[n].action; {
		case a == closeAction && g.force:
			s.phase = phEnd
		case a == closeAction:
			s.phase, s.pos = phAfter, 0
		case a >= 0:
			g.enterParam(s, int(a))
		}
		return true
	case phAfter:
		if nextCall[s.pos] != b {
			return false
		}
		if s.pos++; int(s.pos) == len(nextCall) {
			s.enterLit(litAfterOpen)
		}
		return true
	case phRaw:
		return g.stepRaw(s, b)
	case phJSON:
		if b == '\n' && s.json.Complete() {
			s.enterLit(litParamEnd)
			return true
		}
		var hit int
		if s.ac, hit = valueWatch.step(s.ac, b); hit >= 0 {
			return false
		}
		return s.json.Step(b)
	}
	return false
}

// viable reports whether a keys trie node leads to an allowed string: an
// unused parameter, or the end once every required one is present.
func (t *callTool) viable(n int32, used uint64) bool {
	nd := &t.keys.nodes[n]
	return nd.below&^used != 0 || nd.closeBelow && t.required&^used == 0
}

func (g *CallGrammar) enterParam(s *callState, p int) {
	par := &g.tools[s.tool].params[p]
	s.param, s.used, s.ac, s.pos, s.dead = int16(p), s.used|1<<p, 0, 0, false
	if par.gram != nil {
		s.phase, s.text, s.before, s.gs = phRaw, jsonconstraint.Text{}, jsonconstraint.Text{}, par.gram.Start()
		return
	}
	if par.text != nil {
		s.phase, s.text, s.before = phRaw, par.text.Start(), jsonconstraint.Text{}
		return
	}
	s.phase, s.json = phJSON, *jsonconstraint.NewAcceptor(par.json)
}

// stepRaw reads a byte of a raw value. Two readings run side by side: the
// byte continues the value, or it continues paramEnd, which may start at
// any newline after which the value could end.
func (g *CallGrammar) stepRaw(s *callState, b byte) bool {
	end := -1 // progress in paramEnd after b
	if s.pos > 0 && paramEnd[s.pos] == b {
		end = int(s.pos) + 1
	}
	if end == len(paramEnd) {
		s.phase, s.node = phKeys, 0
		return true
	}
	gram := g.tools[s.tool].params[s.param].gram
	alive := false
	var text jsonconstraint.Text
	var gs grammar.State
	var ac int16
	if !s.dead {
		var hit int
		text = s.text
		if ac, hit = valueWatch.step(s.ac, b); hit < 0 {
			if gram != nil {
				gs = gram.Step(s.gs, b)
				alive = gs != grammar.Dead
			} else {
				alive = text.Step(b)
			}
		}
	}
	if b == '\n' && !s.dead && (gram == nil && s.text.Complete() || gram != nil && gram.Complete(s.gs)) {
		s.before, end = s.text, 1
	}
	if !alive && end < 0 {
		return false
	}
	s.pos, s.dead = int16(max(end, 0)), !alive
	if alive {
		s.text, s.ac, s.gs = text, ac, gs
	}
	return true
}

// grammarGrowth bounds how much one token can lengthen the completion of
// a value under a grammar, for the margin of the request's budget (a
// grammar's completion can grow by a whole required section when one
// token opens it; this covers the tool grammars agents send).
const grammarGrowth = 64

// completion returns bytes that finish the call s is in (empty outside a
// constrained call), or, in a forced grammar's reasoning, that end the
// reasoning and make the cheapest call.
func (g *CallGrammar) completion(s callState) []byte {
	switch s.phase {
	case phThink:
		if !g.force {
			return nil
		}
		return append([]byte("\n"+thinkClose+literals[litAfterThink].text), g.nameCompletion(0)...)
	case phLit:
		out := []byte(literals[s.lit].text[s.pos:])
		switch literals[s.lit].next {
		case phName:
			return append(out, g.nameCompletion(0)...)
		case phContent:
			var c callState
			g.enterContent(&c)
			return append(out, g.contentCompletion(c)...)
		}
		return append(out, g.keysCompletion(int(s.tool), 0, s.used)...)
	case phContent:
		return g.contentCompletion(s)
	case phName:
		return g.nameCompletion(s.node)
	case phKeys:
		return g.keysCompletion(int(s.tool), s.node, s.used)
	case phRaw:
		var out []byte
		switch gram := g.tools[s.tool].params[s.param].gram; {
		case s.pos > 0:
			out = []byte(paramEnd[s.pos:])
		case gram != nil:
			out = append(gram.Completion(s.gs), paramEnd...)
		default:
			out = append(s.text.Completion(), paramEnd...)
		}
		return append(out, g.keysCompletion(int(s.tool), 0, s.used)...)
	case phJSON:
		out := append(s.json.Completion(), paramEnd...)
		return append(out, g.keysCompletion(int(s.tool), 0, s.used)...)
	}
	return nil
}

// contentCompletion finishes the answer under its format, or, once the
// answer cannot go on, the call "<tool_call>" began.
func (g *CallGrammar) contentCompletion(s callState) []byte {
	switch {
	case s.dead:
		out := []byte(toolCallOpen[s.pos:] + literals[litAfterOpen].text)
		return append(out, g.nameCompletion(0)...)
	case g.contentGram != nil:
		return g.contentGram.Completion(s.gs)
	}
	return s.json.Completion()
}

// nameCompletion finishes a tool name from names trie node n and makes
// that tool's cheapest call.
func (g *CallGrammar) nameCompletion(n int32) []byte {
	path, a, ok := g.names.shortest(n, func(int32) bool { return true })
	if !ok {
		return nil
	}
	if !g.tools[a].constrained {
		return path
	}
	return append(path, g.tools[a].rest...)
}

// keysCompletion finishes a call from keys trie node n with the
// parameters used present: the key being written, then the missing
// required parameters with their smallest values, then the end.
func (g *CallGrammar) keysCompletion(tool int, n int32, used uint64) []byte {
	t := &g.tools[tool]
	var out []byte
	if n != 0 {
		path, a, ok := t.keys.shortest(n, func(nd int32) bool { return t.viable(nd, used) })
		if !ok {
			return nil
		}
		out = append(out, path...)
		if a == closeAction {
			return out
		}
		out = append(out, t.params[a].minimal...)
		out = append(out, paramEnd...)
		used |= 1 << a
	}
	for i, p := range t.params {
		if t.required&^used&(1<<i) != 0 {
			out = fmt.Appendf(out, "%s%s>\n%s%s", paramOpen, p.name, p.minimal, paramEnd)
		}
	}
	return append(out, callEnd...)
}
