// Package jsonconstraint constrains token sampling so that a model's output
// is JSON, and optionally JSON that matches a JSON Schema (OpenAI's
// response_format json_object and json_schema).
//
// A Grammar is compiled once from a schema; a Vocab is built once per model
// from the raw bytes of each token; a Constraint follows one generation,
// masking the logits of tokens that cannot continue a valid document
// (ApplyMask) and advancing with each sampled token (Accept).
//
// # Supported JSON Schema subset
//
//   - type: "object", "array", "string", "number", "integer", "boolean",
//     "null", or a list of them; no type means any JSON value (restricted by
//     the other keywords below).
//   - properties, required, additionalProperties (false, true or a schema).
//     When properties are given and additionalProperties is absent or false,
//     no other keys are allowed; when neither is given any key is. Each
//     property appears at most once; the object cannot close before every
//     required key is present. At most 64 properties per object.
//   - patternProperties: a key one pattern matches (a search unless
//     anchored) has that pattern's schema; with patternProperties, as
//     with properties, an absent additionalProperties allows no other
//     key. Keys several patterns match, and pattern keys equal to a
//     declared name, are not written (the declared property's schema
//     applies to its name; under strict, a declared name a pattern
//     matches is an error). A required name no property declares takes
//     the schema of the first pattern that matches it.
//   - items (a single schema; tuple forms are ignored), minItems, maxItems.
//   - minLength, maxLength (in code points), pattern (a search unless
//     anchored, compiled to a DFA with the lengths). Strings with any of
//     them are written without \u escapes.
//   - minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or
//     draft 4's booleans). Bounded numbers are written without an exponent
//     and with at most 18 digits, and every prefix the automaton accepts
//     can still be completed in range.
//   - enum and const (values are written in their canonical compact JSON
//     form: keys sorted, no spaces, strings escaped as encoding/json does
//     without HTML escaping); values that break the schema's other
//     keywords are dropped.
//   - anyOf and oneOf: the output follows the first branch of each JSON
//     kind (object, array, string, number, literal values), so it always
//     matches at least one branch; a later branch of a kind an earlier one
//     already covers is not reachable. Unbounded "integer" and "number"
//     together give "number"; otherwise the first numeric branch decides.
//     OpenAPI's nullable: true adds null.
//   - $ref to "#", "#/$defs/NAME" or "#/definitions/NAME", recursion
//     included. allOf with a single schema is that schema.
//
// Annotations (title, description, default, examples, format, $schema,
// ...) never constrain. The other assertion keywords (multipleOf,
// uniqueItems, multi-branch allOf, not, if/then/else,
// propertyNames, minProperties, ...; see unsupported) are ignored by
// Compile, and fail CompileWith under Options.Strict with a *KeywordError
// naming them, so that a strict request is never silently loosened.
//
// Schemas are bounded before any work: at most MaxSchemaDepth levels of
// nesting, MaxSchemaNodes subschemas, and smallest values of at most
// MaxMinimalLength bytes.
//
// # Completions and budgets
//
// Every node has a smallest value, and every automaton state a completion:
// the value being read finished, then each open container given the
// smallest members or items its schema requires, and closed
// (Acceptor.Completion). Constraint.Budget uses it to end a document
// within a token budget: a token after which the completion would no
// longer fit in the tokens left is not allowed, and once only the
// completion fits, it is forced.
//
// # Output form
//
// The automaton accepts JSON with these restrictions, all of which keep
// every accepted document parseable by any JSON library: object keys are
// written without backslash escapes; at most MaxWhitespace consecutive
// whitespace bytes; numbers have at most 18 integer digits, 18 fraction
// digits and 2 exponent digits (so they fit an int64 or a float64); strings
// are valid UTF-8; nothing follows the top-level value.
//
// # Other automata
//
// A TextRule applies a schema's string keywords to text written raw (not
// quoted), and Walk computes the mask of any byte automaton whose state is
// a value, over a vocabulary Trie: the Qwen3.5 tool-call constraint in
// outparse is built from both.
package jsonconstraint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/grammar/regex"
)

// kinds is a set of JSON value kinds with a free (non-literal) form.
type kinds uint8

const (
	kObject kinds = 1 << iota
	kArray
	kString
	kNumber
	kInteger
)

