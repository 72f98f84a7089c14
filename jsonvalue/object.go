// Package jsonvalue is the project's one JSON value model: objects that keep
// their keys in order (as Python dicts and the chat template interpreter
// need), numbers kept as their literals, one nesting limit, and writers that
// format values exactly as Python's json.dumps does. Request bodies, chat
// template variables and tool-call arguments all use it.
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Object is a JSON object or Python dict that keeps its keys in insertion
// order. The zero value is an empty object ready to use. Values are Go values
// of the kinds DecodeJSON produces (nil, bool, string, json.Number, float64,
// []any, *Object) or, inside the interpreter, template values.
type Object struct {
	keys []string
	vals map[string]any
}

// NewObject returns an empty Object.
func NewObject() *Object { return &Object{} }

// Len returns the number of keys.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// Keys returns the keys in insertion order. The slice must not be modified.
func (o *Object) Keys() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

// Get returns the value stored under key and whether it was present.
func (o *Object) Get(key string) (any, bool) {
	if o == nil || o.vals == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

// Set stores value under key. A new key goes to the end; an existing key
// keeps its position, as in a Python dict.
func (o *Object) Set(key string, value any) {
	if o.vals == nil {
		o.vals = make(map[string]any)
	}
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = value
}

// Delete removes key if present.
func (o *Object) Delete(key string) {
	if o == nil || o.vals == nil {
		return
	}
	if _, ok := o.vals[key]; !ok {
		return
	}
	delete(o.vals, key)
	for i, k := range o.keys {
		if k == key {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// MarshalJSON writes the object with its keys in order. Values are encoded
// with encoding/json.
func (o *Object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.Keys() {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, fmt.Errorf("encoding key %q: %w", k, err)
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a JSON object, keeping key order; nested values are
// decoded as by Decode.
func (o *Object) UnmarshalJSON(data []byte) error {
	v, err := Decode(data)
	if err != nil {
		return err
	}
	obj, ok := v.(*Object)
	if !ok {
		return fmt.Errorf("jsonvalue: JSON value is %s, not an object", Kind(v))
	}
	*o = *obj
	return nil
}

// Kind names the JSON type of a decoded value for messages: "null", "a
// boolean", "a string", "a number", "an array", "an object".
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case *Object:
		return "an object"
	}
	return "an unknown value"
}

// Decode decodes one JSON value. Objects become *Object (key order kept),
// arrays []any, numbers json.Number (the literal as written, so that 1.0 and
// 1 stay distinct, as they are for Python's json module), strings string,
// booleans bool and null nil. Trailing data after the value is an error.
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("jsonvalue: decoding JSON: %w", err)
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("jsonvalue: decoding JSON: trailing data after the value")
	}
	return v, nil
}

// MaxDepth bounds the nesting of values everywhere they are decoded,
// converted or written, so that hostile input cannot exhaust the stack.
const MaxDepth = 512

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := NewObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %v, not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				o.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}
