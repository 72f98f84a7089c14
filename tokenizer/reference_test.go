package tokenizer

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Each piece of the pipeline is compared with a plain reference on random
// inputs.

// runePool mixes the characters the Qwen patterns treat differently:
// letters of several scripts, combining marks, digits of several kinds,
// Unicode white space, CR/LF, apostrophes and case variants of the
// contraction letters (including the long s and the Kelvin sign, which
// fold to s and k).
var runePool = []rune("aSsTtRrEeVvMmLlDdkK'’ \t\n\r\v\f\u00a0\u3000\u2028\u0085é\u0301\u0915\u093f\u0e01\u0e31\u4e2d\u3042\uac00\u0661\u00b2\u2167\u00bd0123456789.,!?-_()[]{}<>/\\\"#$%&*+=|~@^`;:\u017f\u212a😀\u200d\ufe0f")

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(runePool[r.IntN(len(runePool))])
	}
	return b.String()
}

// whiteSpaceRE2 is Unicode White_Space spelled for RE2, whose \s is ASCII.
const whiteSpaceRE2 = `\t-\r\x{85}\x{2028}\x{2029}\p{Zs}`

// TestPatternVsRegexp compares the engine with Go's regexp (also
// leftmost-first) on patterns both can run: Qwen's patterns without the
// lookahead alternative, with \s spelled out for RE2.
func TestPatternVsRegexp(t *testing.T) {
	facts, err := loadFacts()
	if err != nil {
		t.Fatal(err)
	}
	patterns := []string{
		facts.Qwen3Regex,
		facts.PreTokenizer.Pretokenizers[0].Pattern.Regex,
		gpt2Pattern,
		`(?i:ab|a)c*?d|[^a-c\d]{2,3}|x(?:yz)?|\p{Han}+|\P{L}`,
		`[\w-]+|\W`,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, pat := range patterns {
		re2 := strings.ReplaceAll(pat, `|\s+(?!\S)`, "")
		re2 = strings.ReplaceAll(re2, `[^\s`, `[^`+whiteSpaceRE2)
		re2 = strings.ReplaceAll(re2, `\s`, `[`+whiteSpaceRE2+`]`)
		re2 = strings.ReplaceAll(re2, `\w`, `\p{L}\p{M}\p{Nd}\p{Pc}`)
		re2 = strings.ReplaceAll(re2, `[\p{L}\p{M}\p{Nd}\p{Pc}-]`, `[\p{L}\p{M}\p{Nd}\p{Pc}\-]`)
		re2 = strings.ReplaceAll(re2, `\W`, `[^\p{L}\p{M}\p{Nd}\p{Pc}]`)
		re2 = strings.ReplaceAll(re2, `\d`, `\p{Nd}`)
		ref, err := regexp.Compile(re2)
		if err != nil {
			t.Fatalf("reference pattern %q: %v", re2, err)
		}
		ours, err := compilePattern(strings.ReplaceAll(pat, `|\s+(?!\S)`, ""))
		if err != nil {
			t.Fatal(err)
		}
		var m matcher
		for range 3000 {
			s := randomText(r, r.IntN(24))
			var want []string
			prev := 0
			for _, loc := range ref.FindAllStringIndex(s, -1) {
				if loc[0] > prev {
					want = append(want, s[prev:loc[0]])
				}
				want = append(want, s[loc[0]:loc[1]])
				prev = loc[1]
			}
			if prev < len(s) {
				want = append(want, s[prev:])
			}
			var got []string
			for _, sp := range m.split(ours, s, nil) {
				got = append(got, s[sp.start:sp.end])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q:\n got %q\nwant %q", pat, s, got, want)
			}
		}
	}
}

// splitQwenReference is a direct, unoptimised reading of the last three
// alternatives of the Qwen pattern, `\s*[\r\n]+|\s+(?!\S)|\s+`, at the
// start of s (which holds only white space here).
func splitQwenReference(s string) []string {
	var out []string
	for s != "" {
		rs := []rune(s)
		n := 0
		// \s*[\r\n]+: the longest run ending in CR/LF, i.e. up to the last CR/LF.
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i] == '\r' || rs[i] == '\n' {
				n = i + 1
				break
			}
		}
		if n == 0 {
			// \s+(?!\S) takes the whole run when it reaches the end of the text.
			n = len(rs)
		}
		piece := string(rs[:n])
		out = append(out, piece)
		s = s[len(piece):]
	}
	return out
}

