package chattemplate

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"unicode"

	"github.com/govinfer/govinfer/jsonvalue"
)

// pyIsSpace is Python's str.isspace() for one character, which (unlike
// unicode.IsSpace) includes the separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyIsPrintable approximates Python's str.isprintable() for one character.
func pyIsPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	return unicode.IsPrint(r)
}

// pyStrip is Python's str.strip/lstrip/rstrip. With chars == nil it strips
// whitespace, else any of the given characters.
func pyStrip(s string, chars *string, left, right bool) string {
	match := pyIsSpace
	if chars != nil {
		set := *chars
		match = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, match)
	}
	if right {
		s = strings.TrimRightFunc(s, match)
	}
	return s
}

// defaultJSONOptions are transformers' tojson defaults: ensure_ascii=False,
// indent=None, separators=None (", " and ": "), sort_keys=False.
func defaultJSONOptions() jsonvalue.DumpOptions { return jsonvalue.PythonOptions() }

// pyJSONDumps is Python's json.dumps of a template value (jsonvalue.Dumps,
// with the interpreter's own number and sequence types converted).
func pyJSONDumps(v any, o jsonvalue.DumpOptions) (string, error) {
	o.Convert = func(v any) (any, error) {
		switch x := v.(type) {
		case *big.Int:
			return json.Number(x.String()), nil
		case markup:
			return string(x), nil
		case tuple:
			return []any(x), nil
		}
		return nil, typeErrorf("Object of type %s is not JSON serializable", typeName(v))
	}
	s, err := jsonvalue.Dumps(v, o)
	if errors.Is(err, jsonvalue.ErrTooDeep) {
		return "", &Error{Kind: "RecursionError", Message: "maximum recursion depth exceeded while encoding a JSON object"}
	}
	return s, err
}
