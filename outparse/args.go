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
// the types of its "anyOf"/"oneOf" branches, or "enum" values' types.
// Properties with no type information are left out (their values stay
// strings).
func SchemaFromParameters(parameters []byte) (ToolSchema, error) {
	if len(bytes.TrimSpace(parameters)) == 0 || string(bytes.TrimSpace(parameters)) == "null" {
		return ToolSchema{}, nil
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(parameters, &schema); err != nil {
		return nil, fmt.Errorf("outparse: tool parameters schema: %w", err)
	}
	ts := make(ToolSchema, len(schema.Properties))
	for name, prop := range schema.Properties {
		types, err := propertyTypes(prop, 0)
		if err != nil {
			return nil, fmt.Errorf("outparse: tool parameter %q: %w", name, err)
		}
		if len(types) > 0 {
			ts[name] = types
		}
	}
	return ts, nil
}

func propertyTypes(prop json.RawMessage, depth int) ([]string, error) {
	if depth > 8 {
		return nil, nil
	}
	var p struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
		Enum  []json.RawMessage `json:"enum"`
	}
	if err := json.Unmarshal(prop, &p); err != nil {
		return nil, err
	}
	var types []string
	if len(p.Type) > 0 {
		var one string
		if err := json.Unmarshal(p.Type, &one); err == nil {
			types = append(types, one)
		} else if err := json.Unmarshal(p.Type, &types); err != nil {
			return nil, fmt.Errorf("\"type\" is neither a string nor a list of strings")
		}
		return types, nil
	}
	for _, branch := range append(p.AnyOf, p.OneOf...) {
		bt, err := propertyTypes(branch, depth+1)
		if err != nil {
			return nil, err
		}
		types = append(types, bt...)
	}
	if len(types) == 0 {
		for _, v := range p.Enum {
			types = append(types, schemaType(v))
		}
	}
	return types, nil
}

// schemaType returns the JSON Schema type name of a JSON value.
func schemaType(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "string"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
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
