package diag

import (
	"encoding/json"
	"testing"
)

// chatJSON builds a minimal chat completion body.
func chatJSON(t *testing.T, content any, finish string, calls []map[string]any) []byte {
	t.Helper()
	msg := map[string]any{"role": "assistant", "content": content, "tool_calls": calls}
	data, err := json.Marshal(map[string]any{
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func checkByID(t *testing.T, id string) BehaviorCheck {
	t.Helper()
	for _, c := range BehaviorChecks() {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %q", id)
	return BehaviorCheck{}
}

func TestBehaviorCheckIDsMatchSeed(t *testing.T) {
	want := []string{
		"behavior-arithmetic", "behavior-json", "behavior-sort", "behavior-french",
		"behavior-spanish", "behavior-japanese", "behavior-python", "behavior-extract",
		"behavior-reasoning", "behavior-instruction", "behavior-tool",
	}
	seed, err := ReadFile("../testdata/seed/report.pretty.json")
	if err != nil {
		t.Fatal(err)
	}
	checks := BehaviorChecks()
	if len(checks) != len(want) || len(seed.Behavior) != len(want) {
		t.Fatalf("%d checks, seed has %d, want %d", len(checks), len(seed.Behavior), len(want))
	}
	for i, c := range checks {
		if c.ID != want[i] || seed.Behavior[i].ID != want[i] {
			t.Errorf("check %d: id %q, seed %q, want %q", i, c.ID, seed.Behavior[i].ID, want[i])
		}
		if c.Prompt == "" || c.MaxTokens <= 0 {
			t.Errorf("%s: empty prompt or max_tokens", c.ID)
		}
	}
}

// TestJudgesPassSeedResponses: every seed response (vLLM's, all passing)
// passes this package's judge.
func TestJudgesPassSeedResponses(t *testing.T) {
	seed, err := ReadFile("../testdata/seed/report.pretty.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range seed.Behavior {
		if why := checkByID(t, r.ID).Judge(r.Response); why != "" {
			t.Errorf("%s: seed response fails: %s", r.ID, why)
		}
	}
}

func TestTextJudges(t *testing.T) {
	cases := []struct {
		id      string
		content string
		pass    bool
	}{
		{"behavior-arithmetic", "391", true},
		{"behavior-arithmetic", " 391.\n", true},
		{"behavior-arithmetic", "392", false},
		{"behavior-arithmetic", "The answer is 391", false},
		{"behavior-arithmetic", "3910", false},
		{"behavior-json", `{"name": "Ada", "age": 37}`, true},
		{"behavior-json", `{"age":37,"name":"Ada"}`, true},
		{"behavior-json", `{"name": "Ada", "age": "37"}`, false},
		{"behavior-json", `{"name": "Ada", "age": 37, "city": "London"}`, false},
		{"behavior-json", `{"name": "Ada"}`, false},
		{"behavior-json", "```json\n{\"name\": \"Ada\", \"age\": 37}\n```", false},
		{"behavior-json", `{"name": "Ada", "age": 37`, false},
		{"behavior-sort", "[-2, 0, 5, 8]", true},
		{"behavior-sort", "[-2,0,5,8]", true},
		{"behavior-sort", "[0, -2, 5, 8]", false},
		{"behavior-sort", "-2, 0, 5, 8", false},
		{"behavior-french", "bonjour", true},
		{"behavior-french", "Bonjour", false},
		{"behavior-french", "bonjour!", false},
		{"behavior-french", "salut", false},
		{"behavior-spanish", "31", true},
		{"behavior-spanish", "treinta y uno", false},
		{"behavior-japanese", "東京", true},
		{"behavior-japanese", "東京。", true},
		{"behavior-japanese", "京都", false},
		{"behavior-japanese", "Tokyo", false},
		{"behavior-extract", "mira@example.org", true},
		{"behavior-extract", "Mira Lindqvist", false},
		{"behavior-extract", "Email: mira@example.org", false},
		{"behavior-reasoning", "14", true},
		{"behavior-reasoning", "12", false},
		{"behavior-instruction", "violet", true},
		{"behavior-instruction", " violet\n", true},
		{"behavior-instruction", "Violet", false},
		{"behavior-instruction", "violet.", false},
		{"behavior-instruction", "VIOLET", false},
		{"behavior-arithmetic", "", false},
	}
	for _, tc := range cases {
		why := checkByID(t, tc.id).Judge(chatJSON(t, tc.content, "stop", nil))
		if (why == "") != tc.pass {
			t.Errorf("%s %q: pass=%v (%s), want %v", tc.id, tc.content, why == "", why, tc.pass)
		}
	}
}

func TestPythonJudge(t *testing.T) {
	cases := []struct {
		code string
		pass bool
	}{
		{"def is_even(n):\n return n % 2 == 0", true},
		{"def is_even(n):\n    return n % 2 == 0\n", true},
		{"```python\ndef is_even(n):\n    return n % 2 == 0\n```", true},
		{"def is_even(x: int) -> bool:\n    \"\"\"Even test.\"\"\"\n    return (x % 2) == 0", true},
		{"def is_even(n):\n    return not n % 2", true},
		{"def is_even(n):\n    return (n & 1) == 0", true},
		{"def is_even(n):\n    return True if n % 2 == 0 else False", true},
		{"def is_even(n):\n    if n % 2 == 0:\n        return True\n    else:\n        return False", true},
		{"def is_even(n):\n    if n % 2 == 0:\n        return True\n    return False", true},
		// Wrong in Python: parses as n & (1 == 0).
		{"def is_even(n):\n    return n & 1 == 0", false},
		{"def is_even(n):\n    return n % 2 == 1", false},
		{"def is_even(n):\n    return n % 2", false},
		{"def is_even(n):\n    return m % 2 == 0", false},
		{"def is_even(n):\n    pass", false},
		{"def is_even(n):\n", false},
		{"def is_odd(n):\n    return n % 2 == 1", false},
		{"def is_even(n, m):\n    return n % 2 == 0", false},
		{"if True:\n    def is_even(n):\n        return n % 2 == 0", false},
		{"is_even = lambda n: n % 2 == 0", false},
		{"def is_even(n):\n    if n % 2 == 0:\n        return False\n    return True", false},
		{"def is_even(n):\n    print(n)\n    return n % 2 == 0", false},
	}
	c := checkByID(t, "behavior-python")
	for _, tc := range cases {
		why := c.Judge(chatJSON(t, tc.code, "stop", nil))
		if (why == "") != tc.pass {
			t.Errorf("%q: pass=%v (%s), want %v", tc.code, why == "", why, tc.pass)
		}
	}
}

func TestToolJudge(t *testing.T) {
	call := func(name, args string) map[string]any {
		return map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": name, "arguments": args}}
	}
	cases := []struct {
		name    string
		content any
		finish  string
		calls   []map[string]any
		pass    bool
	}{
		{"right", nil, "tool_calls", []map[string]any{call("get_weather", `{"city": "Oslo"}`)}, true},
		{"compact args", nil, "tool_calls", []map[string]any{call("get_weather", `{"city":"Oslo"}`)}, true},
		{"text too", "Let me check.", "tool_calls", []map[string]any{call("get_weather", `{"city": "Oslo"}`)}, true},
		{"finish stop", nil, "stop", []map[string]any{call("get_weather", `{"city": "Oslo"}`)}, false},
		{"no call", "It is sunny.", "stop", nil, false},
		{"wrong name", nil, "tool_calls", []map[string]any{call("get_time", `{"city": "Oslo"}`)}, false},
		{"wrong city", nil, "tool_calls", []map[string]any{call("get_weather", `{"city": "Bergen"}`)}, false},
		{"extra arg", nil, "tool_calls", []map[string]any{call("get_weather", `{"city": "Oslo", "unit": "C"}`)}, false},
		{"args not JSON", nil, "tool_calls", []map[string]any{call("get_weather", `city=Oslo`)}, false},
		{"two calls", nil, "tool_calls", []map[string]any{
			call("get_weather", `{"city": "Oslo"}`), call("get_weather", `{"city": "Oslo"}`)}, false},
	}
	c := checkByID(t, "behavior-tool")
	for _, tc := range cases {
		why := c.Judge(chatJSON(t, tc.content, tc.finish, tc.calls))
		if (why == "") != tc.pass {
			t.Errorf("%s: pass=%v (%s), want %v", tc.name, why == "", why, tc.pass)
		}
	}
}

func TestJudgeRejectsNonCompletions(t *testing.T) {
	c := checkByID(t, "behavior-arithmetic")
	for _, body := range []string{`not json`, `{"choices": []}`, `{"error": {"message": "x"}}`, `[]`} {
		if why := c.Judge([]byte(body)); why == "" {
			t.Errorf("%s: passed", body)
		}
	}
}
