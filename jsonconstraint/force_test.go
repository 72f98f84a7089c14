package jsonconstraint

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestForceLeadingContinuationBytes forces completions that begin inside a
// UTF-8 character: the continuation bytes are forced as bytes, the rest
// as its encoding.
func TestForceLeadingContinuationBytes(t *testing.T) {
	tokens := [][]byte{[]byte("abc"), []byte("ab"), []byte("\x80\x80"), []byte("\"}")}
	for b := range 256 {
		tokens = append(tokens, []byte{byte(b)})
	}
	v, err := NewVocab(tokens, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := map[string]int{}
	for i, tb := range tokens {
		if _, ok := id[string(tb)]; !ok {
			id[string(tb)] = i
		}
	}
	// encode takes the longest token at each position of valid UTF-8 and
	// spells invalid bytes as U+FFFD, as a byte-level tokenizer given a
	// Go string would.
	encode := func(s string) []int {
		s = strings.ToValidUTF8(s, "\uFFFD")
		var out []int
		for s != "" {
			for n := min(3, len(s)); n > 0; n-- {
				if i, ok := id[s[:n]]; ok {
					out, s = append(out, i), s[n:]
					break
				}
			}
		}
		return out
	}
	allowed := func(f Forced) []string {
		m := make([]uint64, v.Words())
		f.Mask(v, m)
		var out []string
		for i := range tokens {
			if m[i>>6]&(1<<(i&63)) != 0 {
				out = append(out, string(tokens[i]))
			}
		}
		return out
	}

	f := v.Force([]byte("\x80\x80abc\"}"), encode)
	if got := f.Tokens(); got != 4 {
		t.Fatalf("Tokens() = %d, want 4: two bytes, then abc and \"}", got)
	}
	if got := allowed(f); len(got) != 2 || got[0] != "\x80\x80" || got[1] != "\x80" {
		t.Fatalf("first tokens allowed %q, want the two that spell a prefix of the continuation bytes", got)
	}
	for _, tok := range []string{"\x80", "\x80", "abc", "\"}"} {
		if err := f.Accept(v, id[tok]); err != nil {
			t.Fatalf("Accept(%q): %v", tok, err)
		}
	}
	if !f.Done() {
		t.Fatal("not done after the whole text")
	}

	f = v.Force([]byte("\x80\x80abc"), encode)
	if err := f.Accept(v, id["\x80\x80"]); err != nil {
		t.Fatal(err)
	}
	if got := allowed(f); len(got) != 1 || got[0] != "abc" {
		t.Fatalf("after the continuation bytes %q allowed, want the encoding's abc", got)
	}
	if err := f.Accept(v, id["ab"]); err == nil {
		t.Fatal("a token off the encoding was accepted")
	}

	// More continuation bytes than a character holds: the text is not
	// what a stopped character leaves, and any spelling is forced.
	text := []byte("\x80\x80\x80\x80abc")
	f = v.Force(text, encode)
	if got := f.Tokens(); got != len(text) {
		t.Fatalf("Tokens() = %d for %q, want one per byte (%d)", got, text, len(text))
	}
	if utf8.Valid(text[:utf8.UTFMax]) {
		t.Fatal("the test text should start with invalid UTF-8")
	}
}
