package httpapi

import (
	"os"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/grammar/lark"
)

// TestCustomToolGrammar checks that a Responses custom tool's grammar is
// enforced: every apply_patch call a random model writes is a whole patch
// (or, cut by the length limit, a prefix of one in an incomplete
// response), and a regex format is matched whole.
func TestCustomToolGrammar(t *testing.T) {
	src, err := os.ReadFile("../grammar/lark/testdata/patch.lark")
	if err != nil {
		t.Fatal(err)
	}
	g, err := lark.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{})
	tool := func(format map[string]any) map[string]any {
		return map[string]any{"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": format}
	}
	lark := map[string]any{"type": "grammar", "syntax": "lark", "definition": string(src)}
	valid := map[bool]int{}
	const runs = 6
	for _, enforced := range []bool{true, false} {
		format := lark
		if !enforced {
			format = map[string]any{"type": "text"}
		}
		for seed := range runs {
			body := respBody("Add a file hello.txt", 200)
			body["tools"] = []any{tool(format)}
			body["tool_choice"] = map[string]any{"type": "custom", "name": "apply_patch"}
			body["temperature"], body["seed"] = 1.0, seed
			resp := postResponse(t, s, body)
			calls := respItems(resp, "custom_tool_call")
			if len(calls) != 1 {
				if enforced {
					t.Fatalf("seed %d: want one custom_tool_call: %v", seed, resp)
				}
				continue
			}
			in := calls[0]["input"].(string)
			switch {
			case g.Match([]byte(in)) || g.Match([]byte(in+"\n")):
				valid[enforced]++
			case enforced && resp["status"] == "incomplete" && g.Prefix([]byte(in)):
				t.Logf("seed %d: cut by the length limit: %q", seed, in)
			case enforced:
				t.Errorf("seed %d: status %v, input %q is not a patch", seed, resp["status"], in)
			}
		}
	}
	t.Logf("valid patches from a random model: %d/%d with the grammar enforced, %d/%d without", valid[true], runs, valid[false], runs)
	if valid[true] == 0 {
		t.Errorf("no complete patch with the grammar enforced")
	}

	// A regex format, streamed and not.
	for _, stream := range []bool{false, true} {
		body := respBody("Answer", 30)
		body["tools"] = []any{tool(map[string]any{"type": "grammar", "syntax": "regex", "definition": `(yes|no) [0-9]{2}`})}
		body["tool_choice"] = map[string]any{"type": "custom", "name": "apply_patch"}
		body["temperature"], body["seed"] = 1.0, 3
		var resp map[string]any
		if stream {
			body["stream"] = true
			resp = checkRespStream(t, postRespStream(t, s, body))
		} else {
			resp = postResponse(t, s, body)
		}
		calls := respItems(resp, "custom_tool_call")
		if len(calls) != 1 {
			t.Fatalf("regex tool: %v", resp)
		}
		if in := calls[0]["input"].(string); !(strings.HasPrefix(in, "yes ") || strings.HasPrefix(in, "no ")) || len(strings.TrimPrefix(strings.TrimPrefix(in, "yes "), "no ")) != 2 {
			t.Errorf("regex tool input %q", in)
		}
	}

	// A grammar that does not compile is a 400 naming the field.
	for _, def := range []string{"start: (", "start: \"a\" start", "other: \"a\""} {
		body := respBody("x", 5)
		body["tools"] = []any{tool(map[string]any{"type": "grammar", "syntax": "lark", "definition": def})}
		status, data := post(t, s, "/v1/responses", body)
		if status != 400 || !strings.Contains(string(data), "tools[0].format.definition") {
			t.Errorf("%q: %d %s", def, status, data)
		}
	}
}
