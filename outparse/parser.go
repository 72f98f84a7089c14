// Package outparse is the Qwen3.5 output format in one place: its markers,
// the incremental parser that splits generated text into reasoning, content
// and OpenAI-style tool calls (so that a stream can forward each piece as
// soon as it is safe to), the grammar of tool calls whose logit processor
// constrains a call from its opening tag to its closing one with every
// argument matching the tool's JSON Schema (CallGrammar, for tool_choice
// "required", a named function and strict tools), and the test of whether
// a rendered prompt left the model thinking (ThinkingOpened). The special
// tokens the template renders with come from the checkpoint
// (chattemplate.LoadSpecialTokens), never from here.
//
// The model's output grammar, as the checkpoint's chat template renders it on
// input, is
//
//	REASONING \n</think>\n\n CONTENT \n\n<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>
//
// where the reasoning part exists only when thinking is enabled (the prompt
// then ends with "<think>\n", so the model never emits the opening tag) and
// any number of tool calls may follow one another.
//
// # Rules
//
//   - Thinking on: text before the first "</think>" is reasoning, the rest is
//     content. Without "</think>" all of it is reasoning, unless a tool call
//     ("<tool_call>", optional whitespace, "<function=") starts inside it:
//     that ends the reasoning and the call is parsed as a call.
//   - Thinking off: everything is content ("</think>" included).
//   - A "<think>" at the very start of the output is dropped and opens
//     reasoning, whatever the thinking option says.
//   - Whitespace directly before "</think>" or a tool call, and directly
//     after "<think>", "</think>" or a tool call, is format markup, not reasoning or
//     content. Everything else outside tool calls is kept byte for byte.
//   - A "<tool_call>" not followed by "<function=" is ordinary text.
//   - Inside a call, whitespace and other text between tags is ignored.
//     Parameter values run to "</parameter>"; a missing "</parameter>" ends
//     the value at the next "<parameter=", "</function>", "</tool_call>",
//     "<tool_call>" or the end of the output. One leading and one trailing
//     newline are stripped from each value, as the template writes them.
//     "</function>" and "</tool_call>" may be missing too; several
//     "<function=" blocks inside one "<tool_call>" are several calls.
//   - A call is emitted once it is complete. A call whose function tag is
//     never closed by '>' is not a call: its text is returned as content.
//
// # Losslessness
//
// Every Event carries the exact input text it stands for (Event.Text), markup
// included, so the concatenation of the Text of all events of a parse equals
// the input exactly. Reasoning and content events carry their text verbatim;
// only the markup events and the inside of tool calls are interpreted.
package outparse

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Tags of the Qwen3.5 output format.
const (
	thinkOpen     = "<think>"
	thinkClose    = "</think>"
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
	functionOpen  = "<function="
	functionClose = "</function>"
	paramOpen     = "<parameter="
	paramClose    = "</parameter>"
)

// Kind says what part of the output an Event is.
type Kind uint8

// Kinds of events.
const (
	// Reasoning is a piece of the thinking text (OpenAI field "reasoning").
	Reasoning Kind = iota + 1
	// Content is a piece of the answer text.
	Content
	// ToolCall is one complete tool call; Event.Call holds it.
	ToolCall
	// Markup is text of the format itself ("</think>", a dropped "<think>",
	// whitespace around them and around tool calls). Servers ignore it; it is
	// there so that no input byte is unaccounted for.
	Markup
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Reasoning:
		return "reasoning"
	case Content:
		return "content"
	case ToolCall:
		return "tool_call"
	case Markup:
		return "markup"
	}
	return "invalid"
}

// Event is one piece of parsed output.
type Event struct {
	Kind Kind
	// Text is the exact input text this event stands for. For Reasoning and
	// Content it is the delta to send; for ToolCall it is the call's raw XML.
	Text string
	// Call is the parsed call of a ToolCall event, nil otherwise.
	Call *Call
}

// Call is one tool call in OpenAI's chat completion shape.
type Call struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function Function `json:"function"`
	// Params are the call's parameters in output order, with raw values (one
	// leading and trailing newline stripped), before typing by the schema.
	Params []Param `json:"-"`
}

// Function is the function part of a Call.
type Function struct {
	Name string `json:"name"`
	// Arguments is a JSON object, as a string, with each value typed by the
	// tool's schema.
	Arguments string `json:"arguments"`
}

// Param is one raw parameter of a tool call.
type Param struct {
	Name, Value string
}

