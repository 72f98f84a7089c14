package gguf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrNoKey is wrapped by the errors of Metadata's accessors for a key the
// file does not have.
var ErrNoKey = errors.New("no such key")

// KV is one metadata key/value pair.
//
// A value's Go type follows its ValueType: uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64 or float64; an array
// is a slice of one of those ([]uint8, ..., []string), and an array of
// arrays is an []any whose elements are such slices (or []any again).
type KV struct {
	Key   string
	Value any
}

// Metadata is a file's key/value pairs, in file order.
type Metadata struct {
	kvs   []KV
	index map[string]int
}

// NewMetadata returns metadata holding kvs, in that order. Keys must be
// unique and non-empty, and every value of a type TypeOf accepts.
func NewMetadata(kvs ...KV) (*Metadata, error) {
	m := &Metadata{index: make(map[string]int, len(kvs))}
	for _, kv := range kvs {
		if err := m.Set(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Set adds key with value v, or replaces its value if the key is present.
func (m *Metadata) Set(key string, v any) error {
	if key == "" {
		return errors.New("gguf: empty metadata key")
	}
	if _, err := TypeOf(v); err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if m.index == nil {
		m.index = map[string]int{}
	}
	if i, ok := m.index[key]; ok {
		m.kvs[i].Value = v
		return nil
	}
	m.index[key] = len(m.kvs)
	m.kvs = append(m.kvs, KV{key, v})
	return nil
}

// Len returns the number of keys.
func (m *Metadata) Len() int { return len(m.kvs) }

// KVs returns the pairs in file order. The slice is a copy; array values
// are shared and must not be modified.
func (m *Metadata) KVs() []KV { return append([]KV(nil), m.kvs...) }

// Has reports whether the key is present.
func (m *Metadata) Has(key string) bool {
	_, ok := m.index[key]
	return ok
}

// Get returns the value of key.
func (m *Metadata) Get(key string) (any, bool) {
	i, ok := m.index[key]
	if !ok {
		return nil, false
	}
	return m.kvs[i].Value, true
}

func (m *Metadata) lookup(key string) (any, error) {
	v, ok := m.Get(key)
	if !ok {
		return nil, fmt.Errorf("gguf: key %q: %w", key, ErrNoKey)
	}
	return v, nil
}

func typeError(key string, v any, want string) error {
	t, _ := TypeOf(v)
	return fmt.Errorf("gguf: key %q is %s, want %s", key, describe(v, t), want)
}

func describe(v any, t ValueType) string {
	if t == TypeArray {
		et, _ := elemType(v)
		return "an array of " + et.String()
	}
	return "a " + t.String()
}

// Int returns an integer value of any integer type as an int64 (an uint64
// above the int64 range is an error).
func (m *Metadata) Int(key string) (int64, error) {
	v, err := m.lookup(key)
	if err != nil {
		return 0, err
	}
	n, ok := toInt(v)
	if !ok {
		return 0, typeError(key, v, "an integer")
	}
	return n, nil
}

// Float returns a float32 or float64 value (integers are accepted too). A
// float32 comes back as the shortest decimal that rounds to it, the number
// it was most likely written from: 1e-6, not 9.999999974752427e-07.
func (m *Metadata) Float(key string) (float64, error) {
	v, err := m.lookup(key)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float32:
		return strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	case float64:
		return x, nil
	}
	if n, ok := toInt(v); ok {
		return float64(n), nil
	}
	return 0, typeError(key, v, "a number")
}

// String returns a string value.
func (m *Metadata) String(key string) (string, error) {
	v, err := m.lookup(key)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", typeError(key, v, "a string")
	}
	return s, nil
}

// Bool returns a bool value.
func (m *Metadata) Bool(key string) (bool, error) {
	v, err := m.lookup(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, typeError(key, v, "a bool")
	}
	return b, nil
}

// Strings returns an array of strings. The slice is shared with the
// metadata and must not be modified.
func (m *Metadata) Strings(key string) ([]string, error) {
	v, err := m.lookup(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.([]string)
	if !ok {
		return nil, typeError(key, v, "an array of strings")
	}
	return s, nil
}

// Ints returns an array of any integer type as int64s.
func (m *Metadata) Ints(key string) ([]int64, error) {
	v, err := m.lookup(key)
	if err != nil {
		return nil, err
	}
	out, ok := intSlice(v)
	if !ok {
		return nil, typeError(key, v, "an array of integers")
	}
	return out, nil
}

// toInt converts a value of an integer type.
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

func intSlice(v any) ([]int64, bool) {
	conv := func(n int, at func(int) int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch x := v.(type) {
	case []uint8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int64:
		return append([]int64(nil), x...), true
	case []uint64:
		for _, e := range x {
			if e > math.MaxInt64 {
				return nil, false
			}
		}
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	}
	return nil, false
}

// TypeOf returns the ValueType of a Go value as the format stores it, or an
// error for a type it cannot hold.
func TypeOf(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	}
	if _, err := elemType(v); err != nil {
		return 0, err
	}
	return TypeArray, nil
}

// elemType returns the element type of an array value.
func elemType(v any) (ValueType, error) {
	switch x := v.(type) {
	case []uint8:
		return TypeUint8, nil
	case []int8:
		return TypeInt8, nil
	case []uint16:
		return TypeUint16, nil
	case []int16:
		return TypeInt16, nil
	case []uint32:
		return TypeUint32, nil
	case []int32:
		return TypeInt32, nil
	case []float32:
		return TypeFloat32, nil
	case []bool:
		return TypeBool, nil
	case []string:
		return TypeString, nil
	case []uint64:
		return TypeUint64, nil
	case []int64:
		return TypeInt64, nil
	case []float64:
		return TypeFloat64, nil
	case []any:
		for i, e := range x {
			if t, err := TypeOf(e); err != nil || t != TypeArray {
				return 0, fmt.Errorf("element %d of an array of arrays is %T, not an array", i, e)
			}
		}
		return TypeArray, nil
	}
	return 0, fmt.Errorf("a %T cannot be a GGUF value", v)
}
