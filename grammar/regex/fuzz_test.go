package regex

import (
	"testing"
	"time"
)

// FuzzCompile checks that no pattern panics the compiler or takes long.
func FuzzCompile(f *testing.F) {
	for _, p := range patterns {
		f.Add(p, true)
	}
	f.Add(`(a|b)*a(a|b){20}`, false)
	f.Add(`\u{1F600}\uD83D[\s\S]{0,1000}`, false)
	f.Fuzz(func(t *testing.T, p string, search bool) {
		start := time.Now()
		n, err := Parse(p, search)
		if err == nil {
			if d, err := Compile(n); err == nil {
				d.Match([]byte("abc"))
				d.Shortest(d.Start())
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%q took %v", p, d)
		}
	})
}
