package lark

import (
	"os"
	"testing"
	"time"
)

// FuzzParse checks that no grammar text panics the parser or takes long.
func FuzzParse(f *testing.F) {
	patch, _ := os.ReadFile("testdata/patch.lark")
	for _, s := range []string{string(patch), "start: a\na: \"x\"i ~ 2..3 | /[0-9]+/s\n%import common (WS, INT)\n%ignore WS", "start: (", "start: [\"a\"", "start: \"a\" -> b\n    | c\nc: \"d\"..\"f\"", "%import common.LF -> X\nstart: X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		start := time.Now()
		g, err := Parse(src)
		if err == nil {
			g.Match([]byte("*** Begin Patch\n"))
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%q took %v", src, d)
		}
	})
}