// node is one compiled schema: what values may appear at one place.
type node struct {
	kinds kinds
	lits  *litTrie // exact values (enum, const, true, false, null)

	literals [][]byte // the values in lits

	// Objects.
	props    []prop
	keys     *keyTrie
	required uint64
	extra    *node // schema of keys not in props; nil: none allowed
	// patternProperties: each pattern's source (name) and schema (n),
	// and the automaton their keys are read with.
	pats []prop
	keyM *keyMatcher

	// Arrays.
	items *node

	// The keywords of the string, number and array kinds (nil: none).
	str *strRule
	num *numRule
	arr *arrRule

	// minimal is the shortest value the node allows (set by resolve): what
	// a completion writes where a value must come.
	minimal []byte

	// Before resolution: a union of branches (anyOf, oneOf, type lists).
	branches []*node
	resolved uint8 // flattening: 0 not yet, 1 in progress, 2 done
}

type prop struct {
	name string
	n    *node
}

// Grammar is a compiled schema. It is immutable and may be shared by any
// number of Constraints.
type Grammar struct {
	root       *node
	byteGrowth int // see byteGrowth
}

// AnyJSON returns a grammar accepting any JSON value.
func AnyJSON() *Grammar {
	root := anyNode()
	return &Grammar{root: root, byteGrowth: byteGrowth(root)}
}

// AnyObject returns a grammar accepting any JSON object (response_format
// json_object).
func AnyObject() *Grammar {
	a := anyNode()
	root := &node{kinds: kObject, extra: a, resolved: 2, minimal: []byte("{}")}
	return &Grammar{root: root, byteGrowth: byteGrowth(root)}
}

func anyNode() *node {
	a := &node{kinds: kObject | kArray | kString | kNumber, resolved: 2, minimal: []byte("0")}
	a.extra, a.items = a, a
	a.literals = [][]byte{[]byte("true"), []byte("false"), []byte("null")}
	a.lits = newLitTrie(a.literals)
	return a
}

// maxProps is the most properties one object schema may have.
const maxProps = 64

// Limits of a schema: the most nested schemas (properties in properties,
// items in items, ...), the most schema objects in all, and the longest
// smallest value (see Acceptor.Completion).
const (
	MaxSchemaDepth   = 64
	MaxSchemaNodes   = 4096
	MaxMinimalLength = 4096
)

// Options tune Compile.
type Options struct {
	// Strict fails with a *KeywordError on a keyword that constrains
	// values but is not enforced (see the package doc); otherwise such
	// keywords are ignored.
	Strict bool
}

// Compile compiles a JSON Schema (see the package doc for the supported
// subset), ignoring the keywords it does not enforce.
func Compile(schema []byte) (*Grammar, error) { return CompileWith(schema, Options{}) }

// CompileWith compiles a JSON Schema with options.
func CompileWith(schema []byte, o Options) (*Grammar, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("jsonconstraint: schema is not JSON: %w", err)
	}
	return compileDoc(doc, o)
}

func compileDoc(doc any, o Options) (*Grammar, error) {
	c := &compiler{doc: doc, refs: map[string]*node{}, strict: o.Strict}
	root, err := c.compile(doc, "#")
	if err != nil {
		return nil, err
	}
	if err := resolve(root); err != nil {
		return nil, err
	}
	return &Grammar{root: root, byteGrowth: byteGrowth(root)}, nil
}

type compiler struct {
	doc    any
	refs   map[string]*node
	depth  int
	nodes  int
	strict bool
}

func (c *compiler) compile(s any, path string) (*node, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > MaxSchemaDepth {
		return nil, fmt.Errorf("jsonconstraint: schema at %s nested too deeply (more than %d levels)", path, MaxSchemaDepth)
	}
	if c.nodes++; c.nodes > MaxSchemaNodes {
		return nil, fmt.Errorf("jsonconstraint: schema has more than %d subschemas", MaxSchemaNodes)
	}
	switch v := s.(type) {
	case bool:
		if !v && c.strict {
			return nil, &KeywordError{Path: path, Keyword: "false"}
		}
		return anyNode(), nil // true; false is not supported and ignored
	case map[string]any:
		return c.compileObject(v, path)
	}
	return nil, fmt.Errorf("jsonconstraint: schema at %s is %s, want an object", path, kindName(s))
}

