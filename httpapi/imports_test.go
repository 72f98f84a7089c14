package httpapi

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServerImportsOnlyLLM keeps the server above the Go API (issue 47):
// the non-test files of httpapi and its packages import llm and the wire
// formats' packages, never engine, model or compute, so that everything
// the server knows of a model (and a program that opened one can hand it)
// is llm's API.
func TestServerImportsOnlyLLM(t *testing.T) {
	const module = "github.com/govinfer/govinfer/"
	forbidden := []string{"engine", "model", "compute"}
	for _, dir := range []string{".", "webui"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, pkg := range forbidden {
					if path == module+pkg || strings.HasPrefix(path, module+pkg+"/") {
						t.Errorf("%s imports %s: the server reaches the model through llm alone", f, path)
					}
				}
			}
		}
	}
}