// TestPatternLookahead checks `\s+(?!\S)` and its neighbours on random
// white-space runs, alone and followed by a letter.
func TestPatternLookahead(t *testing.T) {
	p, err := qwen35Regx()
	if err != nil {
		t.Fatal(err)
	}
	ws := []rune(" \t\n\r\u00a0\u3000\v")
	r := rand.New(rand.NewPCG(3, 4))
	var m matcher
	for range 5000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteRune(ws[r.IntN(len(ws))])
		}
		run := b.String()
		var got []string
		for _, sp := range m.split(p, run, nil) {
			got = append(got, run[sp.start:sp.end])
		}
		if want := splitQwenReference(run); !slices.Equal(got, want) {
			t.Fatalf("%q: got %q, want %q", run, got, want)
		}
		// Followed by a letter, the run's last character goes with it unless
		// a CR/LF ends the run or the run is a single character.
		text := run + "x"
		got = got[:0]
		for _, sp := range m.split(p, text, nil) {
			got = append(got, text[sp.start:sp.end])
		}
		rs := []rune(run)
		last := rs[len(rs)-1]
		var want []string
		switch {
		case last == '\r' || last == '\n':
			want = append(splitQwenReference(run), "x")
		case len(rs) == 1:
			want = []string{text} // [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
		default:
			head := string(rs[:len(rs)-1])
			want = append(splitQwenReference(head), string(last)+"x")
			// \s*[\r\n]+ stops at the head's last CR/LF, then \s+(?!\S)
			// leaves one character for the letter.
			if i := strings.LastIndexAny(head, "\r\n"); i >= 0 && i+1 < len(head) {
				want = append(splitQwenReference(head[:i+1]), head[i+1:], string(last)+"x")
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: got %q, want %q", text, got, want)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	for _, pat := range []string{
		`(`, `)`, `[a`, `a**`, `*a`, `\p{Nope}`, `^a`, `a$`, `(?<=a)b`, `a++`, `(a*)*`, `[[:alpha:]]`, `\q`, `a{2000}`, `\x{zz}`, "\xff",
	} {
		if _, err := compilePattern(pat); err == nil {
			t.Errorf("compilePattern(%q) succeeded, want an error", pat)
		}
	}
}

// naiveBPE is the textbook algorithm: repeatedly merge the leftmost
// occurrence of the lowest-ranked adjacent pair.
func naiveBPE(m *bpe, word string) []int {
	var ids []int32
	for i := 0; i < len(word); i++ {
		ids = append(ids, m.byteID[word[i]])
	}
	for {
		best, bestRank := -1, int32(-1)
		var bestID int32
		for i := 0; i+1 < len(ids); i++ {
			if rank, id, ok := m.lookup(ids[i], ids[i+1]); ok && (best < 0 || rank < bestRank) {
				best, bestRank, bestID = i, rank, id
			}
		}
		if best < 0 {
			break
		}
		ids = slices.Replace(ids, best, best+2, bestID)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func TestBPEVsNaive(t *testing.T) {
	tok := mustQwen3(t)
	r := rand.New(rand.NewPCG(5, 6))
	var sc bpeScratch
	words := []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", strings.Repeat(" ", 37), strings.Repeat("ab", 40)}
	for range 3000 {
		switch r.IntN(3) {
		case 0: // random bytes
			b := make([]byte, 1+r.IntN(12))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			words = append(words, string(b))
		case 1:
			words = append(words, randomText(r, 1+r.IntN(10)))
		default: // a run of letters likely to merge a lot
			var b strings.Builder
			for range 1 + r.IntN(20) {
				b.WriteByte("etaoinshrdlu"[r.IntN(12)])
			}
			words = append(words, b.String())
		}
	}
	for _, w := range words {
		got := tok.model.merge(nil, w, &sc)
		if want := naiveBPE(tok.model, w); !slices.Equal(got, want) {
			t.Fatalf("BPE(%q) = %v, want %v", w, got, want)
		}
	}
}

// validPrefixes holds every proper prefix of the UTF-8 encoding of every
// Unicode scalar value.
func validPrefixes() map[string]bool {
	out := map[string]bool{}
	var buf [4]byte
	for r := rune(0x80); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		for k := 1; k < n; k++ {
			out[string(buf[:k])] = true
		}
	}
	return out
}

// lossyReference is from_utf8_lossy by definition: a valid character is
// copied; otherwise the longest prefix of some character's encoding (at
// least one byte) becomes one U+FFFD.
func lossyReference(b []byte, prefixes map[string]bool) string {
	var out strings.Builder
	for len(b) > 0 {
		if r, n := utf8.DecodeRune(b); r != utf8.RuneError || n == 3 && string(b[:3]) == "\uFFFD" {
			out.Write(b[:n])
			b = b[n:]
			continue
		}
		k := 1
		for l := min(3, len(b)); l > 1; l-- {
			if prefixes[string(b[:l])] {
				k = l
				break
			}
		}
		out.WriteString("\uFFFD")
		b = b[k:]
	}
	return out.String()
}

// completeLenReference scans b as lossyReference does and, if the last
// step is a character prefix cut short by the end of b, returns where that
// step starts.
func completeLenReference(b []byte, prefixes map[string]bool) int {
	start := 0
	for start < len(b) {
		rest := b[start:]
		if r, n := utf8.DecodeRune(rest); r != utf8.RuneError || n == 3 {
			start += n
			continue
		}
		k := 1
		for l := min(3, len(rest)); l > 1; l-- {
			if prefixes[string(rest[:l])] {
				k = l
				break
			}
		}
		if start+k == len(b) && prefixes[string(rest[:k])] {
			return start
		}
		start += k
	}
	return len(b)
}

func TestLossyVsReference(t *testing.T) {
	prefixes := validPrefixes()
	r := rand.New(rand.NewPCG(7, 8))
	interesting := []byte{0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF}
	for range 100000 {
		b := make([]byte, r.IntN(9))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = interesting[r.IntN(len(interesting))]
			}
		}
		want := lossyReference(b, prefixes)
		if got := string(appendLossy(nil, b)); got != want {
			t.Fatalf("lossy(% x) = %q, want %q", b, got, want)
		}
		if got, want := completeLen(b), completeLenReference(b, prefixes); got != want {
			t.Fatalf("completeLen(% x) = %d, want %d", b, got, want)
		}
		n := completeLen(b)
		if got := string(appendLossy(appendLossy(nil, b[:n]), b[n:])); got != want {
			t.Fatalf("splitting % x at completeLen %d changes the lossy text", b, n)
		}
	}
}

