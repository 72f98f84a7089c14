package jsonconstraint

import (
	"encoding/json"
	"fmt"
	"math/big"
	"unicode/utf8"
)

// strRule holds a schema's string keywords. Lengths count Unicode code
// points, as JSON Schema does.
type strRule struct {
	minLen, maxLen int32 // maxLen < 0: no maximum
}

func (r *strRule) allows(s string) bool {
	n := utf8.RuneCountInString(s)
	return n >= int(r.minLen) && (r.maxLen < 0 || n <= int(r.maxLen))
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
	"multipleOf", "uniqueItems", "not", "if", "then", "else", "patternProperties",
	"propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
	"dependencies", "contains", "minContains", "maxContains", "prefixItems", "additionalItems",
	"unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "$recursiveRef", "pattern",
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
	if lo < 0 && hi < 0 {
		return nil, nil
	}
	lo = max(lo, 0)
	if hi >= 0 && lo > hi {
		return nil, fmt.Errorf("jsonconstraint: %s: minLength %d exceeds maxLength %d", path, lo, hi)
	}
	return &strRule{minLen: lo, maxLen: hi}, nil
}

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
