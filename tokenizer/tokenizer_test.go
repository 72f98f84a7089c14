package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tinyJSON is a complete byte-level BPE tokenizer.json small enough to read:
// the 256 byte symbols, merges for "ab", "abc" and "Ġa" (space + a), and
// two added tokens.
func tinyJSON(t testing.TB, mutate func(string) string) string {
	t.Helper()
	bl := newByteLevel()
	var vocab []string
	for b := range 256 {
		vocab = append(vocab, `"`+jsonEscape(bl.symbol[b])+`": `+itoa(b))
	}
	vocab = append(vocab, `"ab": 256`, `"abc": 257`, `"Ġa": 258`)
	s := `{
  "version": "1.0",
  "added_tokens": [
    {"id": 259, "content": "<|end|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 260, "content": "<x>", "special": false, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\s*\\S+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
    "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {` + strings.Join(vocab, ", ") + `},
    "merges": [["a", "b"], ["ab", "c"], ["Ġ", "a"]]}
}`
	if mutate != nil {
		s = mutate(s)
	}
	return s
}

func jsonEscape(s string) string {
	switch s {
	case `"`:
		return `\"`
	case `\`:
		return `\\`
	}
	return s
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func writeTiny(t testing.TB, mutate func(string) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, []byte(tinyJSON(t, mutate)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTiny(t *testing.T) {
	tok, err := LoadFile(writeTiny(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	// "abc ab a": pieces "abc", " ab", " a"; " ab" merges Ġa first (rank 2
	// loses to a+b rank 0, so: Ġ, ab).
	if got, want := tok.Encode("abc ab a<|end|><x>"), []int{257, bytesID(tok, ' '), 256, 258, 259, 260}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got := tok.Decode([]int{257, 259, 260, 256}, true); got != "abc<x>ab" {
		t.Errorf("Decode(skip) = %q", got)
	}
	if tok.VocabSize() != 261 || !tok.IsSpecial(259) || tok.IsSpecial(260) || tok.IsSpecial(256) {
		t.Errorf("VocabSize %d, IsSpecial(259,260,256) = %v %v %v", tok.VocabSize(), tok.IsSpecial(259), tok.IsSpecial(260), tok.IsSpecial(256))
	}
	if id, ok := tok.TokenID("Ġa"); !ok || id != 258 {
		t.Errorf("TokenID(Ġa) = %d, %v", id, ok)
	}
	if b := tok.TokenBytes(258); string(b) != " a" {
		t.Errorf("TokenBytes(258) = %q", b)
	}
	if tok.TokenBytes(-1) != nil || tok.TokenBytes(1000) != nil {
		t.Error("TokenBytes of a bad id is not nil")
	}
	if got := tok.Decode([]int{-5, 100000, 256}, false); got != "ab" {
		t.Errorf("Decode with bad ids = %q, want them skipped", got)
	}
	if len(tok.EOSTokens()) != 0 || tok.ChatTemplate() != "" {
		t.Error("a bare tokenizer.json has no eos tokens or template")
	}
}

func bytesID(tok *Tokenizer, b byte) int { return int(tok.model.byteID[b]) }

func TestLoadErrors(t *testing.T) {
	for name, mutate := range map[string]func(string) string{
		"not json":         func(string) string { return "{" },
		"unigram":          func(s string) string { return strings.Replace(s, `"type": "BPE"`, `"type": "Unigram"`, 1) },
		"merge missing":    func(s string) string { return strings.Replace(s, `["ab", "c"]`, `["ab", "zz"]`, 1) },
		"merge bad string": func(s string) string { return strings.Replace(s, `["ab", "c"]`, `"abc"`, 1) },
		"merges not array": func(s string) string { return strings.Replace(s, `"merges": [`, `"merges": {`, 1) },
		"bad regex":        func(s string) string { return strings.Replace(s, `(?!\\S)`, `(?<=\\S)`, 1) },
		"bad normalizer":   func(s string) string { return strings.Replace(s, `"NFC"`, `"Lowercase"`, 1) },
		"no byte level": func(s string) string {
			return strings.Replace(s, `"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]`, `"type": "Whitespace"}]`, 1)
		},
		"bad decoder": func(s string) string {
			return strings.Replace(s, `"decoder": {"type": "ByteLevel"`, `"decoder": {"type": "WordPiece"`, 1)
		},
		"byte fallback":   func(s string) string { return strings.Replace(s, `"byte_fallback": false`, `"byte_fallback": true`, 1) },
		"negative id":     func(s string) string { return strings.Replace(s, `"ab": 256`, `"ab": -256`, 1) },
		"empty added":     func(s string) string { return strings.Replace(s, `"content": "<x>"`, `"content": ""`, 1) },
		"split behaviour": func(s string) string { return strings.Replace(s, `"Isolated"`, `"Contiguous"`, 1) },
	} {
		if _, err := LoadFile(writeTiny(t, mutate)); err == nil {
			t.Errorf("%s: loaded, want an error", name)
		} else if !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty directory succeeded")
	}
	dir := filepath.Dir(writeTiny(t, nil))
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<nope>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "<nope>") {
		t.Errorf("Load with an unknown eos_token: err %v", err)
	}
}

func TestDecoderStream(t *testing.T) {
	tok := mustQwen3(t)
	// 😀 arrives as four byte tokens, "Hello" then "<|im_end|>".
	d := tok.NewDecoder(false, nil)
	var outs []string
	for _, id := range []int{172, 253, 246, 222, 9707, 151645} {
		text, stopped := d.Push(id)
		if stopped {
			t.Fatal("stopped without stop strings")
		}
		outs = append(outs, text)
	}
	if want := []string{"", "", "", "😀", "Hello", "<|im_end|>"}; !slices.Equal(outs, want) {
		t.Errorf("pushed %q, want %q", outs, want)
	}
	if d.Flush() != "" {
		t.Error("Flush returned text")
	}

	// A stop string spread over tokens: "Hello" "," " world" with stop ", w".
	d = tok.NewDecoder(true, []string{", w", "xyz"})
	outs = outs[:0]
	for _, id := range []int{9707, 11, 1879, 0} {
		text, _ := d.Push(id)
		outs = append(outs, text)
	}
	if want := []string{"Hello", "", "", ""}; !slices.Equal(outs, want) || !d.Stopped() || d.StopString() != ", w" {
		t.Errorf("pushed %q, stopped %v (%q); want %q and a stop on \", w\"", outs, d.Stopped(), d.StopString(), want)
	}

	// Held-back text that turns out not to be a stop string is released, and
	// an unfinished character at the end becomes U+FFFD on Flush.
	d = tok.NewDecoder(false, []string{", x"})
	var got strings.Builder
	for _, id := range []int{9707, 11, 1879, 172, 253} {
		text, _ := d.Push(id)
		got.WriteString(text)
	}
	got.WriteString(d.Flush())
	if got.String() != "Hello, world\uFFFD" || d.Stopped() {
		t.Errorf("streamed %q, want %q", got.String(), "Hello, world\uFFFD")
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tok := mustQwen3(t)
	var texts []string
	var want [][]int
	for _, c := range mustCases(t) {
		if c.Kind == "encode" && len(c.Text) < 5000 {
			texts = append(texts, c.Text)
			want = append(want, c.IDs)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range texts {
				k := (i + g*37) % len(texts)
				if got := tok.Encode(texts[k]); !slices.Equal(got, want[k]) {
					errs <- texts[k]
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", trim(s))
	}
}
