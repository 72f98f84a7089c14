package jsonconstraint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"
)

// validate checks a decoded JSON value against a schema, independently of
// the automaton, for the subset the package supports (anyOf/oneOf: any
// branch).
func validate(schema any, v any, root any) error {
	m, ok := schema.(map[string]any)
	if !ok {
		return nil // true
	}
	if ref, ok := m["$ref"].(string); ok {
		if ref == "#" {
			return validate(root, v, root)
		}
		var section, name string
		if _, err := fmt.Sscanf(ref, "#/%s", &section); err != nil {
			return err
		}
		for i := range section {
			if section[i] == '/' {
				section, name = section[:i], section[i+1:]
				break
			}
		}
		return validate(root.(map[string]any)[section].(map[string]any)[name], v, root)
	}
	if all, ok := m["allOf"].([]any); ok && len(all) == 1 {
		return validate(all[0], v, root)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if list, ok := m[kw].([]any); ok {
			if m["nullable"] == true && v == nil {
				return nil
			}
			for _, b := range list {
				if validate(b, v, root) == nil {
					return nil
				}
			}
			return fmt.Errorf("%v matches no branch of %s", v, kw)
		}
	}
	if err := validateKeywords(m, v); err != nil {
		return err
	}
	if c, ok := m["const"]; ok {
		if !jsonEqual(c, v) {
			return fmt.Errorf("%v is not const %v", v, c)
		}
		return nil
	}
	if e, ok := m["enum"].([]any); ok {
		for _, x := range e {
			if jsonEqual(x, v) {
				return nil
			}
		}
		return fmt.Errorf("%v not in enum %v", v, e)
	}
	var types []string
	switch t := m["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	if m["nullable"] == true {
		types = append(types, "null")
	}
	k := kindName(v)
	if types != nil && !typeAllows(types, v) {
		return fmt.Errorf("%v is %s, want %v", v, k, types)
	}
	if err := validateKeywords(m, v); err != nil {
		return err
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := m["properties"].(map[string]any)
		for _, r := range anySlice(m["required"]) {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("missing required %q", r)
			}
		}
		pprops, _ := m["patternProperties"].(map[string]any)
		for key, val := range x {
			// JSON Schema: the property's schema and every matching
			// pattern's apply; additionalProperties only when none does.
			matched := false
			if ps, ok := props[key]; ok {
				if err := validate(ps, val, root); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				matched = true
			}
			for p, ps := range pprops {
				if regexp.MustCompile(p).MatchString(key) {
					if err := validate(ps, val, root); err != nil {
						return fmt.Errorf("%s (pattern %s): %w", key, p, err)
					}
					matched = true
				}
			}
			if matched {
				continue
			}
			// (Absent, additionalProperties allows no key beside the
			// declared ones, as the package has it.)
			add, has := m["additionalProperties"]
			if !has && (m["properties"] != nil || m["patternProperties"] != nil) || add == false {
				return fmt.Errorf("extra key %q", key)
			}
			if err := validate(add, val, root); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
	case []any:
		if it, ok := m["items"]; ok {
			for i, e := range x {
				if err := validate(it, e, root); err != nil {
					return fmt.Errorf("[%d]: %w", i, err)
				}
			}
		}
	}
	return nil
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func jsonEqual(a, b any) bool {
	ca, err1 := canonical(a)
	cb, err2 := canonical(b)
	if err1 != nil || err2 != nil {
		return false
	}
	// Numbers: compare by value (1 and 1.0 are the same JSON number).
	if na, ok := a.(json.Number); ok {
		if nb, ok := b.(json.Number); ok {
			fa, _ := na.Float64()
			fb, _ := nb.Float64()
			return fa == fb
		}
	}
	return bytes.Equal(ca, cb)
}

func decode(t testing.TB, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("output %q is not JSON: %v", data, err)
	}
	if dec.More() {
		t.Fatalf("output %q has data after the value", data)
	}
	var plain any
	if err := json.Unmarshal(data, &plain); err != nil {
		t.Fatalf("json.Unmarshal(%q): %v", data, err)
	}
	return v
}

// shortestCompletion returns the shortest byte string that completes the
// document from s (breadth-first over single bytes).
func shortestCompletion(s state) ([]byte, bool) {
	type item struct {
		s    state
		prev int
		b    byte
	}
	// States are told apart by the contents of their stacks, not by the
	// identity of the links.
	type key struct {
		s     state
		stack string
	}
	ids := map[*node]uint64{}
	var buf []byte
	keyOf := func(s state) key {
		buf = buf[:0]
		for l := s.below; l != nil; l = l.next {
			id, ok := ids[l.f.n]
			if !ok {
				id = uint64(len(ids))
				ids[l.f.n] = id
			}
			buf = binary.LittleEndian.AppendUint64(buf, id)
			buf = binary.LittleEndian.AppendUint64(buf, l.f.used)
			buf = binary.LittleEndian.AppendUint32(buf, uint32(l.f.key))
			buf = append(buf, byte(l.f.pos))
		}
		s.below = nil
		return key{s, string(buf)}
	}
	queue := []item{{s: s, prev: -1}}
	seen := map[key]bool{keyOf(s): true}
	for i := 0; i < len(queue) && i < 200000; i++ {
		if queue[i].s.complete() {
			var out []byte
			for j := i; queue[j].prev >= 0; j = queue[j].prev {
				out = append(out, queue[j].b)
			}
			slices.Reverse(out)
			return out, true
		}
		for b := 0; b < 256; b++ {
			n := queue[i].s
			if n.step(byte(b), nil) && !seen[keyOf(n)] {
				seen[keyOf(n)] = true
				queue = append(queue, item{s: n, prev: i, b: byte(b)})
			}
		}
	}
	return nil, false
}