func (c *compiler) compileObject(m map[string]any, path string) (*node, error) {
	if err := c.checkKeywords(m, path); err != nil {
		return nil, err
	}
	if ref, ok := m["$ref"].(string); ok {
		return c.ref(ref, path)
	}
	if all, ok := m["allOf"].([]any); ok && len(all) == 1 {
		return c.compile(all[0], path+"/allOf/0")
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		list, ok := m[kw].([]any)
		if !ok {
			continue
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("jsonconstraint: %s/%s is empty", path, kw)
		}
		u := &node{}
		for i, b := range list {
			bn, err := c.compile(b, fmt.Sprintf("%s/%s/%d", path, kw, i))
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, bn)
		}
		if m["nullable"] == true {
			u.branches = append(u.branches, &node{literals: [][]byte{[]byte("null")}})
		}
		return u, nil
	}

	types, err := schemaTypes(m, path)
	if err != nil {
		return nil, err
	}
	if m["nullable"] == true && types != nil {
		types = append(types, "null")
	}

	n := &node{}
	if n.str, err = parseStrRule(m, path); err != nil {
		return nil, err
	}
	if n.num, err = parseNumRule(m, path); err != nil {
		return nil, err
	}
	if n.arr, err = parseArrRule(m, path); err != nil {
		return nil, err
	}
	if e, ok := m["const"]; ok {
		if !n.allowsLiteral(e) {
			return nil, fmt.Errorf("jsonconstraint: %s/const breaks the schema's own keywords", path)
		}
		lit, err := canonical(e)
		if err != nil {
			return nil, fmt.Errorf("jsonconstraint: %s/const: %w", path, err)
		}
		n.literals = [][]byte{lit}
		return n, nil
	}
	if e, ok := m["enum"]; ok {
		list, ok := e.([]any)
		if !ok {
			return nil, fmt.Errorf("jsonconstraint: %s/enum is %s, want an array", path, kindName(e))
		}
		for _, v := range list {
			if types != nil && !typeAllows(types, v) || !n.allowsLiteral(v) {
				continue
			}
			lit, err := canonical(v)
			if err != nil {
				return nil, fmt.Errorf("jsonconstraint: %s/enum: %w", path, err)
			}
			n.literals = append(n.literals, lit)
		}
		if len(n.literals) == 0 {
			return nil, fmt.Errorf("jsonconstraint: %s/enum allows no value", path)
		}
		return n, nil
	}

	if types == nil {
		// No type: infer from the keywords, else anything.
		_, hasProps := m["properties"]
		_, hasAdd := m["additionalProperties"]
		_, hasReq := m["required"]
		_, hasItems := m["items"]
		switch {
		case hasProps || hasAdd || hasReq:
			types = []string{"object"}
		case hasItems:
			types = []string{"array"}
		default:
			types = []string{"object", "array", "string", "number", "boolean", "null"}
		}
	}
	for _, t := range types {
		switch t {
		case "object":
			if err := c.objectPart(n, m, path); err != nil {
				return nil, err
			}
			n.kinds |= kObject
		case "array":
			n.items = anyNode()
			if it, ok := m["items"]; ok {
				if _, tuple := it.([]any); !tuple {
					if n.items, err = c.compile(it, path+"/items"); err != nil {
						return nil, err
					}
				}
			}
			n.kinds |= kArray
		case "string":
			n.kinds |= kString
		case "number":
			n.kinds |= kNumber
		case "integer":
			n.kinds |= kInteger
		case "boolean":
			n.literals = append(n.literals, []byte("true"), []byte("false"))
		case "null":
			n.literals = append(n.literals, []byte("null"))
		default:
			return nil, fmt.Errorf("jsonconstraint: %s/type: unknown type %q", path, t)
		}
	}
	if n.kinds&kNumber != 0 {
		n.kinds &^= kInteger
	}
	if numeric := n.kinds & (kNumber | kInteger); numeric != 0 && n.num != nil && !n.num.feasible(numPrefix{sub: numStart}, numeric == kInteger) {
		n.kinds &^= numeric // the bounds leave no number of at most boundDigits digits
	}
	if n.kinds == 0 && len(n.literals) == 0 {
		return nil, fmt.Errorf("jsonconstraint: %s allows no value", path)
	}
	return n, nil
}

