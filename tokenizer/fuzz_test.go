package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzRoundTrip checks Decode(Encode(s)) == NFC(s) for text without added
// tokens (the Qwen normalizer is NFC, so that is the text the ids stand
// for), and that Encode never panics on any input.
func FuzzRoundTrip(f *testing.F) {
	for _, c := range mustCases(f) {
		if c.Kind == "encode" && len(c.Text) < 2000 {
			f.Add(c.Text)
		}
	}
	f.Add("\xf0\x9f\x98")
	f.Add("a\xffb")
	tok := mustQwen3(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if !utf8.ValidString(s) {
			s = string(appendLossy(nil, []byte(s)))
		}
		for _, a := range tok.added {
			if strings.Contains(s, a.content) {
				return // added tokens are matched before NFC; not a plain round trip
			}
		}
		if got, want := tok.Decode(ids, false), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}
