package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The stand-ins of the Qwen3.6 and Qwen3.8 chat templates in testdata/chat
// (qwen36-like.jinja, qwen38-like.jinja; see its README) against what
// Jinja2 renders for them (gen/render.py on gen/later-inputs.json).
func TestLaterTemplates(t *testing.T) {
	for _, name := range []string{"qwen36-like", "qwen38-like"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "chat")
			src, err := os.ReadFile(filepath.Join(dir, name+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Parse(string(src))
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, name+".cases.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cases []goldenCase
			if err := json.Unmarshal(data, &cases); err != nil {
				t.Fatal(err)
			}
			if len(cases) != 8 {
				t.Fatalf("%d cases, want 8", len(cases))
			}
			for _, c := range cases {
				if c.Rendered == nil {
					t.Fatalf("%s: no rendered golden", c.Name)
				}
				got, err := renderCase(tmpl, c.Inputs)
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
				} else if got != *c.Rendered {
					t.Errorf("%s: mismatch\n got: %q\nwant: %q", c.Name, got, *c.Rendered)
				}
			}
		})
	}
}

func TestReads(t *testing.T) {
	for _, c := range []struct {
		src  string
		name string
		want bool
	}{
		{"{{ reasoning_effort }}", "reasoning_effort", true},
		{"{% if reasoning_effort is defined %}x{% endif %}", "reasoning_effort", true},
		{"{{ reasoning_effort | default('medium') }}", "reasoning_effort", true},
		{"{% macro m() %}{{ reasoning_effort }}{% endmacro %}", "reasoning_effort", true},
		{"{% set e = 'low' if not reasoning_effort else reasoning_effort %}", "reasoning_effort", true},
		{"{{ message.reasoning_effort }}", "reasoning_effort", false},
		{"{{ message['reasoning_effort'] }}", "reasoning_effort", false},
		{"{{ 'reasoning_effort' }}reasoning_effort", "reasoning_effort", false},
		{"{# reasoning_effort #}", "reasoning_effort", false},
		{"{% set reasoning_effort = 'low' %}", "reasoning_effort", false},
		{"{{ reasoning_efforts }}", "reasoning_effort", false},
	} {
		tmpl, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if got := tmpl.Reads(c.name); got != c.want {
			t.Errorf("%q: Reads(%q) = %v, want %v", c.src, c.name, got, c.want)
		}
	}
	for file, want := range map[string][2]bool{ // preserve_thinking, reasoning_effort
		"chat_template.jinja": {false, false},
		"qwen36-like.jinja":   {true, false},
		"qwen38-like.jinja":   {true, true},
	} {
		src, err := os.ReadFile(filepath.Join("..", "testdata", "chat", file))
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := Parse(string(src))
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]bool{tmpl.Reads("preserve_thinking"), tmpl.Reads("reasoning_effort")}; got != want {
			t.Errorf("%s reads preserve_thinking, reasoning_effort: %v, want %v", file, got, want)
		}
	}
}
