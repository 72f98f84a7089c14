package regex

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// patterns are RE2-compatible, so Go's regexp is the reference.
var patterns = []string{
	`abc`, `a|b|cd`, `a*b+c?`, `(ab|cd){2,3}`, `[a-c]{0,2}x`, `\d{3}-\d{4}`, `[^a]b`, `.*`, `.+é`,
	`(?i)ab`, `\w+@\w+\.com`, `\s*x\s*`, `^a.*z$`, `^ab|cd$`, `\p{Greek}+`, `[α-ω]b`, `(a|ab)(c|bcd)(d*)`,
	`x{0}y`, `(?:a?){3}a{3}`, `[\x00-\x{10FFFF}]`, `日本|語`, `[0-9a-fA-F]{1,4}`, `(?P<y>\d{4})-(?<m>\d\d)`,
}

// alphabet draws random texts that hit the patterns' interesting bytes.
var alphabet = []string{"a", "b", "c", "d", "x", "y", "z", "A", "B", "é", "α", "ω", "β", "日", "本", "語", "0", "1", "9", "-", "@", ".", "com", " ", "\n", "\xff", "\xce"}

func randText(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(9); n > 0; n-- {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func TestDFAAgainstRegexp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range patterns {
		for _, search := range []bool{false, true} {
			n, err := Parse(p, search)
			if err != nil {
				t.Fatalf("Parse(%q): %v", p, err)
			}
			d, err := Compile(n)
			if err != nil {
				t.Fatalf("Compile(%q): %v", p, err)
			}
			ref := regexp.MustCompile(`^(?:` + p + `)$`)
			if search {
				ref = regexp.MustCompile(p)
			}
			for i := 0; i < 3000; i++ {
				s := randText(r)
				if i%3 == 0 { // texts the reference accepts, via the shortest completion
					s = string(d.Shortest(d.Start()))
				}
				if !utf8.ValidString(s) {
					continue // the DFA matches valid UTF-8 only; regexp reads U+FFFD
				}
				if got, want := d.Match([]byte(s)), ref.MatchString(s); got != want {
					t.Fatalf("%q (search %v) on %q: DFA %v, regexp %v", p, search, s, got, want)
				}
			}
		}
	}
}

// TestPrefixesLive checks that every prefix the DFA keeps can be
// completed: the shortest completion from each state is a match.
func TestPrefixesLive(t *testing.T) {
	for _, p := range patterns {
		n, _ := Parse(p, false)
		d, _ := Compile(n)
		for s := int32(0); s < int32(d.States()); s++ {
			cur := s
			for _, b := range d.Shortest(s) {
				cur = d.Step(cur, b)
			}
			if cur < 0 || !d.Accept(cur) {
				t.Fatalf("%q: state %d's shortest completion does not match", p, s)
			}
		}
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		pattern string
		pos     int
		want    string
	}{
		{`a(?=b)`, 1, "lookaround"},
		{`(ab`, -1, "missing closing )"},
		{`a\bc`, -1, "word boundary"},
		{`a^b`, -1, "anchor"},
		{`[b-a]`, 1, "invalid character class range"},
		{`a{2000}`, 1, "invalid repeat count"},
		{`a\1`, 1, "invalid escape"},
	} {
		n, err := Parse(c.pattern, false)
		if err == nil {
			_, err = Compile(n)
		}
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Msg, c.want) || (c.pos >= 0 && e.Pos != c.pos) {
			t.Errorf("%q: got %v, want an *Error at %d containing %q", c.pattern, err, c.pos, c.want)
		}
	}
	// A pattern that matches nothing, and one whose DFA explodes.
	for _, p := range []string{`[^\x00-\x{10FFFF}]`, `a[^\x00-\x{10FFFF}]`} {
		n, err := Parse(p, false)
		if err == nil {
			_, err = Compile(n)
		}
		if err == nil || !strings.Contains(err.Error(), "matches nothing") {
			t.Errorf("%q: got %v, want 'matches nothing'", p, err)
		}
	}
	n, _ := Parse(`(a|b)*a(a|b){20}`, false)
	if _, err := Compile(n); !errors.Is(err, ErrTooComplex) {
		t.Errorf("exponential DFA: got %v, want ErrTooComplex", err)
	}
}

func TestECMAScriptEscapes(t *testing.T) {
	for p, text := range map[string]string{`\u0041\u{1F600}`: "A😀", `a\Z`: "a", `\/\-`: "/-"} {
		n, err := Parse(p, false)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		d, err := Compile(n)
		if err != nil || !d.Match([]byte(text)) {
			t.Errorf("%q should match %q (%v)", p, text, err)
		}
	}
}

// TestCompileTimeBounded checks that large Unicode classes under
// repetition, searched, compile or are refused quickly (\p{L}{3,20} as a
// JSON Schema pattern took 74 s before classes shared their UTF-8
// suffixes and classes leading to the same NFA states were merged).
func TestCompileTimeBounded(t *testing.T) {
	for _, p := range []string{`\p{L}{3,20}`, `\pC+`, `[\s\S]{0,1000}`, `(\p{Han}|\p{Greek}|\d){5,40}x`} {
		start := time.Now()
		n, err := Parse(p, true)
		if err == nil {
			_, err = Compile(n)
		}
		if d := time.Since(start); d > 3*time.Second || err != nil && !errors.Is(err, ErrTooComplex) {
			t.Errorf("%q: %v after %v", p, err, d)
		}
	}
}
