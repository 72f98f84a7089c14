package gbnf

import (
	"errors"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/grammar"
)

// jsonGBNF is a JSON grammar in llama.cpp's style.
const jsonGBNF = `
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
`

func TestAcceptReject(t *testing.T) {
	for _, c := range []struct {
		grammar string
		accept  []string
		reject  []string
	}{
		{jsonGBNF,
			[]string{`{}`, `{"a": 1}`, `{"a": [1, 2.5, "x\n", {"b": null}]}`, "{\"é\": -0.5e+3}\n  "},
			[]string{`{`, `{"a" 1}`, `[1]`, `{"a": 01}`, `{"a": "\x01"}`}},
		{`root ::= "a" b{2,3} "c"
b ::= [xy]`, []string{"axxc", "axyyc"}, []string{"axc", "axxxxc", "ac"}},
		{`root ::= expr
expr ::= term ([-+*/] term)*
term ::= [0-9]+ | "(" expr ")"`, []string{"1+2", "(1+2)*3", "((4))"}, []string{"1+", "(1", "1)", "+"}},
		{`root ::= "\x41\u00e9\U0001F600" . [^a-c]`, []string{"Aé😀zd", "Aé😀ßé"}, []string{"Aé😀za", "Aé😀z"}},
		{`root ::= item*
item ::= "a"? "b"`, []string{"", "b", "abb", "bab"}, []string{"a", "aab"}},
	} {
		g, err := Parse(c.grammar)
		if err != nil {
			t.Fatalf("%q: %v", c.grammar, err)
		}
		for _, s := range c.accept {
			if !g.Match([]byte(s)) {
				t.Errorf("%.30q should accept %q", c.grammar, s)
			}
		}
		for _, s := range c.reject {
			if g.Match([]byte(s)) {
				t.Errorf("%.30q should reject %q", c.grammar, s)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		grammar string
		pos     int
		want    string
	}{
		{`root ::= "abc`, 9, "never closed"},
		{`root ::= [a-`, 9, "never closed"},
		{`root ::= (a`, 9, "never closed"},
		{`root ::= a`, -2, `undefined rule "a"`},
		{`root ::= "a"{3,1}`, 12, "below the minimum"},
		{`root ::= root "a" | "b"`, -1, "left-recursive"},
		{`root ::= "a" root`, -1, "can never end"},
		{`start ::= "a"`, -1, "start rule is not defined"},
		{`root ::= "a" @`, 13, "unexpected"},
		{`root = "a"`, 5, "expected ::="},
	} {
		_, err := Parse(c.grammar)
		var ge *grammar.Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), c.want) || c.pos >= -1 && ge.Pos != c.pos {
			t.Errorf("%q: got %v, want an error at %d containing %q", c.grammar, err, c.pos, c.want)
		}
	}
}
