package jsonconstraint

import (
	"encoding/json"
	"fmt"
	"math/big"
	"sync"
	"unicode/utf8"

	"github.com/govinfer/govinfer/grammar/regex"
)

// strRule holds a schema's string keywords. Lengths count Unicode code
// points, as JSON Schema does.
type strRule struct {
	minLen, maxLen int32 // maxLen < 0: no maximum
	// pat, for a pattern, reads the string's decoded bytes: the pattern
	// (a search unless anchored, as JSON Schema has it) intersected with
	// the lengths and with the characters a string without \u escapes
	// can hold, so that every state it keeps can still end the string.
	pat *regex.DFA
	// stays caches, for a pattern, the tokens its DFA reads whole from a
	// state (see stay).
	stays *patternStays
}

// patternStays are the tokens without '"', '\\' or control characters
// that a pattern's DFA reads whole from each of its states, over one
// vocabulary: inside the string they are exactly the tokens that keep it
// open, whatever surrounds it. At most maxPatternStays states are kept.
type patternStays struct {
	mu sync.Mutex
	v  *Vocab
	m  map[int32][]uint64
}

// maxPatternStays bounds the pattern states whose tokens are kept.
const maxPatternStays = 256

// stringRefused are the bytes a string's text cannot hold as they are:
// the quote and backslash (which SplitDFA leaves to a walk of the whole
// automaton) and the control characters.
var stringRefused = [4]uint64{1<<'"' | 0xFFFFFFFF, 1 << ('\\' - 64)}

// stay returns the tokens of v without '"', '\\' or control characters
// the pattern's DFA reads whole from state dfa (shared: do not modify).
func (r *strRule) stay(v *Vocab, dfa int32) []uint64 {
	r.stays.mu.Lock()
	defer r.stays.mu.Unlock()
	if r.stays.v != v || len(r.stays.m) >= maxPatternStays {
		r.stays.v, r.stays.m = v, map[int32][]uint64{}
	}
	if m, ok := r.stays.m[dfa]; ok {
		return m
	}
	m := make([]uint64, v.Words())
	SplitDFA(Trie{&v.all}, r.pat, dfa, &stringRefused, m)
	r.stays.m[dfa] = m
	return m
}

func (r *strRule) allows(s string) bool {
	n := utf8.RuneCountInString(s)
	return n >= int(r.minLen) && (r.maxLen < 0 || n <= int(r.maxLen)) && (r.pat == nil || r.pat.Match([]byte(s)))
}

// arrRule holds a schema's array keywords.
type arrRule struct {
	minItems, maxItems int32 // maxItems < 0: no maximum
}

// maxLengthKeyword bounds minLength, maxLength, minItems and maxItems.
const maxLengthKeyword = 1 << 20

// KeywordError is a schema keyword the compiler does not enforce, under
// Options.Strict; Keyword names it and Path is the schema's location.
type KeywordError struct {
	Path, Keyword string
}

func (e *KeywordError) Error() string {
	return fmt.Sprintf("jsonconstraint: %s: keyword %q is not supported", e.Path, e.Keyword)
}

// unsupported are the assertion keywords the automaton does not enforce.
// Under Options.Strict a schema holding one fails to compile; otherwise it
// is ignored. Annotations (title, description, default, examples, format,
// ...) never constrain and are always ignored.
var unsupported = []string{
	"multipleOf", "uniqueItems", "not", "if", "then", "else",
	"propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
	"dependencies", "contains", "minContains", "maxContains", "prefixItems", "additionalItems",
	"unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "$recursiveRef",
}

// checkKeywords reports, under strict, the first unsupported keyword of m
// (in a stable order) and the unsupported forms of supported ones.
func (c *compiler) checkKeywords(m map[string]any, path string) error {
	if !c.strict {
		return nil
	}
	for _, k := range unsupported {
		if _, ok := m[k]; ok {
			return &KeywordError{Path: path, Keyword: k}
		}
	}
	if all, ok := m["allOf"]; ok {
		if list, isList := all.([]any); !isList || len(list) != 1 {
			return &KeywordError{Path: path, Keyword: "allOf"}
		}
	}
	if it, ok := m["items"].([]any); ok && it != nil {
		return &KeywordError{Path: path, Keyword: "items"}
	}
	return nil
}

// lengthKeyword reads a non-negative integer keyword; -1 when absent.
func lengthKeyword(m map[string]any, key, path string) (int32, error) {
	v, ok := m[key]
	if !ok {
		return -1, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, fmt.Errorf("jsonconstraint: %s/%s is %s, want a non-negative integer", path, key, kindName(v))
	}
	i, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f != float64(int64(f)) {
			return 0, fmt.Errorf("jsonconstraint: %s/%s is %s, want a non-negative integer", path, key, n)
		}
		i = int64(f)
	}
	if i < 0 {
		return 0, fmt.Errorf("jsonconstraint: %s/%s is %d, want a non-negative integer", path, key, i)
	}
	if i > maxLengthKeyword {
		return 0, fmt.Errorf("jsonconstraint: %s/%s is %d; at most %d is supported", path, key, i, maxLengthKeyword)
	}
	return int32(i), nil
}

// parseStrRule reads minLength and maxLength; nil when neither is given.
func parseStrRule(m map[string]any, path string) (*strRule, error) {
	lo, err := lengthKeyword(m, "minLength", path)
	if err != nil {
		return nil, err
	}
	hi, err := lengthKeyword(m, "maxLength", path)
	if err != nil {
		return nil, err
	}
	pv, hasPattern := m["pattern"]
	if lo < 0 && hi < 0 && !hasPattern {
		return nil, nil
	}
	lo = max(lo, 0)
	if hi >= 0 && lo > hi {
		return nil, fmt.Errorf("jsonconstraint: %s: minLength %d exceeds maxLength %d", path, lo, hi)
	}
	r := &strRule{minLen: lo, maxLen: hi}
	if hasPattern {
		p, ok := pv.(string)
		if !ok {
			return nil, fmt.Errorf("jsonconstraint: %s/pattern is %s, want a string", path, kindName(pv))
		}
		var err error
		if r.pat, err = compilePattern(p, lo, hi); err != nil {
			return nil, &PatternError{Path: path + "/pattern", Err: err}
		}
		r.stays = &patternStays{}
	}
	return r, nil
}