func (c *compiler) objectPart(n *node, m map[string]any, path string) error {
	props, _ := m["properties"].(map[string]any)
	if len(props) > maxProps {
		return fmt.Errorf("jsonconstraint: %s/properties: %d properties, at most %d are supported", path, len(props), maxProps)
	}
	names := orderedKeys(props)
	for _, name := range names {
		pn, err := c.compile(props[name], path+"/properties/"+name)
		if err != nil {
			return err
		}
		n.props = append(n.props, prop{name: name, n: pn})
	}
	switch add := m["additionalProperties"].(type) {
	case nil:
		if _, has := m["properties"]; !has {
			n.extra = anyNode()
		}
	case bool:
		if add {
			n.extra = anyNode()
		}
	default:
		en, err := c.compile(add, path+"/additionalProperties")
		if err != nil {
			return err
		}
		n.extra = en
	}
	if err := c.patternProperties(n, m, path); err != nil {
		return err
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			name, ok := r.(string)
			if !ok {
				return fmt.Errorf("jsonconstraint: %s/required holds %s, want strings", path, kindName(r))
			}
			i := propIndex(n.props, name)
			if i < 0 {
				// Required but not declared: the schema of the first
				// pattern that matches the name, else of additional
				// properties.
				schema := n.extra
				for _, pp := range n.pats {
					if d, err := compileKeyPattern(pp.name); err == nil && d.Match([]byte(name)) {
						schema = pp.n
						break
					}
				}
				if schema == nil {
					return fmt.Errorf("jsonconstraint: %s: required property %q is not in properties, matches no patternProperties, and additional properties are not allowed", path, name)
				}
				if len(n.props) == maxProps {
					return fmt.Errorf("jsonconstraint: %s: more than %d properties", path, maxProps)
				}
				n.props = append(n.props, prop{name: name, n: schema})
				i = len(n.props) - 1
			}
			n.required |= 1 << i
		}
	}
	for _, p := range n.props {
		if strings.ContainsAny(p.name, "\"\\") || strings.IndexFunc(p.name, func(r rune) bool { return r < 0x20 }) >= 0 {
			return fmt.Errorf("jsonconstraint: %s: property name %q needs escaping, which is not supported", path, p.name)
		}
	}
	return nil
}

// patternProperties compiles an object's patternProperties: the value
// of a key that one pattern matches (a search unless anchored, as JSON
// Schema has it) follows that pattern's schema. A key no pattern matches
// follows additionalProperties (and with patternProperties, as with
// properties, none is allowed when additionalProperties is absent); a
// key that several patterns match is not written (the value would have
// to match each of their schemas), nor is a pattern key equal to a
// declared property's name, whose schema alone applies (under strict, a
// declared name a pattern matches is an error, since both would).
func (c *compiler) patternProperties(n *node, m map[string]any, path string) error {
	raw, ok := m["patternProperties"]
	if !ok {
		return nil
	}
	pp, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("jsonconstraint: %s/patternProperties is %s, want an object", path, kindName(raw))
	}
	if len(pp) == 0 {
		return nil
	}
	if len(pp) > maxKeyPatterns {
		return fmt.Errorf("jsonconstraint: %s/patternProperties: %d patterns, at most %d are supported", path, len(pp), maxKeyPatterns)
	}
	if _, has := m["additionalProperties"]; !has {
		n.extra = nil
	}
	var dfas []*regex.DFA
	for _, p := range orderedKeys(pp) {
		at := path + "/patternProperties/" + p
		d, err := compileKeyPattern(p)
		if err != nil {
			return &PatternError{Path: at, Err: err}
		}
		pn, err := c.compile(pp[p], at)
		if err != nil {
			return err
		}
		if c.strict {
			for _, q := range n.props {
				if d.Match([]byte(q.name)) {
					return fmt.Errorf("jsonconstraint: %s: property %q also matches patternProperties %q: both schemas would apply, which is not supported under strict", path, q.name, p)
				}
			}
		}
		n.pats = append(n.pats, prop{name: p, n: pn})
		dfas = append(dfas, d)
	}
	km, err := newKeyMatcher(dfas, n.extra != nil)
	if err != nil {
		return &PatternError{Path: path + "/patternProperties", Err: err}
	}
	n.keyM = km
	return nil
}

func propIndex(ps []prop, name string) int {
	for i, p := range ps {
		if p.name == name {
			return i
		}
	}
	return -1
}

// ref compiles a local reference, once per target.
func (c *compiler) ref(ref, path string) (*node, error) {
	if n, ok := c.refs[ref]; ok {
		return n, nil
	}
	var target any
	switch {
	case ref == "#":
		target = c.doc
	case strings.HasPrefix(ref, "#/$defs/") || strings.HasPrefix(ref, "#/definitions/"):
		section, name, _ := strings.Cut(strings.TrimPrefix(ref, "#/"), "/")
		name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
		defs, _ := c.doc.(map[string]any)[section].(map[string]any)
		t, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("jsonconstraint: %s: $ref %q not found", path, ref)
		}
		target = t
	default:
		return nil, fmt.Errorf("jsonconstraint: %s: $ref %q: only local references to #, #/$defs/ and #/definitions/ are supported", path, ref)
	}
	// A placeholder union of one branch: recursion points at it before the
	// target is compiled.
	ph := &node{}
	c.refs[ref] = ph
	n, err := c.compile(target, ref)
	if err != nil {
		return nil, err
	}
	ph.branches = []*node{n}
	return ph, nil
}

