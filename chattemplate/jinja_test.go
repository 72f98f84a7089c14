package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJinjaCases checks the interpreter against Python Jinja2 on the small
// templates of testdata/jinja_cases.json (see testdata/README.md).
func TestJinjaCases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "jinja_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		VarsJSON string `json:"vars_json"`
		Cases    []struct {
			Template string  `json:"template"`
			Output   *string `json:"output"`
			Error    string  `json:"error"`
			Message  string  `json:"message"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	v, err := DecodeJSON([]byte(f.VarsJSON))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	for _, k := range v.(*Object).Keys() {
		vars[k], _ = v.(*Object).Get(k)
	}
	for i, c := range f.Cases {
		name := strings.ReplaceAll(c.Template, "\n", "⏎")
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			got, err := renderString(c.Template, vars)
			if c.Output != nil {
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if got != *c.Output {
					t.Fatalf("case %d: template %q\n got: %q\nwant: %q", i, c.Template, got, *c.Output)
				}
				return
			}
			if err == nil {
				t.Fatalf("case %d: template %q rendered %q, want %s: %s", i, c.Template, got, c.Error, c.Message)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("case %d: error %v is not an *Error", i, err)
			}
			if e.Kind != c.Error {
				t.Fatalf("case %d: template %q: error %q, want %s: %s", i, c.Template, err, c.Error, c.Message)
			}
			// Syntax error wording is Jinja's parser's own; only the class
			// must match. Runtime messages must match exactly.
			if !strings.HasPrefix(e.Kind, "Template") || e.Kind == "TemplateError" || e.Kind == "TemplateRuntimeError" {
				if e.Message != c.Message {
					t.Fatalf("case %d: template %q: message %q, want %q", i, c.Template, e.Message, c.Message)
				}
			}
		})
	}
}

func renderString(src string, vars map[string]any) (string, error) {
	tmpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(vars)
}
