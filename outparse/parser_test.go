package outparse

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// counterIDs returns an id generator giving call_0, call_1, ...
func counterIDs() func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("call_%d", n-1)
	}
}

type wantCall struct{ name, args string }

func weatherTools() map[string]ToolSchema {
	return map[string]ToolSchema{
		"get_weather": {"city": {"string"}, "days": {"integer"}},
		"typed": {
			"i": {"integer"}, "n": {"number"}, "b": {"boolean"}, "z": {"null"},
			"o": {"object"}, "a": {"array"}, "s": {"string"}, "oi": {"integer", "null"},
			"sn": {"string", "null"}, "u": {"uuid-ish"},
		},
	}
}

func call(name string, params ...string) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + name + ">\n")
	for i := 0; i+1 < len(params); i += 2 {
		b.WriteString("<parameter=" + params[i] + ">\n" + params[i+1] + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

func TestParseAllTable(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		thinking  bool
		reasoning string
		content   string
		calls     []wantCall
	}{
		{name: "empty", in: "", thinking: true},
		{name: "thinking closed", in: "Let me add.\n7+7=14\n</think>\n\nThe answer is 14.", thinking: true,
			reasoning: "Let me add.\n7+7=14", content: "The answer is 14."},
		{name: "thinking never closed", in: "Still thinking about\n\nit ", thinking: true,
			reasoning: "Still thinking about\n\nit "},
		{name: "thinking off all content", in: "Hello\n</think>\nworld", content: "Hello\n</think>\nworld"},
		{name: "empty reasoning", in: "</think>\n\nHi", thinking: true, content: "Hi"},
		{name: "reasoning only then close", in: "hmm</think>", thinking: true, reasoning: "hmm"},
		{name: "leading think dropped", in: "<think>\nplan\n</think>\n\nanswer", thinking: true,
			reasoning: "plan", content: "answer"},
		{name: "leading think opens reasoning when off", in: "<think>\nplan\n</think>\n\nanswer",
			reasoning: "plan", content: "answer"},
		{name: "think not at start is text", in: "a <think> b", content: "a <think> b"},
		{name: "second close is content", in: "r</think>c</think>d", thinking: true, reasoning: "r", content: "c</think>d"},
		{name: "tool call ends unclosed reasoning",
			in:       "I need the weather.\n\n" + call("get_weather", "city", "Oslo"),
			thinking: true, reasoning: "I need the weather.",
			calls: []wantCall{{"get_weather", `{"city": "Oslo"}`}}},
		{name: "tool_call without function stays reasoning", in: "the <tool_call> tag is used\n", thinking: true,
			reasoning: "the <tool_call> tag is used\n"},
		{name: "tool_call without function stays content", in: "use <tool_call>x</tool_call> like this",
			content: "use <tool_call>x</tool_call> like this"},
		{name: "tool_call at end without function", in: "see <tool_call>\n", content: "see <tool_call>\n"},
		{name: "after think close", thinking: true,
			in:        "Use the tool.\n</think>\n\nChecking.\n\n" + call("get_weather", "city", "Oslo", "days", "3"),
			reasoning: "Use the tool.", content: "Checking.",
			calls: []wantCall{{"get_weather", `{"city": "Oslo", "days": 3}`}}},
		{name: "call only", in: call("get_weather", "city", "Oslo"),
			calls: []wantCall{{"get_weather", `{"city": "Oslo"}`}}},
		{name: "several calls", in: call("get_weather", "city", "Oslo") + "\n" + call("get_weather", "city", "Paris", "days", "2"),
			calls: []wantCall{{"get_weather", `{"city": "Oslo"}`}, {"get_weather", `{"city": "Paris", "days": 2}`}}},
		{name: "text around calls", in: "Before.\n\n" + call("f", "a", "1") + "\nBetween.\n" + call("g") + "\n\nAfter.",
			content: "Before.Between.After.",
			calls:   []wantCall{{"f", `{"a": "1"}`}, {"g", `{}`}}},
		{name: "missing parameter close",
			in:    "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>\n</tool_call>",
			calls: []wantCall{{"f", `{"a": "1", "b": "2"}`}}},
		{name: "missing function close",
			in:      "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</tool_call>\nok",
			content: "ok", calls: []wantCall{{"f", `{"a": "x"}`}}},
		{name: "missing tool_call close then text",
			in:      "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</function>\nDone.",
			content: "Done.", calls: []wantCall{{"f", `{"a": "x"}`}}},
		{name: "missing every close at end",
			in:    "<tool_call>\n<function=f>\n<parameter=a>\nhello\nworld",
			calls: []wantCall{{"f", `{"a": "hello\nworld"}`}}},
		{name: "missing closes then next call",
			in:    "<tool_call>\n<function=f>\n<parameter=a>\n1\n" + call("g", "b", "2"),
			calls: []wantCall{{"f", `{"a": "1"}`}, {"g", `{"b": "2"}`}}},
		{name: "parameter name cut at end",
			in:    "<tool_call>\n<function=f>\n<parameter=ab",
			calls: []wantCall{{"f", `{"ab": ""}`}}},
		{name: "function name never closed is content", in: "Hi\n<tool_call>\n<function=get_wea",
			content: "Hi<tool_call>\n<function=get_wea"},
		{name: "two functions in one block",
			in:    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n<function=g>\n</function>\n</tool_call>",
			calls: []wantCall{{"f", `{"a": "1"}`}, {"g", `{}`}}},
		{name: "no whitespace between tags",
			in:    "<tool_call><function=f><parameter=a>v</parameter></function></tool_call>",
			calls: []wantCall{{"f", `{"a": "v"}`}}},
		{name: "stray text in function ignored",
			in:    "<tool_call>\n<function=f>\nnoise\n<parameter=a>\nv\n</parameter>\nmore\n</function>\n</tool_call>",
			calls: []wantCall{{"f", `{"a": "v"}`}}},
		{name: "multiline value keeps inner newlines",
			in:    call("f", "code", "\ndef f():\n    return '<b>'\n\n"),
			calls: []wantCall{{"f", `{"code": "\ndef f():\n    return '<b>'\n\n"}`}}},
		{name: "escaping and unicode",
			in:    call("f", "q", "say \"hi\"\t\\ ünï 東京 \u2028"),
			calls: []wantCall{{"f", "{\"q\": \"say \\\"hi\\\"\\t\\\\ ünï 東京 \u2028\"}"}}},
		{name: "repeated parameter keeps last value", in: call("f", "a", "1", "b", "2", "a", "3"),
			calls: []wantCall{{"f", `{"a": "3", "b": "2"}`}}},
		{name: "typed values", in: call("typed",
			"i", "42", "n", "2.5", "b", "True", "z", "None", "o", `{"k": [1, {"x":null}], "k": 2, "s":"<>&"}`,
			"a", `[1,"two",3.0]`, "s", "007", "oi", "null", "sn", "null", "u", "x"),
			calls: []wantCall{{"typed", `{"i": 42, "n": 2.5, "b": true, "z": null, "o": {"k": 2, "s": "<>&"}, "a": [1, "two", 3.0], "s": "007", "oi": null, "sn": "null", "u": "x"}`}}},
		{name: "typed values normalised", in: call("typed", "i", " +007 ", "n", "5.0", "b", "FALSE"),
			calls: []wantCall{{"typed", `{"i": 7, "n": 5, "b": false}`}}},
		{name: "big integer kept exact", in: call("typed", "i", "123456789012345678901234567890"),
			calls: []wantCall{{"typed", `{"i": 123456789012345678901234567890}`}}},
		{name: "bad typed values fall back to strings", in: call("typed",
			"i", "4.5", "n", "abc", "b", "yes", "z", "nil", "o", "[1]", "a", "{}", "oi", "x", "n", "inf"),
			calls: []wantCall{{"typed", `{"i": "4.5", "n": "inf", "b": "yes", "z": "nil", "o": "[1]", "a": "{}", "oi": "x"}`}}},
		{name: "invalid JSON object falls back", in: call("typed", "o", "{'k': 1}"),
			calls: []wantCall{{"typed", `{"o": "{'k': 1}"}`}}},
		{name: "unknown tool values are strings", in: call("other", "n", "5", "b", "true"),
			calls: []wantCall{{"other", `{"n": "5", "b": "true"}`}}},
		{name: "only one newline stripped", in: "<tool_call>\n<function=f>\n<parameter=a>\n\nx\n\n</parameter>\n</function>\n</tool_call>",
			calls: []wantCall{{"f", `{"a": "\nx\n"}`}}},
		{name: "call inside reasoning after think text", thinking: true,
			in:        "<think>\nweather?\n<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n\nwaiting",
			reasoning: "weather?", content: "waiting", calls: []wantCall{{"get_weather", `{"days": 2}`}}},
		{name: "angle brackets in content", in: "a < b and c > d, <tool x", content: "a < b and c > d, <tool x"},
		{name: "trailing whitespace kept at end", in: "Hello \n", content: "Hello \n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Thinking: tc.thinking, Tools: weatherTools(), NewID: counterIDs()}
			r := ParseAll(tc.in, opts)
			if r.Reasoning != tc.reasoning {
				t.Errorf("reasoning = %q, want %q", r.Reasoning, tc.reasoning)
			}
			if r.Content != tc.content {
				t.Errorf("content = %q, want %q", r.Content, tc.content)
			}
			if len(r.ToolCalls) != len(tc.calls) {
				t.Fatalf("got %d calls %+v, want %d", len(r.ToolCalls), r.ToolCalls, len(tc.calls))
			}
			for i, c := range r.ToolCalls {
				if c.Function.Name != tc.calls[i].name || c.Function.Arguments != tc.calls[i].args {
					t.Errorf("call %d = %s %s, want %s %s", i, c.Function.Name, c.Function.Arguments, tc.calls[i].name, tc.calls[i].args)
				}
				if c.ID != fmt.Sprintf("call_%d", i) || c.Type != "function" {
					t.Errorf("call %d id %q type %q", i, c.ID, c.Type)
				}
				if !json.Valid([]byte(c.Function.Arguments)) {
					t.Errorf("call %d arguments are not JSON: %s", i, c.Function.Arguments)
				}
			}
			checkStreamingMatches(t, tc.in, opts.Thinking, rand.New(rand.NewPCG(1, 2)))
		})
	}
}

