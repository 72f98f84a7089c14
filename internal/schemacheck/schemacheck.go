// Package schemacheck validates decoded JSON values against the JSON
// Schema subset govinfer's constrained decoding enforces (jsonconstraint):
// type, properties, required, additionalProperties, items, minItems,
// maxItems, enum, const, anyOf, oneOf (any branch), single allOf, local
// $ref, nullable, minLength, maxLength, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum. Tests use it as a reference that
// shares no code with the automaton.
package schemacheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Decode decodes JSON keeping numbers exact (json.Number).
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the value")
	}
	return v, nil
}

// ValidateJSON validates a JSON document against a JSON schema document.
func ValidateJSON(schema, doc []byte) error {
	s, err := Decode(schema)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	v, err := Decode(doc)
	if err != nil {
		return fmt.Errorf("document %q: %w", doc, err)
	}
	return Validate(s, v, s)
}

// Validate checks value v against schema, whose $refs resolve in root.
func Validate(schema, v, root any) error {
	m, ok := schema.(map[string]any)
	if !ok {
		if schema == false {
			return fmt.Errorf("false schema")
		}
		return nil
	}
	if ref, ok := m["$ref"].(string); ok {
		target, err := resolve(root, ref)
		if err != nil {
			return err
		}
		return Validate(target, v, root)
	}
	if all, ok := m["allOf"].([]any); ok {
		for _, b := range all {
			if err := Validate(b, v, root); err != nil {
				return err
			}
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if list, ok := m[kw].([]any); ok {
			if m["nullable"] == true && v == nil {
				return nil
			}
			ok := false
			for _, b := range list {
				if Validate(b, v, root) == nil {
					ok = true
					break
				}
			}
			if !ok {
				return fmt.Errorf("%s matches no branch of %s", show(v), kw)
			}
		}
	}
	if c, ok := m["const"]; ok && !equal(c, v) {
		return fmt.Errorf("%s is not const %s", show(v), show(c))
	}
	if e, ok := m["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || equal(x, v)
		}
		if !found {
			return fmt.Errorf("%s is not in enum %s", show(v), show(e))
		}
	}
	var types []string
	switch t := m["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			s, _ := x.(string)
			types = append(types, s)
		}
	}
	if m["nullable"] == true && types != nil {
		types = append(types, "null")
	}
	if types != nil && !typeIn(types, v) {
		return fmt.Errorf("%s is %s, want %v", show(v), kind(v), types)
	}
	if err := keywords(m, v); err != nil {
		return err
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := m["properties"].(map[string]any)
		req, _ := m["required"].([]any)
		for _, r := range req {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("required %q is missing from %s", r, show(v))
			}
		}
		for key, val := range x {
			if ps, ok := props[key]; ok {
				if err := Validate(ps, val, root); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				continue
			}
			add, has := m["additionalProperties"]
			if !has && m["properties"] != nil || add == false {
				return fmt.Errorf("key %q is not allowed", key)
			}
			if err := Validate(add, val, root); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
	case []any:
		if it, ok := m["items"]; ok {
			if _, tuple := it.([]any); !tuple {
				for i, e := range x {
					if err := Validate(it, e, root); err != nil {
						return fmt.Errorf("[%d]: %w", i, err)
					}
				}
			}
		}
	}
	return nil
}

func resolve(root any, ref string) (any, error) {
	if ref == "#" {
		return root, nil
	}
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	cur := root
	for _, part := range strings.Split(rest, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q: not found", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q: not found", ref)
		}
	}
	return cur, nil
}

// keywords checks the string, number and array keywords.
func keywords(m map[string]any, v any) error {
	rat := func(key string) (*big.Rat, bool) {
		switch n := m[key].(type) {
		case json.Number:
			return new(big.Rat).SetString(string(n))
		case float64:
			return new(big.Rat).SetFloat64(n), true
		}
		return nil, false
	}
	switch x := v.(type) {
	case string:
		n := big.NewRat(int64(utf8.RuneCountInString(x)), 1)
		if lo, ok := rat("minLength"); ok && n.Cmp(lo) < 0 {
			return fmt.Errorf("%q is shorter than minLength %s", x, lo.RatString())
		}
		if hi, ok := rat("maxLength"); ok && n.Cmp(hi) > 0 {
			return fmt.Errorf("%q is longer than maxLength %s", x, hi.RatString())
		}
	case json.Number:
		f, ok := new(big.Rat).SetString(string(x))
		if !ok {
			return fmt.Errorf("number %s does not parse", x)
		}
		if lo, ok := rat("minimum"); ok && f.Cmp(lo) < 0 {
			return fmt.Errorf("%s is below minimum %s", x, lo.RatString())
		}
		if hi, ok := rat("maximum"); ok && f.Cmp(hi) > 0 {
			return fmt.Errorf("%s is above maximum %s", x, hi.RatString())
		}
		if m["exclusiveMinimum"] != true && m["exclusiveMinimum"] != false {
			if lo, ok := rat("exclusiveMinimum"); ok && f.Cmp(lo) <= 0 {
				return fmt.Errorf("%s is not above exclusiveMinimum %s", x, lo.RatString())
			}
		}
		if m["exclusiveMaximum"] != true && m["exclusiveMaximum"] != false {
			if hi, ok := rat("exclusiveMaximum"); ok && f.Cmp(hi) >= 0 {
				return fmt.Errorf("%s is not below exclusiveMaximum %s", x, hi.RatString())
			}
		}
	case []any:
		n := big.NewRat(int64(len(x)), 1)
		if lo, ok := rat("minItems"); ok && n.Cmp(lo) < 0 {
			return fmt.Errorf("%d items, minItems %s", len(x), lo.RatString())
		}
		if hi, ok := rat("maxItems"); ok && n.Cmp(hi) > 0 {
			return fmt.Errorf("%d items, maxItems %s", len(x), hi.RatString())
		}
	}
	return nil
}

func typeIn(types []string, v any) bool {
	k := kind(v)
	for _, t := range types {
		if t == k || t == "number" && k == "integer" {
			return true
		}
	}
	return false
}

func kind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(x)); ok && r.IsInt() && !strings.ContainsAny(string(x), ".eE") {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// equal compares decoded values, numbers by value.
func equal(a, b any) bool {
	na, aNum := a.(json.Number)
	nb, bNum := b.(json.Number)
	if aNum && bNum {
		x, ok1 := new(big.Rat).SetString(string(na))
		y, ok2 := new(big.Rat).SetString(string(nb))
		return ok1 && ok2 && x.Cmp(y) == 0
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			if yv, ok := y[k]; !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