// randomVocab makes a vocabulary with every single byte, random multi-byte
// tokens built from JSON-ish pieces, a few special tokens and two EOS ids.
func randomVocab(rng *rand.Rand, n int) ([][]byte, []int) {
	pieces := []string{"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "  ", "\\", "\\u", "00", "e", "E", "-", "+", ".",
		"0", "1", "9", "true", "false", "null", "tr", "ue", "nu", "name", "age", "tags", "a", "b", "é", "東", "\xe6", "\x9d\xb1",
		"\xf0\x9f", "\x98\x80", "\t", "\x01", "\xff", "id", "kind", "red", "green", "x", "y", "children", "value"}
	var tokens [][]byte
	seen := map[string]bool{}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, []byte{byte(b)})
		seen[string([]byte{byte(b)})] = true
	}
	for len(tokens) < n {
		var t []byte
		for range 1 + rng.IntN(4) {
			t = append(t, pieces[rng.IntN(len(pieces))]...)
		}
		if !seen[string(t)] || rng.IntN(50) == 0 { // a few duplicates too
			seen[string(t)] = true
			tokens = append(tokens, t)
		}
	}
	tokens = append(tokens, nil, nil, []byte{}) // special tokens
	eos := []int{len(tokens) - 2, len(tokens) - 1}
	return tokens, eos
}

// byteDecoder inverts GPT-2's byte-to-unicode mapping used by byte-level
// BPE vocabularies.
func byteDecoder() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}

type qwenVocab struct {
	tokens [][]byte
	eos    []int
	vocab  *Vocab
	err    error
}

// loadQwen3 reads the Qwen3 tokenizer's vocabulary from testdata as raw
// bytes, once per test binary.
var loadQwen3 = sync.OnceValue(func() qwenVocab {
	data, err := os.ReadFile("../testdata/tokenizer/qwen3/tokenizer.json")
	if err != nil {
		return qwenVocab{err: err}
	}
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return qwenVocab{err: err}
	}
	size := len(tj.Model.Vocab)
	for _, a := range tj.AddedTokens {
		size = max(size, a.ID+1)
	}
	dec := byteDecoder()
	tokens := make([][]byte, size)
	for s, id := range tj.Model.Vocab {
		b := make([]byte, 0, len(s))
		for _, r := range s {
			c, ok := dec[r]
			if !ok {
				return qwenVocab{err: fmt.Errorf("token %q: rune %q is not in the byte mapping", s, r)}
			}
			b = append(b, c)
		}
		tokens[id] = b
	}
	var eos []int
	for _, a := range tj.AddedTokens {
		if a.Special {
			tokens[a.ID] = nil
		} else {
			tokens[a.ID] = []byte(a.Content)
		}
		if a.Content == "<|im_end|>" || a.Content == "<|endoftext|>" {
			eos = append(eos, a.ID)
		}
	}
	v, err := NewVocab(tokens, eos)
	return qwenVocab{tokens: tokens, eos: eos, vocab: v, err: err}
})

// validateKeywords checks the string, number and array keywords.
func validateKeywords(m map[string]any, v any) error {
	num := func(key string) (float64, bool) {
		n, ok := m[key].(json.Number)
		if !ok {
			if f, isF := m[key].(float64); isF {
				return f, true
			}
			return 0, false
		}
		f, err := n.Float64()
		return f, err == nil
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if lo, ok := num("minLength"); ok && float64(n) < lo {
			return fmt.Errorf("%q is shorter than minLength %v", x, lo)
		}
		if hi, ok := num("maxLength"); ok && float64(n) > hi {
			return fmt.Errorf("%q is longer than maxLength %v", x, hi)
		}
		if p, ok := m["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%q does not match the pattern %q", x, p)
		}
	case json.Number, float64:
		var f float64
		if jn, ok := x.(json.Number); ok {
			f, _ = jn.Float64()
		} else {
			f = x.(float64)
		}
		if lo, ok := num("minimum"); ok && f < lo {
			return fmt.Errorf("%v is below minimum %v", f, lo)
		}
		if hi, ok := num("maximum"); ok && f > hi {
			return fmt.Errorf("%v is above maximum %v", f, hi)
		}
		if lo, ok := num("exclusiveMinimum"); ok && f <= lo {
			return fmt.Errorf("%v is not above exclusiveMinimum %v", f, lo)
		}
		if hi, ok := num("exclusiveMaximum"); ok && f >= hi {
			return fmt.Errorf("%v is not below exclusiveMaximum %v", f, hi)
		}
	case []any:
		if lo, ok := num("minItems"); ok && float64(len(x)) < lo {
			return fmt.Errorf("%d items, minItems %v", len(x), lo)
		}
		if hi, ok := num("maxItems"); ok && float64(len(x)) > hi {
			return fmt.Errorf("%d items, maxItems %v", len(x), hi)
		}
	}
	return nil
}
