package jsonvalue

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// FieldError is a field of a decoded document with the wrong type or an
// unreadable value. Field is its path ("messages[0].role").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Message }

// Errorf returns a FieldError for field.
func Errorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Fields reads the members of an object with getters that check their
// types and name the field in their errors. A null member counts as absent.
// The zero value reads as an empty object.
type Fields struct {
	Obj  *Object
	Path string // the object's own path; "" at the top of a document
}

// ObjectFields returns the fields of o, whose path is path.
func ObjectFields(o *Object, path string) Fields { return Fields{Obj: o, Path: path} }

// Name returns the path of member key.
func (f Fields) Name(key string) string {
	if f.Path == "" {
		return key
	}
	return f.Path + "." + key
}

// Get returns member key; null counts as absent.
func (f Fields) Get(key string) (any, bool) {
	if f.Obj == nil {
		return nil, false
	}
	v, ok := f.Obj.Get(key)
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// Has reports whether member key is present and not null.
func (f Fields) Has(key string) bool {
	_, ok := f.Get(key)
	return ok
}

// Str reads a string member.
func (f Fields) Str(key string) (string, bool, *FieldError) {
	v, ok := f.Get(key)
	if !ok {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", false, Errorf(f.Name(key), "%s must be a string, got %s", f.Name(key), Kind(v))
	}
	return s, true, nil
}

// Bool reads a boolean member.
func (f Fields) Bool(key string) (bool, bool, *FieldError) {
	v, ok := f.Get(key)
	if !ok {
		return false, false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, false, Errorf(f.Name(key), "%s must be a boolean, got %s", f.Name(key), Kind(v))
	}
	return b, true, nil
}

// Float reads a finite number member.
func (f Fields) Float(key string) (float64, bool, *FieldError) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, false, Errorf(f.Name(key), "%s must be a number, got %s", f.Name(key), Kind(v))
	}
	x, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(x, 0) {
		return 0, false, Errorf(f.Name(key), "%s: %s is out of range", f.Name(key), n)
	}
	return x, true, nil
}

// Int reads an integer member (a number without a fraction, at most 2^53
// in magnitude).
func (f Fields) Int(key string) (int, bool, *FieldError) {
	x, ok, err := f.Float(key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		return 0, false, Errorf(f.Name(key), "%s must be an integer, got %v", f.Name(key), x)
	}
	return int(x), true, nil
}

// Object reads an object member.
func (f Fields) Object(key string) (Fields, bool, *FieldError) {
	v, ok := f.Get(key)
	if !ok {
		return Fields{}, false, nil
	}
	o, isObj := v.(*Object)
	if !isObj {
		return Fields{}, false, Errorf(f.Name(key), "%s must be an object, got %s", f.Name(key), Kind(v))
	}
	return Fields{Obj: o, Path: f.Name(key)}, true, nil
}

// Array reads an array member.
func (f Fields) Array(key string) ([]any, bool, *FieldError) {
	v, ok := f.Get(key)
	if !ok {
		return nil, false, nil
	}
	a, isArr := v.([]any)
	if !isArr {
		return nil, false, Errorf(f.Name(key), "%s must be an array, got %s", f.Name(key), Kind(v))
	}
	return a, true, nil
}

// IntList reads an array of integers (each at most 2^31 in magnitude).
func (f Fields) IntList(key string) ([]int, *FieldError) {
	a, _, err := f.Array(key)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(a))
	for i, v := range a {
		n, ok := v.(json.Number)
		x, perr := strconv.ParseFloat(string(n), 64)
		if !ok || perr != nil || x != math.Trunc(x) || math.Abs(x) > 1<<31 {
			return nil, Errorf(f.Name(key), "%s[%d] must be an integer, got %s", f.Name(key), i, Kind(v))
		}
		out[i] = int(x)
	}
	return out, nil
}
