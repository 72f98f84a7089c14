package gbnf

import (
	"testing"
	"time"
)

// FuzzParse checks that no grammar text panics the parser or takes long.
func FuzzParse(f *testing.F) {
	for _, s := range []string{jsonGBNF, `root ::= "a"{2,3} [^a-c\x41] . ("b" | c)*` + "\nc ::= \"\\u00e9\"", `root ::= (`, `root ::= [`, `root ::= "\`, `x ::= y`, "root ::= a{,5}\na ::= \"a\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		start := time.Now()
		g, err := Parse(src)
		if err == nil {
			g.Match([]byte("abc"))
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%q took %v", src, d)
		}
	})
}