// Options configure a Parser.
type Options struct {
	// Thinking says whether the prompt opened a reasoning block
	// (enable_thinking, true by default in the Qwen3.5 template).
	Thinking bool
	// Tools maps a tool's name to its parameters' JSON Schema types; values of
	// unknown tools or parameters stay strings.
	Tools map[string]ToolSchema
	// NewID returns the id of a new call; nil means "call_" and 24 random hex
	// digits from crypto/rand.
	NewID func() string
}

// Result is a whole parsed output.
type Result struct {
	Reasoning string
	Content   string
	ToolCalls []Call
}

// NewCallID returns "call_" followed by 24 random hex digits.
func NewCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return "call_" + hex.EncodeToString(b[:])
}

// ParseAll parses a complete output.
func ParseAll(text string, opts Options) Result {
	p := NewParser(opts)
	evs := append(p.Push(text), p.Finish()...)
	return Collect(evs)
}

// Collect folds events into a Result.
func Collect(evs []Event) Result {
	var r Result
	var reasoning, content strings.Builder
	for _, e := range evs {
		switch e.Kind {
		case Reasoning:
			reasoning.WriteString(e.Text)
		case Content:
			content.WriteString(e.Text)
		case ToolCall:
			r.ToolCalls = append(r.ToolCalls, *e.Call)
		}
	}
	r.Reasoning = reasoning.String()
	r.Content = content.String()
	return r
}

type state uint8

const (
	stStart     state = iota // nothing decided yet: a "<think>" may open the output
	stReasoning              // inside the thinking text
	stContent                // in the answer text
	stSkipWS                 // whitespace after a tag is markup; then state next
	stBlock                  // inside a "<tool_call>" block
	stDone                   // Finish has run
)

// Parser is an incremental output parser. Feed it text with Push as it is
// generated, then call Finish once. A Parser is not safe for concurrent use.
type Parser struct {
	opts  Options
	state state
	next  state  // the state after stSkipWS
	buf   string // input not yet turned into events
	// valueWait is set when the last block scan stopped inside a parameter
	// value with no terminator in sight; such a scan need not be repeated
	// until input that can complete a tag ('<' or '>') arrives.
	valueWait bool
	tail      []byte // input after buf, held while valueWait
	out       []Event
}

// NewParser returns a parser for one output.
func NewParser(opts Options) *Parser {
	if opts.NewID == nil {
		opts.NewID = NewCallID
	}
	return &Parser{opts: opts, state: stStart}
}

// Push adds generated text and returns the events that are now certain.
// Text that could still be the start of a tag is held back.
func (p *Parser) Push(text string) []Event {
	if p.state == stDone || text == "" {
		return nil
	}
	if p.state == stBlock && p.valueWait && strings.IndexAny(text, "<>") < 0 {
		// Nothing in text can end the value: keep it aside without
		// rescanning (or even copying) the block.
		p.tail = append(p.tail, text...)
		return nil
	}
	p.flushTail()
	p.buf += text
	p.run(false)
	return p.take()
}

// Reasoning reports whether the text pushed next would start inside the
// reasoning (for counting reasoning tokens).
func (p *Parser) Reasoning() bool {
	switch p.state {
	case stStart:
		return p.opts.Thinking
	case stReasoning:
		return true
	case stSkipWS:
		return p.next == stReasoning
	}
	return false
}

// Finish ends the output and returns the remaining events. Further calls to
// Push or Finish return nothing.
func (p *Parser) Finish() []Event {
	if p.state == stDone {
		return nil
	}
	p.flushTail()
	p.run(true)
	p.state = stDone
	return p.take()
}

func (p *Parser) flushTail() {
	if len(p.tail) > 0 {
		p.buf += string(p.tail)
		p.tail = p.tail[:0]
	}
}

func (p *Parser) take() []Event {
	out := p.out
	p.out = nil
	return out
}

func (p *Parser) emit(k Kind, text string) {
	if text == "" {
		return
	}
	// Merge with the previous text event of the same kind within one call.
	if n := len(p.out); n > 0 && p.out[n-1].Kind == k && k != ToolCall {
		p.out[n-1].Text += text
		return
	}
	p.out = append(p.out, Event{Kind: k, Text: text})
}

// run turns as much of buf into events as is certain; final means no more
// input will come.
func (p *Parser) run(final bool) {
	for {
		progressed := false
		switch p.state {
		case stStart:
			progressed = p.start(final)
		case stReasoning, stContent:
			progressed = p.text(final)
		case stSkipWS:
			progressed = p.skipWS()
		case stBlock:
			progressed = p.block(final)
		}
		if !progressed {
			return
		}
	}
}