// flatten merges a union's branches into the node itself. It follows only
// branch edges, so a recursive schema (which recurses through a container)
// is fine; a union that contains itself is an error.
func flatten(n *node, path string) error {
	switch n.resolved {
	case 2:
		return nil
	case 1:
		return fmt.Errorf("jsonconstraint: %s: a schema that is a union with itself", path)
	}
	n.resolved = 1
	for _, b := range n.branches {
		if err := flatten(b, path); err != nil {
			return err
		}
	}
	for _, b := range n.branches {
		if b.kinds&kObject != 0 && n.kinds&kObject == 0 {
			n.kinds |= kObject
			n.props, n.required, n.extra = b.props, b.required, b.extra
			n.pats, n.keyM = b.pats, b.keyM
		}
		if b.kinds&kArray != 0 && n.kinds&kArray == 0 {
			n.kinds |= kArray
			n.items, n.arr = b.items, b.arr
		}
		if b.kinds&kString != 0 && n.kinds&kString == 0 {
			n.kinds |= kString
			n.str = b.str
		}
		// Numbers: the first numeric branch, or the union of unbounded ones.
		if num := b.kinds & (kNumber | kInteger); num != 0 {
			switch {
			case n.kinds&(kNumber|kInteger) == 0:
				n.kinds |= num
				n.num = b.num
			case n.num == nil && b.num == nil:
				n.kinds |= num
			}
		}
		n.literals = append(n.literals, b.literals...)
	}
	n.branches = nil
	if n.kinds&kNumber != 0 {
		n.kinds &^= kInteger
	}
	n.resolved = 2
	return nil
}

// resolve flattens every node reachable from root and builds its tries.
func resolve(root *node) error {
	type item struct {
		n    *node
		path string
	}
	seen := map[*node]bool{root: true}
	todo := []item{{root, "#"}}
	var all []*node
	for len(todo) > 0 {
		it := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		n := it.n
		all = append(all, n)
		if err := flatten(n, it.path); err != nil {
			return err
		}
		if n.kinds&kObject != 0 && len(n.props) > 0 {
			n.keys = newKeyTrie(n.props)
		}
		if len(n.literals) > 0 {
			n.lits = newLitTrie(n.literals)
		}
		if n.kinds == 0 && n.lits == nil {
			return fmt.Errorf("jsonconstraint: %s allows no value", it.path)
		}
		next := func(c *node, path string) {
			if c != nil && !seen[c] {
				seen[c] = true
				todo = append(todo, item{c, path})
			}
		}
		for _, p := range n.props {
			next(p.n, it.path+"/properties/"+p.name)
		}
		for _, p := range n.pats {
			next(p.n, it.path+"/patternProperties/"+p.name)
		}
		next(n.extra, it.path+"/additionalProperties")
		next(n.items, it.path+"/items")
	}
	return setMinimal(all)
}

// schemaTypes reads "type": nil when absent.
func schemaTypes(m map[string]any, path string) ([]string, error) {
	switch t := m["type"].(type) {
	case nil:
		return nil, nil
	case string:
		return []string{t}, nil
	case []any:
		var ts []string
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("jsonconstraint: %s/type holds %s, want strings", path, kindName(e))
			}
			ts = append(ts, s)
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("jsonconstraint: %s/type is an empty list", path)
		}
		return ts, nil
	default:
		return nil, fmt.Errorf("jsonconstraint: %s/type is %s, want a string or a list", path, kindName(t))
	}
}

// typeAllows reports whether the JSON value v has one of types.
func typeAllows(types []string, v any) bool {
	k := kindName(v)
	for _, t := range types {
		if t == k || (t == "number" && k == "integer") {
			return true
		}
	}
	return false
}

// kindName names the JSON Schema type of a decoded value.
func kindName(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if _, err := x.Int64(); err == nil {
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

// canonical encodes v compactly, keys sorted, without HTML escaping.
func canonical(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// orderedKeys returns the keys of m sorted; encoding/json does not keep the
// schema's order and the automaton does not need it.
func orderedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