func TestDefaultCallID(t *testing.T) {
	re := regexp.MustCompile(`^call_[0-9a-f]{24}$`)
	r := ParseAll(call("f"), Options{})
	if len(r.ToolCalls) != 1 || !re.MatchString(r.ToolCalls[0].ID) {
		t.Fatalf("calls %+v: id does not look like call_ + 24 hex", r.ToolCalls)
	}
	if a, b := NewCallID(), NewCallID(); a == b {
		t.Fatalf("two ids are equal: %s", a)
	}
	out, err := json.Marshal(r.ToolCalls[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"` + r.ToolCalls[0].ID + `","type":"function","function":{"name":"f","arguments":"{}"}}`
	if string(out) != want {
		t.Fatalf("JSON %s, want %s", out, want)
	}
}

// TestStreamingEarly checks that text is released as soon as it cannot be
// part of a tag, and held while it can.
func TestStreamingEarly(t *testing.T) {
	type step struct {
		push string
		want []Event // Call fields are checked by name only
	}
	steps := []step{
		{"Thinking", []Event{{Kind: Reasoning, Text: "Thinking"}}},
		{" hard\n", []Event{{Kind: Reasoning, Text: " hard"}}}, // trailing whitespace may precede </think>
		{"</th", nil},
		{"ink>", []Event{{Kind: Markup, Text: "\n</think>"}}},
		{"\n\n", []Event{{Kind: Markup, Text: "\n\n"}}},
		{"Sure <", []Event{{Kind: Content, Text: "Sure"}}},
		{"b>x", []Event{{Kind: Content, Text: " <b>x"}}},
		{"\n\n<tool_call>", nil},
		{"\n<func", nil},
		{"tion=f>\n<parameter=a>\n1\n</parameter>\n</function>\n", []Event{{Kind: Markup, Text: "\n\n"}}},
		{"</tool_call>", []Event{{Kind: ToolCall, Text: "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", Call: &Call{Function: Function{Name: "f"}}}}},
		{"\nok", []Event{{Kind: Markup, Text: "\n"}, {Kind: Content, Text: "ok"}}},
		{" <tool_call> no", []Event{{Kind: Content, Text: " <tool_call> no"}}},
	}
	p := NewParser(Options{Thinking: true, NewID: counterIDs()})
	for i, s := range steps {
		got := p.Push(s.push)
		if len(got) != len(s.want) {
			t.Fatalf("step %d push %q: got %+v, want %+v", i, s.push, got, s.want)
		}
		for j := range got {
			g, w := got[j], s.want[j]
			if g.Kind != w.Kind || g.Text != w.Text || (w.Call != nil) != (g.Call != nil) ||
				(w.Call != nil && w.Call.Function.Name != g.Call.Function.Name) {
				t.Fatalf("step %d push %q event %d: got %+v, want %+v", i, s.push, j, g, w)
			}
		}
	}
	if evs := p.Finish(); len(evs) != 0 {
		t.Fatalf("finish gave %+v", evs)
	}
	if evs := append(p.Push("more"), p.Finish()...); evs != nil {
		t.Fatalf("events after Finish: %+v", evs)
	}
}

// TestLongValueStreaming checks that a huge parameter value streamed in small
// pieces is parsed in reasonable time (no quadratic rescans).
func TestLongValueStreaming(t *testing.T) {
	p := NewParser(Options{NewID: counterIDs()})
	p.Push("<tool_call>\n<function=write>\n<parameter=text>\n")
	chunk := strings.Repeat("abcd efgh ", 2)
	var want strings.Builder
	for range 50000 {
		if ev := p.Push(chunk); ev != nil {
			t.Fatalf("events inside a value: %+v", ev)
		}
		want.WriteString(chunk)
	}
	evs := append(p.Push("\n</parameter>\n</function>\n</tool_call>"), p.Finish()...)
	r := Collect(evs)
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].Params[0].Value != want.String() {
		t.Fatalf("bad parse of a long value")
	}
}

// checkInvariants checks what holds for every input: the events' texts
// concatenate to the input, and every call's arguments are a JSON object.
func checkInvariants(t *testing.T, in string, evs []Event) {
	t.Helper()
	var all strings.Builder
	for i, e := range evs {
		if e.Text == "" {
			t.Fatalf("event %d is empty: %+v", i, e)
		}
		all.WriteString(e.Text)
		if (e.Kind == ToolCall) != (e.Call != nil) {
			t.Fatalf("event %d: kind %v with call %v", i, e.Kind, e.Call)
		}
		if e.Call != nil {
			var m map[string]any
			if err := json.Unmarshal([]byte(e.Call.Function.Arguments), &m); err != nil {
				t.Fatalf("event %d: arguments %q: %v", i, e.Call.Function.Arguments, err)
			}
		}
	}
	if all.String() != in {
		t.Fatalf("events do not reproduce the input:\n got %q\nwant %q", all.String(), in)
	}
}

// checkStreamingMatches parses in in random chunkings and checks each gives
// the same events' texts and result as one Push.
func checkStreamingMatches(t *testing.T, in string, thinking bool, rng *rand.Rand) {
	t.Helper()
	opts := Options{Thinking: thinking, Tools: weatherTools(), NewID: counterIDs()}
	p := NewParser(opts)
	whole := append(p.Push(in), p.Finish()...)
	checkInvariants(t, in, whole)
	want := Collect(whole)
	for range 4 {
		opts.NewID = counterIDs()
		p := NewParser(opts)
		var evs []Event
		for rest := in; rest != ""; {
			n := 1 + rng.IntN(min(len(rest), 12))
			evs = append(evs, p.Push(rest[:n])...)
			rest = rest[n:]
		}
		evs = append(evs, p.Finish()...)
		checkInvariants(t, in, evs)
		if got := Collect(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("chunked parse of %q differs:\n got %+v\nwant %+v", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("Let me think.\n</think>\n\nHi "+call("get_weather", "city", "Oslo", "days", "x")+"\nbye", true, uint64(1))
	f.Add("<think>\n"+call("f", "a", "1")+"<tool_call>\n<function=g>\n<parameter=b>\n2", false, uint64(2))
	f.Add("a<tool_call>\n<tool_call><function=<parameter=></parameter></function></tool_call></think>", true, uint64(3))
	f.Fuzz(func(t *testing.T, in string, thinking bool, seed uint64) {
		checkStreamingMatches(t, in, thinking, rand.New(rand.NewPCG(seed, 7)))
	})
}

// genOutput builds a random model output from known parts, with the
// variations the parser must tolerate, and the result it must give.
func genOutput(rng *rand.Rand) (string, bool, Result) {
	// Text pieces: characters that come close to tags without forming one.
	alphabet := []string{"a", "b", " ", "\n", "<", ">", "/", "=", "t", "think", "tool_call", "function", "parameter", "é", "東"}
	text := func(maxLen int) string {
		for {
			var b strings.Builder
			for range rng.IntN(maxLen + 1) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			ok := true
			for _, tag := range []string{thinkOpen, thinkClose, toolCallOpen, toolCallClose, functionOpen, functionClose, paramOpen, paramClose} {
				if strings.Contains(s, tag) {
					ok = false
				}
			}
			// Avoid text ending in a tag's beginning that a following tag
			// would complete, e.g. "<tool_call" + ">".
			if ok && !strings.HasSuffix(s, "<") && !strings.HasSuffix(s, "/") {
				return s
			}
		}
	}
	trim := func(s string) string { return strings.Trim(s, " \n\t\r") }
	ws := func() string { return []string{"", "\n", "\n\n", " "}[rng.IntN(4)] }
	name := func() string { return []string{"f", "get_weather", "x_1", "名"}[rng.IntN(4)] }

	var b strings.Builder
	var want Result
	thinking := rng.IntN(2) == 0
	closed := false
	if thinking {
		want.Reasoning = trim(text(20))
		if strings.HasPrefix(want.Reasoning, "<think>") {
			want.Reasoning = ""
		}
		b.WriteString(want.Reasoning)
		if rng.IntN(4) > 0 {
			b.WriteString(ws() + thinkClose + ws())
			closed = true
		} else if rng.IntN(2) == 0 {
			// Unclosed reasoning, possibly ended by a call below.
			if rng.IntN(2) == 0 {
				return b.String(), thinking, want
			}
		}
	}
	var content []string
	c := text(20)
	if closed {
		// Content after "</think>" loses its leading whitespace.
		c = strings.TrimLeft(c, " \n\t\r")
	}
	if thinking && !closed {
		c = "" // no content inside unclosed reasoning
	}
	ncalls := rng.IntN(4)
	if ncalls > 0 {
		c = strings.TrimRight(c, " \n\t\r")
	}
	if c != "" && strings.HasPrefix(c, "<think>") {
		c = ""
	}
	content = append(content, c)
	b.WriteString(c)
	space := ws // whitespace between tags; none after a value without its closing tag
	for i := range ncalls {
		b.WriteString(space() + toolCallOpen + ws())
		nm := name()
		b.WriteString(functionOpen + nm + ">")
		var params []Param
		space = ws
		for range rng.IntN(4) {
			p := Param{Name: name(), Value: text(12)}
			params = append(params, p)
			b.WriteString(space() + paramOpen + p.Name + ">\n" + p.Value + "\n")
			space = ws
			if rng.IntN(5) > 0 {
				b.WriteString(paramClose)
			} else {
				space = func() string { return "" }
			}
		}
		b.WriteString(space())
		closeFn, closeCall := rng.IntN(4) > 0, rng.IntN(4) > 0
		last := i == ncalls-1
		after := ""
		if last {
			after = trim(text(10))
		}
		if !closeFn && !closeCall && (after != "" || !last) && rng.IntN(2) == 0 {
			closeCall = true // with neither closing tag, text after the call is swallowed
		}
		if !closeFn && !closeCall && after != "" {
			closeCall = true
		}
		if closeFn {
			b.WriteString(functionClose + ws())
		}
		if closeFn || closeCall {
			space = ws
		}
		if closeCall {
			b.WriteString(toolCallClose)
		}
		args := map[string]string{}
		for _, p := range params {
			args[p.Name] = p.Value
		}
		want.ToolCalls = append(want.ToolCalls, Call{Type: "function", Function: Function{Name: nm}, Params: params})
		if after != "" {
			b.WriteString(ws() + after)
			content = append(content, after)
		}
	}
	want.Content = strings.Join(content, "")
	return b.String(), thinking, want
}

// TestGeneratedOutputs parses many random well-formed (or tolerably
// malformed) outputs and checks that nothing is lost or misplaced.
func TestGeneratedOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 43))
	n := 3000
	if testing.Short() {
		n = 500
	}
	for i := range n {
		in, thinking, want := genOutput(rng)
		got := ParseAll(in, Options{Thinking: thinking, NewID: counterIDs()})
		if got.Reasoning != want.Reasoning || got.Content != want.Content || len(got.ToolCalls) != len(want.ToolCalls) {
			t.Fatalf("case %d %q (thinking %v):\n got reasoning %q content %q %d calls\nwant reasoning %q content %q %d calls",
				i, in, thinking, got.Reasoning, got.Content, len(got.ToolCalls), want.Reasoning, want.Content, len(want.ToolCalls))
		}
		for j, c := range got.ToolCalls {
			w := want.ToolCalls[j]
			if c.Function.Name != w.Function.Name || !reflect.DeepEqual(c.Params, w.Params) && !(len(c.Params) == 0 && len(w.Params) == 0) {
				t.Fatalf("case %d %q: call %d = %s %+v, want %s %+v", i, in, j, c.Function.Name, c.Params, w.Function.Name, w.Params)
			}
			var args map[string]string
			if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
				t.Fatalf("case %d: arguments %q: %v", i, c.Function.Arguments, err)
			}
			for _, p := range w.Params {
				if args[p.Name] != lastValue(w.Params, p.Name) {
					t.Fatalf("case %d: argument %s = %q, want %q", i, p.Name, args[p.Name], p.Value)
				}
			}
		}
		checkStreamingMatches(t, in, thinking, rng)
	}
}

func lastValue(ps []Param, name string) string {
	v := ""
	for _, p := range ps {
		if p.Name == name {
			v = p.Value
		}
	}
	return v
}

func TestSchemaFromParameters(t *testing.T) {
	got, err := SchemaFromParameters([]byte(`{"type":"object","properties":{
		"a":{"type":"integer"},"b":{"type":["number","null"]},"c":{"anyOf":[{"type":"boolean"},{"type":"array"}]},
		"d":{"enum":["x",1]},"e":{"description":"free"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := ToolSchema{"a": {"integer"}, "b": {"number", "null"}, "c": {"boolean", "array"}, "d": {"string", "number"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{`[1]`, `{"properties":{"a":{"type":3}}}`, `{"properties":{"a":5}}`} {
		if _, err := SchemaFromParameters([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if s, err := SchemaFromParameters(nil); err != nil || len(s) != 0 {
		t.Errorf("nil parameters: %v %v", s, err)
	}
}