func (p *Parser) start(final bool) bool {
	if !final && len(p.buf) < len(thinkOpen) && strings.HasPrefix(thinkOpen, p.buf) {
		return false
	}
	if strings.HasPrefix(p.buf, thinkOpen) {
		p.emit(Markup, thinkOpen)
		p.buf = p.buf[len(thinkOpen):]
		p.state, p.next = stSkipWS, stReasoning
		return true
	}
	if p.opts.Thinking {
		p.state = stReasoning
	} else {
		p.state = stContent
	}
	return true
}

func (p *Parser) skipWS() bool {
	i := skipSpace(p.buf, 0)
	p.emit(Markup, p.buf[:i])
	p.buf = p.buf[i:]
	if p.buf == "" {
		return false
	}
	p.state = p.next
	return true
}

// text handles the reasoning and content states.
func (p *Parser) text(final bool) bool {
	kind := Content
	tags := []string{toolCallOpen}
	if p.state == stReasoning {
		kind = Reasoning
		tags = []string{thinkClose, toolCallOpen}
	}
	from := 0 // scan position: text before it is known not to hold a call
	for {
		i, tag := firstOf(p.buf, from, tags)
		if i < 0 {
			break
		}
		before, ws := splitTrailingSpace(p.buf[:i])
		if tag == thinkClose {
			p.emit(kind, before)
			p.emit(Markup, ws+thinkClose)
			p.buf = p.buf[i+len(thinkClose):]
			p.state, p.next = stSkipWS, stContent
			return true
		}
		rest := p.buf[i+len(toolCallOpen):]
		r := rest[skipSpace(rest, 0):]
		switch {
		case strings.HasPrefix(r, functionOpen):
			p.emit(kind, before)
			p.emit(Markup, ws)
			p.buf = p.buf[i:]
			p.state = stBlock
			return true
		case !final && strings.HasPrefix(functionOpen, r):
			// Cannot tell yet whether this is a call: hold it and the
			// whitespace before it.
			p.emit(kind, before)
			p.buf = p.buf[len(before):]
			return false
		}
		from = i + len(toolCallOpen) // an ordinary "<tool_call>" in the text
	}
	if final {
		p.emit(kind, p.buf)
		p.buf = ""
		return false
	}
	cut := len(p.buf) - partialSuffix(p.buf[from:], tags)
	before, _ := splitTrailingSpace(p.buf[:cut])
	p.emit(kind, before)
	p.buf = p.buf[len(before):]
	return false
}

// block handles a "<tool_call>" block at the start of buf.
func (p *Parser) block(final bool) bool {
	sc := scanBlock(p.buf, final)
	p.valueWait = sc.status == needValue
	if sc.status != done {
		return false
	}
	start := 0
	for _, c := range sc.calls {
		call := p.makeCall(c)
		p.out = append(p.out, Event{Kind: ToolCall, Text: p.buf[start:c.end], Call: &call})
		start = c.end
	}
	if sc.invalidFrom >= 0 {
		// A function tag that never closed: not a call; its text is content.
		if len(sc.calls) > 0 {
			p.out[len(p.out)-1].Text += p.buf[start:sc.invalidFrom]
			start = sc.invalidFrom
		}
		p.emit(Content, p.buf[start:])
		p.buf = ""
		p.state = stContent
		return false
	}
	if len(sc.calls) > 0 {
		p.out[len(p.out)-1].Text += p.buf[start:sc.end]
	}
	p.buf = p.buf[sc.end:]
	p.state, p.next = stSkipWS, stContent
	return true
}

func (p *Parser) makeCall(c rawCall) Call {
	return Call{
		ID:   p.opts.NewID(),
		Type: "function",
		Function: Function{
			Name:      c.name,
			Arguments: arguments(c.params, p.opts.Tools[c.name]),
		},
		Params: c.params,
	}
}

type scanStatus uint8

const (
	needMore  scanStatus = iota // the block is not complete yet
	needValue                   // as needMore, stopped inside a parameter value
	done                        // the block ends at end
)

type rawCall struct {
	name   string
	params []Param
	end    int // offset just past the function's text
}

type blockScan struct {
	status      scanStatus
	calls       []rawCall
	end         int // offset just past the block
	invalidFrom int // offset of a never-closed function tag at the end, or -1
}

// scanBlock scans a tool call block; s starts with "<tool_call>" and is known
// to hold a "<function=" after it.
func scanBlock(s string, final bool) blockScan {
	res := blockScan{invalidFrom: -1}
	pos := len(toolCallOpen)
	for {
		q := skipSpace(s, pos)
		rest := s[q:]
		switch {
		case strings.HasPrefix(rest, functionOpen):
			c, st, blockEnded := scanFunction(s, q, final)
			switch st {
			case needMore, needValue:
				res.status = st
				return res
			case invalid:
				res.status, res.invalidFrom = done, q
				return res
			}
			res.calls = append(res.calls, c)
			pos = c.end
			if blockEnded {
				res.status, res.end = done, pos
				return res
			}
		case strings.HasPrefix(rest, toolCallClose):
			res.status, res.end = done, q+len(toolCallClose)
			return res
		case !final && (strings.HasPrefix(functionOpen, rest) || strings.HasPrefix(toolCallClose, rest)):
			res.status = needMore
			return res
		default:
			// Other text after a function: the block ended without its
			// closing tag.
			res.status, res.end = done, pos
			return res
		}
	}
}

