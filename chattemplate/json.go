package chattemplate

import "github.com/govinfer/govinfer/jsonvalue"

// Object is a JSON object or Python dict that keeps its keys in insertion
// order; see jsonvalue.Object. Inside the interpreter its values may also be
// template values.
type Object = jsonvalue.Object

// NewObject returns an empty Object.
func NewObject() *Object { return jsonvalue.NewObject() }

// DecodeJSON decodes one JSON value as jsonvalue.Decode does: objects
// become *Object (key order kept), numbers json.Number.
func DecodeJSON(data []byte) (any, error) { return jsonvalue.Decode(data) }

// maxJSONDepth is the one nesting limit of JSON values.
const maxJSONDepth = jsonvalue.MaxDepth
