package lark

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/grammar"
)

func TestPatchGrammar(t *testing.T) {
	src, err := os.ReadFile("testdata/patch.lark")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	accept := []string{
		"*** Begin Patch\n*** Add File: a.txt\n+hello\n+\n*** End Patch\n",
		"*** Begin Patch\n*** Delete File: old/b.go\n*** End Patch",
		"*** Begin Patch\n*** Update File: src/main.go\n@@ func main() {\n-\tfmt.Println(1)\n+\tfmt.Println(2)\n \treturn\n*** End of File\n*** End Patch\n",
		"*** Begin Patch\n*** Update File: x\n*** Move to: y\n*** Add File: z\n+1\n*** End Patch\n",
		"*** Begin Patch\n*** Update File: x\n@@\n context\n*** End Patch\n",
	}
	reject := []string{
		"*** Begin Patch\n*** End Patch\n",                            // no operation
		"*** Begin Patch\n*** Add File: a\n*** End Patch\n",           // an added file needs lines
		"*** Begin Patch\n*** Update File: a\nplain\n*** End Patch\n", // a diff line needs a prefix
		"*** Begin Patch\n*** Delete File: \n*** End Patch\n",         // an empty path
		"*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n\n",     // one newline at most
		"Begin Patch\n",
	}
	for _, s := range accept {
		if !g.Match([]byte(s)) {
			t.Errorf("rejects %q", s)
		}
	}
	for _, s := range reject {
		if g.Match([]byte(s)) {
			t.Errorf("accepts %q", s)
		}
	}
	// Every prefix of an accepted patch can be continued.
	for _, s := range accept {
		for i := range len(s) {
			if !g.Prefix([]byte(s[:i])) {
				t.Fatalf("prefix %q of an accepted patch is refused", s[:i])
			}
		}
	}
}

func TestGrammars(t *testing.T) {
	for _, c := range []struct {
		grammar        string
		accept, reject []string
	}{
		{`start: sum
sum: product (("+" | "-") product)*
product: atom (("*" | "/") atom)*
?atom: NUMBER | "-" atom | "(" sum ")"
%import common.NUMBER
%import common.WS
%ignore WS`, []string{"1+2", " 1 + 2.5e3 * (3 - -4) ", "(1)"}, []string{"1+", "()", "1 2"}},
		{`start: WORD ("," WORD)~1..2 "!"i
WORD: ("a".."c")+
`, []string{"ab,c!", "a,b,c!", "a,b!"}, []string{"a!", "a,b,c,a!", "ad,b!"}},
		{`start: greeting name
greeting: "hello"i " "
name: /[A-Z][a-z]+/ -> person
    | "world"`, []string{"HeLLo Ada", "hello world"}, []string{"hello ada", "hi Ada"}},
		{`start: item+
item: KEY "=" VALUE _NL
KEY: /[a-z_]+/
VALUE: ESCAPED_STRING | SIGNED_INT
_NL: /\r?\n/
%import common (ESCAPED_STRING, SIGNED_INT)`, []string{"a=1\n", "b_c=\"x y\"\r\nd=-3\n"}, []string{"a=1", "A=1\n", "a=x\n"}},
	} {
		g, err := Parse(c.grammar)
		if err != nil {
			t.Fatalf("%q: %v", c.grammar, err)
		}
		for _, s := range c.accept {
			if !g.Match([]byte(s)) {
				t.Errorf("%.40q rejects %q", c.grammar, s)
			}
		}
		for _, s := range c.reject {
			if g.Match([]byte(s)) {
				t.Errorf("%.40q accepts %q", c.grammar, s)
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
		{`start: "abc`, 7, "never closed"},
		{`start: /ab`, 7, "never closed"},
		{`start: (a`, 7, "never closed"},
		{`start: a`, -2, `undefined rule "a"`},
		{`start: X`, 7, `terminal "X" is not defined`},
		{`start: X
X: "a" X`, -2, "refers to itself"},
		{`start: start "a" | "b"`, -1, "left-recursive"},
		{`start: "a" start`, -1, "can never end"},
		{`other: "a"`, -1, "start rule is not defined"},
		{`start: /a(?=b)/`, 9, "lookaround"},
		{`start: "a"
%import foo.BAR`, 19, "only %import common"},
		{`start: "a"
%declare X`, 11, "not supported"},
		{`start: "a"~3..1`, 10, "below the minimum"},
	} {
		_, err := Parse(c.grammar)
		var ge *grammar.Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), c.want) || c.pos >= -1 && ge.Pos != c.pos {
			t.Errorf("%q: got %v, want an error at %d containing %q", c.grammar, err, c.pos, c.want)
		}
	}
}