// PatternError is a schema's pattern that cannot be enforced: it does not
// parse, matches nothing (with the lengths), or needs too large an
// automaton. Err is the regex package's error (a *regex.Error carries the
// position in the pattern).
type PatternError struct {
	Path string
	Err  error
}

func (e *PatternError) Error() string { return fmt.Sprintf("jsonconstraint: %s: %v", e.Path, e.Err) }

func (e *PatternError) Unwrap() error { return e.Err }

// compilePattern builds a string's pattern DFA: the pattern, within the
// lengths, over the characters written without \u escapes (all but the
// control characters that have no short escape).
func compilePattern(p string, lo, hi int32) (*regex.DFA, error) {
	n, err := regex.Parse(p, true)
	if err != nil {
		return nil, err
	}
	writable := &regex.Node{Op: regex.OpClass, Ranges: []rune{'\b', '\n', '\f', '\r', ' ', 0x10FFFF}}
	if lo > 0 || hi >= 0 {
		if hi > maxPatternLength || lo > maxPatternLength {
			return nil, fmt.Errorf("a pattern with a length above %d cannot be enforced", maxPatternLength)
		}
		n = &regex.Node{Op: regex.OpConcat, Subs: []*regex.Node{n}}
		chars := regex.Repeat(writable, int(lo), int(hi))
		if hi < 0 {
			chars = regex.Concat(regex.Repeat(writable, int(lo), int(lo)), regex.Repeat(writable, 0, -1))
		}
		d, err := regex.Compile(n)
		if err != nil {
			return nil, err
		}
		l, err := regex.Compile(chars)
		if err != nil {
			return nil, err
		}
		return regex.Intersect(d, l)
	}
	d, err := regex.Compile(n)
	if err != nil {
		return nil, err
	}
	l, err := regex.Compile(regex.Repeat(writable, 0, -1))
	if err != nil {
		return nil, err
	}
	return regex.Intersect(d, l)
}

// maxPatternLength bounds minLength and maxLength beside a pattern (the
// automaton counts the characters).
const maxPatternLength = 1000

// parseArrRule reads minItems and maxItems; nil when neither is given.
func parseArrRule(m map[string]any, path string) (*arrRule, error) {
	lo, err := lengthKeyword(m, "minItems", path)
	if err != nil {
		return nil, err
	}
	hi, err := lengthKeyword(m, "maxItems", path)
	if err != nil {
		return nil, err
	}
	if lo < 0 && hi < 0 {
		return nil, nil
	}
	lo = max(lo, 0)
	if hi >= 0 && lo > hi {
		return nil, fmt.Errorf("jsonconstraint: %s: minItems %d exceeds maxItems %d", path, lo, hi)
	}
	return &arrRule{minItems: lo, maxItems: hi}, nil
}

// ratOf reads a JSON number exactly.
func ratOf(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	return r, ok
}

// parseNumRule reads minimum, maximum, exclusiveMinimum and
// exclusiveMaximum (as numbers, or as booleans beside minimum and maximum
// as draft 4 writes them); nil when none bounds.
func parseNumRule(m map[string]any, path string) (*numRule, error) {
	r := &numRule{}
	bound := func(key string) (*big.Rat, error) {
		v, ok := m[key]
		if !ok {
			return nil, nil
		}
		x, ok := ratOf(v)
		if !ok {
			return nil, fmt.Errorf("jsonconstraint: %s/%s is %s, want a number", path, key, kindName(v))
		}
		return x, nil
	}
	var err error
	if r.lo, err = bound("minimum"); err != nil {
		return nil, err
	}
	if r.hi, err = bound("maximum"); err != nil {
		return nil, err
	}
	for _, e := range []struct {
		key   string
		lower bool
	}{{"exclusiveMinimum", true}, {"exclusiveMaximum", false}} {
		v, ok := m[e.key]
		if !ok {
			continue
		}
		if b, isBool := v.(bool); isBool {
			if e.lower {
				r.loEx = b && r.lo != nil
			} else {
				r.hiEx = b && r.hi != nil
			}
			continue
		}
		x, ok := ratOf(v)
		if !ok {
			return nil, fmt.Errorf("jsonconstraint: %s/%s is %s, want a number", path, e.key, kindName(v))
		}
		// The tighter of the inclusive and exclusive bound wins.
		if e.lower {
			if r.lo == nil || x.Cmp(r.lo) >= 0 {
				r.lo, r.loEx = x, true
			}
		} else if r.hi == nil || x.Cmp(r.hi) <= 0 {
			r.hi, r.hiEx = x, true
		}
	}
	if r.lo == nil && r.hi == nil {
		return nil, nil
	}
	return r, nil
}

// allowsLiteral reports whether a const or enum value passes the schema's
// own string, number and array keywords.
func (n *node) allowsLiteral(v any) bool {
	switch x := v.(type) {
	case string:
		return n.str == nil || n.str.allows(x)
	case json.Number:
		if n.num == nil {
			return true
		}
		r, ok := ratOf(x)
		return ok && n.num.contains(r)
	case []any:
		return n.arr == nil || len(x) >= int(n.arr.minItems) && (n.arr.maxItems < 0 || len(x) <= int(n.arr.maxItems))
	}
	return true
}
