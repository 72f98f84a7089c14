package diag

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// A BehaviorCheck is one prompt with an unambiguous expected answer and a
// strict judge of the server's response.
type BehaviorCheck struct {
	// ID is the check's id in the report, as in the seed.
	ID string
	// Prompt is the single user message.
	Prompt string
	// MaxTokens bounds the answer.
	MaxTokens int
	// Tools, when set, are offered to the model.
	Tools []tool
	// judge returns "" when the response passes, else why it fails.
	judge func(r *chatResponse) string
}

// Judge returns "" when resp passes the check, else the reason it fails.
func (c BehaviorCheck) Judge(resp []byte) string {
	var r chatResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Sprintf("response is not a chat completion: %v", err)
	}
	if len(r.Choices) == 0 {
		return "response has no choices"
	}
	return c.judge(&r)
}

func (c BehaviorCheck) request(model string) chatRequest {
	return chatRequest{
		Model:              model,
		Messages:           []message{{Role: "user", Content: c.Prompt}},
		MaxTokens:          c.MaxTokens,
		Temperature:        0,
		Tools:              c.Tools,
		ChatTemplateKwargs: noThinking(),
	}
}

// weatherTool returns the tool offered by behavior-tool.
func weatherTool() []tool {
	return []tool{{
		Type: "function",
		Function: toolFunction{
			Name:        "get_weather",
			Description: "Get the current weather for a city.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string",` +
				`"description":"The city name, e.g. Paris"}},"required":["city"]}`),
		},
	}}
}

// BehaviorChecks returns the behaviour checks in report order. The ids are
// the seed's; the prompts are this package's own.
func BehaviorChecks() []BehaviorCheck {
	return []BehaviorCheck{
		{
			ID:        "behavior-arithmetic",
			Prompt:    "What is 17 multiplied by 23? Answer with the number only.",
			MaxTokens: 16,
			judge:     exactAnswer("391"),
		},
		{
			ID: "behavior-json",
			Prompt: `Return a JSON object with exactly two fields: "name" set to the string "Ada" and ` +
				`"age" set to the number 37. Output only the JSON object, without code fences.`,
			MaxTokens: 48,
			judge:     jsonAnswer(map[string]any{"name": "Ada", "age": 37.0}),
		},
		{
			ID: "behavior-sort",
			Prompt: "Sort these integers in ascending order: 8, -2, 5, 0. " +
				"Output only the sorted list in the form [a, b, c, d].",
			MaxTokens: 32,
			judge:     jsonAnswer([]any{-2.0, 0.0, 5.0, 8.0}),
		},
		{
			ID:        "behavior-french",
			Prompt:    `Translate the English greeting "hello" into French. Answer with one lowercase word only.`,
			MaxTokens: 16,
			judge:     exactAnswer("bonjour"),
		},
		{
			ID:        "behavior-spanish",
			Prompt:    "¿Cuántos días tiene el mes de enero? Responde solo con el número.",
			MaxTokens: 16,
			judge:     exactAnswer("31"),
		},
		{
			ID:        "behavior-japanese",
			Prompt:    "日本の首都はどこですか？都市名だけを漢字で答えてください。",
			MaxTokens: 16,
			judge:     exactAnswer("東京"),
		},
		{
			ID: "behavior-python",
			Prompt: "Write a Python function is_even(n) that returns True when the integer n is even " +
				"and False otherwise. Output only the code, without code fences or explanation.",
			MaxTokens: 96,
			judge:     pythonIsEven,
		},
		{
			ID: "behavior-extract",
			Prompt: "Extract the e-mail address from the following text and output only the address.\n\n" +
				"Text: Please send the signed form to Mira Lindqvist (mira@example.org) before Friday.",
			MaxTokens: 24,
			judge:     exactAnswer("mira@example.org"),
		},
		{
			ID: "behavior-reasoning",
			Prompt: "Tom has 3 boxes with 4 apples in each box. He eats 2 apples and then buys 4 more. " +
				"How many apples does he have now? Answer with the number only.",
			MaxTokens: 16,
			judge:     exactAnswer("14"),
		},
		{
			ID: "behavior-instruction",
			Prompt: "Here are three colours: RED, GREEN, VIOLET. Reply with the last colour in the list, " +
				"written in lowercase letters, with no punctuation and nothing else.",
			MaxTokens: 16,
			judge:     verbatimAnswer("violet"),
		},
		{
			ID:        "behavior-tool",
			Prompt:    "What is the weather like in Oslo right now? Use the available tool.",
			MaxTokens: 128,
			Tools:     weatherTool(),
			judge:     toolAnswer("get_weather", map[string]any{"city": "Oslo"}),
		},
	}
}

// trimAnswer trims surrounding white space and one trailing full stop
// (ASCII or ideographic): "391." answers "391".
func trimAnswer(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ".")
	s = strings.TrimSuffix(s, "。")
	return strings.TrimSpace(s)
}

// exactAnswer passes when the trimmed content equals want.
func exactAnswer(want string) func(*chatResponse) string {
	return func(r *chatResponse) string {
		if got := trimAnswer(r.content()); got != want {
			return fmt.Sprintf("answer %q, want %q", got, want)
		}
		return ""
	}
}

// verbatimAnswer passes when the content, with only surrounding white space
// trimmed, equals want: punctuation counts.
func verbatimAnswer(want string) func(*chatResponse) string {
	return func(r *chatResponse) string {
		if got := strings.TrimSpace(r.content()); got != want {
			return fmt.Sprintf("answer %q, want exactly %q", got, want)
		}
		return ""
	}
}

// jsonAnswer passes when the trimmed content parses as JSON (no code fences)
// and equals want (numbers compare as float64).
func jsonAnswer(want any) func(*chatResponse) string {
	return func(r *chatResponse) string {
		got := strings.TrimSpace(r.content())
		var v any
		if err := json.Unmarshal([]byte(got), &v); err != nil {
			return fmt.Sprintf("answer %q is not JSON: %v", got, err)
		}
		if !reflect.DeepEqual(v, want) {
			return fmt.Sprintf("answer %s, want %v", got, want)
		}
		return ""
	}
}

// toolAnswer passes when the response makes exactly one function call to
// name with arguments equal to args, and finish_reason is "tool_calls".
func toolAnswer(name string, args map[string]any) func(*chatResponse) string {
	return func(r *chatResponse) string {
		if fr := r.finishReason(); fr != "tool_calls" {
			return fmt.Sprintf("finish_reason %q, want \"tool_calls\"", fr)
		}
		calls := r.Choices[0].Message.ToolCalls
		if len(calls) != 1 {
			return fmt.Sprintf("%d tool calls, want 1", len(calls))
		}
		c := calls[0]
		if c.Type != "" && c.Type != "function" {
			return fmt.Sprintf("tool call type %q, want \"function\"", c.Type)
		}
		if c.Function.Name != name {
			return fmt.Sprintf("tool call name %q, want %q", c.Function.Name, name)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(c.Function.Arguments), &got); err != nil {
			return fmt.Sprintf("tool call arguments %q are not a JSON object: %v", c.Function.Arguments, err)
		}
		if !reflect.DeepEqual(got, args) {
			return fmt.Sprintf("tool call arguments %s, want %v", c.Function.Arguments, args)
		}
		return ""
	}
}

var (
	pyDefIsEven = regexp.MustCompile(`^def is_even\(\s*([A-Za-z_]\w*)\s*(?::\s*int\s*)?\)\s*(?:->\s*bool\s*)?:\s*$`)
	pyFence     = regexp.MustCompile("^```[a-zA-Z]*\n?|\n?```$")
)

// pythonIsEven inspects (never executes) the code: it must define
// is_even(p) at top level and return an expression that is exactly one of
// the usual even tests on p, e.g. "p % 2 == 0" or "not p % 2". Forms that
// look right but are wrong in Python, such as "p & 1 == 0" (which parses as
// "p & (1 == 0)"), fail. A surrounding code fence is tolerated.
func pythonIsEven(r *chatResponse) string {
	code := strings.TrimSpace(r.content())
	code = strings.TrimSpace(pyFence.ReplaceAllString(code, ""))
	lines := strings.Split(code, "\n")
	for i, line := range lines {
		m := pyDefIsEven.FindStringSubmatch(strings.TrimRight(line, " \t\r"))
		if m == nil {
			continue
		}
		p := m[1]
		body := functionBody(lines[i+1:])
		if len(body) == 0 {
			return "is_even has no body"
		}
		if evenBody(body, p) {
			return ""
		}
		return fmt.Sprintf("is_even(%s) body does not return a recognised even test: %q", p, strings.Join(body, "\n"))
	}
	return fmt.Sprintf("no top-level \"def is_even(n):\" in %q", code)
}

// functionBody returns the indented lines after a def line, stripped of
// indentation, blank lines, comments and a docstring on one line.
func functionBody(lines []string) []string {
	var body []string
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if l[0] != ' ' && l[0] != '\t' {
			break
		}
		s := strings.TrimSpace(l)
		if strings.HasPrefix(s, "#") {
			continue
		}
		if (strings.HasPrefix(s, `"""`) && strings.HasSuffix(s, `"""`) && len(s) >= 6) ||
			(strings.HasPrefix(s, `'''`) && strings.HasSuffix(s, `'''`) && len(s) >= 6) {
			continue
		}
		body = append(body, s)
	}
	return body
}

// evenBody reports whether the body is "return <even test>" or the
// if/else form returning True and False.
func evenBody(body []string, p string) bool {
	norm := func(s string) string { return strings.Join(strings.Fields(s), "") }
	tests := map[string]bool{}
	for _, t := range []string{
		"P%2==0", "(P%2)==0", "0==P%2", "P%2!=1", "(P%2)!=1", "not P%2", "not(P%2)",
		"(P&1)==0", "not P&1", "not(P&1)",
	} {
		tests[norm(strings.ReplaceAll(t, "P", p))] = true
	}
	isTest := func(expr string) bool {
		e := norm(expr)
		if tests[e] {
			return true
		}
		if strings.HasPrefix(e, "(") && strings.HasSuffix(e, ")") && tests[e[1:len(e)-1]] {
			return true
		}
		return false
	}
	if len(body) == 1 && strings.HasPrefix(body[0], "return ") {
		expr := strings.TrimPrefix(body[0], "return ")
		if isTest(expr) {
			return true
		}
		// return True if <test> else False
		if t, ok := strings.CutPrefix(norm(expr), "Trueif"); ok {
			if t, ok := strings.CutSuffix(t, "elseFalse"); ok && tests[t] {
				return true
			}
		}
		return false
	}
	// if <test>: / return True / else: / return False (else optional)
	if len(body) >= 3 && strings.HasPrefix(body[0], "if ") && strings.HasSuffix(body[0], ":") &&
		isTest(strings.TrimSuffix(strings.TrimPrefix(body[0], "if "), ":")) &&
		norm(body[1]) == "returnTrue" {
		rest := body[2:]
		if len(rest) == 2 && norm(rest[0]) == "else:" {
			rest = rest[1:]
		}
		return len(rest) == 1 && norm(rest[0]) == "returnFalse"
	}
	return false
}
