package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzVars are the variables fuzzed templates render with.
const fuzzVars = `{"x": [1, 2.5, "s", null, true, {"k": [1]}], "d": {"a": 1, "items": 5}, "s": "héllo",
 "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "t"}],
 "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}], "big": 123456789012345678901234567890}`

// FuzzRender checks that Parse and Render never panic on any template;
// errors are fine.
func FuzzRender(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "jinja_cases.json"))
	if err != nil {
		f.Fatal(err)
	}
	var cases struct {
		Cases []struct {
			Template string `json:"template"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases.Cases {
		f.Add(c.Template)
	}
	src, err := os.ReadFile(filepath.Join("..", "testdata", "chat", "chat_template.jinja"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(src))
	v, err := DecodeJSON([]byte(fuzzVars))
	if err != nil {
		f.Fatal(err)
	}
	vars := map[string]any{}
	for _, k := range v.(*Object).Keys() {
		vars[k], _ = v.(*Object).Get(k)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		tmpl.maxSteps = 20_000
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = tmpl.Render(vars)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("render of %q takes over 2 s", src)
		}
	})
}

// FuzzChatInputs renders the Qwen3.5 template with arbitrary JSON requests:
// it must never panic, and a request that renders must render the same way
// twice.
func FuzzChatInputs(f *testing.F) {
	tmpl, cases := loadGolden(f)
	for _, c := range cases {
		f.Add([]byte(c.Inputs))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeJSON(data)
		if err != nil {
			return
		}
		if _, ok := v.(*Object); !ok {
			return
		}
		a, errA := renderCase(tmpl, data)
		b, errB := renderCase(tmpl, data)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("render not deterministic: %q/%v vs %q/%v", a, errA, b, errB)
		}
	})
}