const invalid scanStatus = 255

// scanFunction scans one function starting at s[q:] ("<function=..."). It
// returns the call, its status and whether the enclosing block ended too.
func scanFunction(s string, q int, final bool) (rawCall, scanStatus, bool) {
	var c rawCall
	i := q + len(functionOpen)
	gt := strings.IndexByte(s[i:], '>')
	if gt < 0 {
		if final {
			return c, invalid, true
		}
		return c, needMore, false
	}
	c.name = strings.TrimSpace(s[i : i+gt])
	pos := i + gt + 1
	for {
		at := skipSpace(s, pos)
		rest := s[at:]
		switch {
		case strings.HasPrefix(rest, paramOpen):
			j := at + len(paramOpen)
			gt := strings.IndexByte(s[j:], '>')
			if gt < 0 {
				if !final {
					return c, needMore, false
				}
				c.params = append(c.params, Param{Name: strings.TrimSpace(s[j:])})
				c.end = len(s)
				return c, done, true
			}
			name := strings.TrimSpace(s[j : j+gt])
			vs := j + gt + 1
			k, term := firstOf(s, vs, valueEnds)
			if k < 0 {
				if !final {
					return c, needValue, false
				}
				k = len(s)
			}
			c.params = append(c.params, Param{Name: name, Value: stripNewlines(s[vs:k])})
			pos = k
			if term == paramClose {
				pos += len(paramClose)
			}
		case strings.HasPrefix(rest, functionClose):
			c.end = at + len(functionClose)
			return c, done, false
		case strings.HasPrefix(rest, toolCallClose):
			c.end = at + len(toolCallClose)
			return c, done, true
		case strings.HasPrefix(rest, toolCallOpen):
			// The next call starts: this one lost all its closing tags.
			c.end = pos
			return c, done, true
		case strings.HasPrefix(rest, functionOpen):
			c.end = pos
			return c, done, false
		case rest == "":
			if !final {
				return c, needMore, false
			}
			c.end = len(s)
			return c, done, true
		case !final && isPartialOf(rest, functionTags):
			return c, needMore, false
		default:
			// Stray text inside the function: skip to the next '<'.
			n := strings.IndexByte(s[at+1:], '<')
			if n < 0 {
				if !final {
					return c, needMore, false
				}
				c.end = len(s)
				return c, done, true
			}
			pos = at + 1 + n
		}
	}
}

// valueEnds end a parameter value; only the first is consumed with it.
var valueEnds = []string{paramClose, paramOpen, functionClose, toolCallClose, toolCallOpen}

// functionTags are the tags that mean something inside a function.
var functionTags = []string{paramOpen, functionClose, toolCallClose, toolCallOpen, functionOpen}

// stripNewlines removes one leading and one trailing newline.
func stripNewlines(v string) string {
	v = strings.TrimPrefix(v, "\n")
	return strings.TrimSuffix(v, "\n")
}

// firstOf returns the earliest index at or after from where one of tags
// occurs in s, and that tag; -1 if none does.
func firstOf(s string, from int, tags []string) (int, string) {
	best, tag := -1, ""
	for _, t := range tags {
		if i := strings.Index(s[from:], t); i >= 0 && (best < 0 || from+i < best) {
			best, tag = from+i, t
		}
	}
	return best, tag
}

// partialSuffix returns the length of the longest suffix of s that is a
// proper prefix of one of tags.
func partialSuffix(s string, tags []string) int {
	longest := 0
	for _, t := range tags {
		for n := min(len(t)-1, len(s)); n > longest; n-- {
			if strings.HasSuffix(s, t[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
}

// isPartialOf reports whether s is a proper prefix of one of tags.
func isPartialOf(s string, tags []string) bool {
	for _, t := range tags {
		if len(s) < len(t) && strings.HasPrefix(t, s) {
			return true
		}
	}
	return false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r'
}

// skipSpace returns the first index at or after i that is not whitespace.
func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// splitTrailingSpace splits s into its text and its trailing whitespace.
func splitTrailingSpace(s string) (string, string) {
	i := len(s)
	for i > 0 && isSpace(s[i-1]) {
		i--
	}
	return s[:i], s[i:]
}
