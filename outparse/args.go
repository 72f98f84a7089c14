package outparse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/govinfer/govinfer/jsonvalue"
)

// ToolSchema maps each parameter of a tool to the JSON Schema types it may
// take ("string", "integer", "number", "boolean", "null", "object",
// "array"), in the order the schema lists them.
type ToolSchema map[string][]string

// SchemaFromParameters reads the parameter types of a tool from its
// "parameters" JSON Schema: each property's "type" (a string or a list), or
// the types of its "anyOf"/"oneOf" branches, or "enum" values' types,
// following local "$ref"s ("#/$defs/NAME", "#/definitions/NAME") and
// single "allOf"s. Properties with no type information are left out
// (their values stay strings).
func SchemaFromParameters(parameters []byte) (ToolSchema, error) {
	if len(bytes.TrimSpace(parameters)) == 0 || string(bytes.TrimSpace(parameters)) == "null" {
		return ToolSchema{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(parameters))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("outparse: tool parameters schema: %w", err)
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("outparse: tool parameters schema is not an object")
	}
	props, _ := root["properties"].(map[string]any)
	ts := make(ToolSchema, len(props))
	for name, prop := range props {
		budget := maxTypeBranches
		types, err := propertyTypes(prop, root, &budget, 0)
		if err != nil {
			return nil, fmt.Errorf("outparse: tool parameter %q: %w", name, err)
		}
		if len(types) > 0 {
			ts[name] = types
		}
	}
	return ts, nil
}

// maxTypeBranches bounds the schemas propertyTypes reads for one
// property, so that nested unions cannot make it exponential.
const maxTypeBranches = 256

func propertyTypes(prop any, root map[string]any, budget *int, depth int) ([]string, error) {
	if *budget--; depth > 8 || *budget < 0 {
		return nil, nil
	}
	p, ok := prop.(map[string]any)
	if !ok {
		if _, isBool := prop.(bool); isBool {
			return nil, nil
		}
		return nil, fmt.Errorf("the schema is not an object")
	}
	if ref, ok := p["$ref"].(string); ok {
		if section, name, ok := strings.Cut(strings.TrimPrefix(ref, "#/"), "/"); ok && strings.HasPrefix(ref, "#/") {
			defs, _ := root[section].(map[string]any)
			if target, found := defs[name]; found {
				return propertyTypes(target, root, budget, depth+1)
			}
		}
	}
	if all, ok := p["allOf"].([]any); ok && len(all) == 1 {
		return propertyTypes(all[0], root, budget, depth+1)
	}
	var types []string
	switch t := p["type"].(type) {
	case nil:
	case string:
		return []string{t}, nil
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("\"type\" is neither a string nor a list of strings")
			}
			types = append(types, s)
		}
		return types, nil
	default:
		return nil, fmt.Errorf("\"type\" is neither a string nor a list of strings")
	}
	anyOf, _ := p["anyOf"].([]any)
	oneOf, _ := p["oneOf"].([]any)
	for _, branch := range append(anyOf, oneOf...) {
		bt, err := propertyTypes(branch, root, budget, depth+1)
		if err != nil {
			return nil, err
		}
		types = append(types, bt...)
	}
	if enum, ok := p["enum"].([]any); ok && len(types) == 0 {
		for _, v := range enum {
			types = append(types, valueType(v))
		}
	}
	return types, nil
}

// valueType returns the JSON Schema type name of a decoded JSON value.
func valueType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case json.Number:
		return "number"
	}
	return "string"
}

// arguments renders params as a JSON object typed by schema, formatted as
// Python's json.dumps(ensure_ascii=False) writes it (", " and ": "), which is
// what vLLM sends. A repeated parameter keeps its first position and its last
// value.
func arguments(params []Param, schema ToolSchema) string {
	index := make(map[string]int, len(params))
	keys := make([]string, 0, len(params))
	vals := make([]string, 0, len(params))
	for _, p := range params {
		v := typedValue(p.Value, schema[p.Name])
		if i, ok := index[p.Name]; ok {
			vals[i] = v
			continue
		}
		index[p.Name] = len(keys)
		keys = append(keys, p.Name)
		vals = append(vals, v)
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		writePyString(&b, k)
		b.WriteString(": ")
		b.WriteString(vals[i])
	}
	b.WriteByte('}')
	return b.String()
}

// typedValue converts a raw parameter value to JSON by the first of types it
// parses as; a value that parses as none of them, or has no types, is a
// string.
func typedValue(raw string, types []string) string {
	for _, t := range types {
		if v, ok := convert(raw, t); ok {
			return v
		}
	}
	var b strings.Builder
	writePyString(&b, raw)
	return b.String()
}

// isNull reports whether raw spells null, as JSON or as Python's None (the
// template renders a null argument with Python's str()).
func isNull(raw string) bool {
	t := strings.TrimSpace(raw)
	return strings.EqualFold(t, "null") || t == "None"
}

func convert(raw, typ string) (string, bool) {
	t := strings.TrimSpace(raw)
	switch typ {
	case "string", "str", "text":
		var b strings.Builder
		writePyString(&b, raw)
		return b.String(), true
	case "null":
		if isNull(raw) {
			return "null", true
		}
	case "integer", "int":
		if isNull(raw) {
			return "null", true
		}
		n, ok := new(big.Int).SetString(strings.TrimPrefix(t, "+"), 10)
		if ok && t != "" {
			return n.String(), true
		}
	case "number", "float":
		if isNull(raw) {
			return "null", true
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || strings.ContainsAny(t, "xXpP_") {
			break
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), true
		}
		return strconv.FormatFloat(f, 'g', -1, 64), true
	case "boolean", "bool":
		if isNull(raw) {
			return "null", true
		}
		switch strings.ToLower(t) {
		case "true":
			return "true", true
		case "false":
			return "false", true
		}
	case jsonType:
		if t == "" || !json.Valid([]byte(t)) {
			break
		}
		var b strings.Builder
		if err := writePyJSON(&b, t); err != nil {
			break
		}
		return b.String(), true
	case "object", "array":
		if isNull(raw) {
			return "null", true
		}
		want := byte('{')
		if typ == "array" {
			want = '['
		}
		if t == "" || t[0] != want || !json.Valid([]byte(t)) {
			break
		}
		var b strings.Builder
		if err := writePyJSON(&b, t); err != nil {
			break
		}
		return b.String(), true
	}
	return "", false
}

// writePyJSON re-encodes one JSON value with Python's json.dumps
// separators, keeping number literals as written; a repeated key keeps its
// first position and its last value, as Python's dict does.
func writePyJSON(b *strings.Builder, text string) error {
	v, err := jsonvalue.Decode([]byte(text))
	if err != nil {
		return err
	}
	out, err := jsonvalue.Dumps(v, jsonvalue.PythonOptions())
	if err != nil {
		return err
	}
	b.WriteString(out)
	return nil
}

// writePyString writes s as a JSON string the way Python's
// json.dumps(ensure_ascii=False) does (see jsonvalue.WriteString).
func writePyString(b *strings.Builder, s string) { jsonvalue.WriteString(b, s, false) }
