package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// Test data lives in the repository's testdata/tokenizer (see its README).
var (
	qwen3Dir   = filepath.Join("..", "testdata", "tokenizer", "qwen3")
	qwen35Dir  = filepath.Join("..", "testdata", "tokenizer", "qwen35")
	casesPath  = filepath.Join("..", "testdata", "tokenizer", "cases.jsonl")
	loadQwen3  = sync.OnceValues(func() (*Tokenizer, error) { return Load(qwen3Dir) })
	loadCases  = sync.OnceValues(readCases)
	loadFacts  = sync.OnceValues(readFacts)
	qwen35Regx = sync.OnceValues(func() (*program, error) {
		f, err := loadFacts()
		if err != nil {
			return nil, err
		}
		return compilePattern(f.PreTokenizer.Pretokenizers[0].Pattern.Regex)
	})
)

type goldenCase struct {
	Kind           string   `json:"kind"`
	Name           string   `json:"name"`
	Category       string   `json:"category"`
	Text           string   `json:"text"`
	IDs            []int    `json:"ids"`
	Decoded        string   `json:"decoded"`
	SkipSpecial    bool     `json:"skip_special_tokens"`
	PretokensQwen3 []string `json:"pretokens_qwen3"`
	PretokensQwen5 []string `json:"pretokens_qwen35"`
}

func readCases() ([]goldenCase, error) {
	f, err := os.Open(casesPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

type factsJSON struct {
	PreTokenizer struct {
		Pretokenizers []struct {
			Pattern struct {
				Regex string `json:"Regex"`
			} `json:"pattern"`
		} `json:"pretokenizers"`
	} `json:"pre_tokenizer"`
	Qwen3Regex    string `json:"pre_tokenizer_regex_qwen3_for_comparison"`
	SpecialTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special any    `json:"special"`
		OnlyIn  string `json:"only_in"`
	} `json:"special_tokens"`
}

func readFacts() (*factsJSON, error) {
	b, err := os.ReadFile(filepath.Join(qwen35Dir, "tokenizer_facts.json"))
	if err != nil {
		return nil, err
	}
	var f factsJSON
	return &f, json.Unmarshal(b, &f)
}

func mustQwen3(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := loadQwen3()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func mustCases(t testing.TB) []goldenCase {
	t.Helper()
	cs, err := loadCases()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestGoldenEncode(t *testing.T) {
	tok := mustQwen3(t)
	n := 0
	for _, c := range mustCases(t) {
		if c.Kind != "encode" {
			continue
		}
		n++
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, trim(c.Text), trimIDs(got), trimIDs(c.IDs))
			continue
		}
		if d := tok.Decode(c.IDs, false); d != c.Decoded {
			t.Errorf("%s: Decode = %q, want %q", c.Name, trim(d), trim(c.Decoded))
		}
	}
	if n != 339 {
		t.Errorf("ran %d encode cases, want 339", n)
	}
}

func TestGoldenDecode(t *testing.T) {
	tok := mustQwen3(t)
	n := 0
	for _, c := range mustCases(t) {
		if c.Kind != "decode" {
			continue
		}
		n++
		if got := tok.Decode(c.IDs, c.SkipSpecial); got != c.Text {
			t.Errorf("%s: Decode(%v, %v) = %q, want %q", c.Name, c.IDs, c.SkipSpecial, got, c.Text)
		}
	}
	if n != 30 {
		t.Errorf("ran %d decode cases, want 30", n)
	}
}

// TestGoldenPretokens checks the pre-tokenizer alone: the Qwen3 pattern from
// tokenizer.json and the Qwen3.5 pattern from tokenizer_facts.json, after
// added-token splitting (Qwen3's tokens, plus Qwen3.5's extra ones) and NFC.
func TestGoldenPretokens(t *testing.T) {
	tok := mustQwen3(t)
	facts, err := loadFacts()
	if err != nil {
		t.Fatal(err)
	}
	p35, err := qwen35Regx()
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3.5's 33 added tokens, from the facts, with Qwen3's pipeline.
	var added35 []addedToken
	for _, s := range facts.SpecialTokens {
		added35 = append(added35, addedToken{id: s.ID, content: s.Content})
	}
	m35 := newTokenMatcher(added35, false)
	p3, err := compilePattern(facts.Qwen3Regex)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.pre) == 0 || tok.pre[0].prog == nil {
		t.Fatal("Qwen3 tokenizer has no Split step")
	}
	n := 0
	for _, c := range mustCases(t) {
		if c.Kind != "encode" {
			continue
		}
		n++
		got3 := pretokens(c.Text, tok.rawMatch, tok.pre[0].prog)
		if !slices.Equal(got3, c.PretokensQwen3) {
			t.Errorf("%s: Qwen3 (tokenizer.json) pre-tokens of %q\n got %q\nwant %q", c.Name, trim(c.Text), trimS(got3), trimS(c.PretokensQwen3))
		}
		if got := pretokens(c.Text, tok.rawMatch, p3); !slices.Equal(got, c.PretokensQwen3) {
			t.Errorf("%s: Qwen3 (facts) pre-tokens differ from tokenizer.json's", c.Name)
		}
		got35 := pretokens(c.Text, m35, p35)
		if !slices.Equal(got35, c.PretokensQwen5) {
			t.Errorf("%s: Qwen3.5 pre-tokens of %q\n got %q\nwant %q", c.Name, trim(c.Text), trimS(got35), trimS(c.PretokensQwen5))
		}
	}
	if n != 339 {
		t.Errorf("ran %d cases, want 339", n)
	}
}

// pretokens splits text on added tokens, normalizes the rest with NFC and
// cuts it with prog, returning the pieces as text.
func pretokens(text string, added tokenMatcher, prog *program) []string {
	var out []string
	var m matcher
	cut := func(s string) {
		s = norm.NFC.String(s)
		for _, sp := range m.split(prog, s, nil) {
			out = append(out, s[sp.start:sp.end])
		}
	}
	pos := 0
	for pos < len(text) {
		s, e, k := added.find(text, pos, pos)
		if k < 0 {
			cut(text[pos:])
			break
		}
		if s > pos {
			cut(text[pos:s])
		}
		out = append(out, added.toks[k].content)
		pos = e
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func trimIDs(ids []int) []int {
	if len(ids) > 60 {
		return ids[:60]
	}
	return ids
}

func trimS(s []string) []string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}