// TestStreamVsDecode pushes random ids through a Decoder and compares with
// a reference that re-decodes the whole prefix after every id.
func TestStreamVsDecode(t *testing.T) {
	tok := mustQwen3(t)
	r := rand.New(rand.NewPCG(9, 10))
	// Ids that produce partial characters, specials and ordinary text.
	pool := []int{172, 253, 246, 222, 160, 116, 32, 239, 124, 169, 254, 177, 9707, 11, 1879, 0, 151644, 151645, 151667, 151668, 198, 220, 108386, 3837, 99489, 144349, 145233, 378, 235, 64, 65, 66, 67}
	stopsPool := []string{"", "a", "ab", "bc", "abcd", "Hello", ", w", "<|im_end|>", "\n\n", "你好", "😀", "b\n", "</think>"}
	for iter := range 4000 {
		ids := make([]int, r.IntN(14))
		for i := range ids {
			ids[i] = pool[r.IntN(len(pool))]
		}
		var stops []string
		for range r.IntN(3) {
			stops = append(stops, stopsPool[r.IntN(len(stopsPool))])
		}
		skip := r.IntN(2) == 0
		d := tok.NewDecoder(skip, stops)
		var got strings.Builder
		stopped := false
		for _, id := range ids {
			text, st := d.Push(id)
			if !utf8.ValidString(text) {
				t.Fatalf("Push emitted invalid UTF-8 %q", text)
			}
			if strings.Contains(text, "\uFFFD") && !strings.Contains(tok.Decode(ids, skip), "\uFFFD") {
				t.Fatalf("Push emitted U+FFFD for ids %v", ids)
			}
			got.WriteString(text)
			stopped = st
		}
		got.WriteString(d.Flush())

		// Reference: the first prefix whose complete text contains a stop
		// string is cut at the earliest stop string in it.
		want := tok.Decode(ids, skip)
		wantStop := false
		for k := 1; k <= len(ids) && !wantStop; k++ {
			var raw []byte
			for _, id := range ids[:k] {
				raw = tok.appendToken(raw, id, skip)
			}
			text := string(appendLossy(nil, raw[:completeLen(raw)]))
			if k == len(ids) {
				text = string(appendLossy(nil, raw))
			}
			at := -1
			for _, s := range stops {
				if i := strings.Index(text, s); s != "" && i >= 0 && (at < 0 || i < at) {
					at = i
				}
			}
			if at >= 0 {
				want, wantStop = text[:at], true
			}
		}
		if got.String() != want {
			t.Fatalf("iter %d: ids %v skip %v stops %q: streamed %q, want %q", iter, ids, skip, stops, got.String(), want)
		}
		if wantStop != d.Stopped() || (stopped && !wantStop) {
			t.Fatalf("iter %d: ids %v stops %q: stopped %v, want %v", iter, ids, stops, d.Stopped(), wantStop)
		}
	}
}
