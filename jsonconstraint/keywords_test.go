package jsonconstraint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStrictKeywords(t *testing.T) {
	for _, kw := range unsupported {
		schema := fmt.Sprintf(`{"type":"object","properties":{"a":{"type":"string","%s":1}}}`, kw)
		_, err := CompileWith([]byte(schema), Options{Strict: true})
		var ke *KeywordError
		if !errors.As(err, &ke) || ke.Keyword != kw || ke.Path != "#/properties/a" {
			t.Errorf("strict %s: error %v, want a KeywordError naming it at #/properties/a", kw, err)
		}
		if _, err := Compile([]byte(schema)); err != nil {
			t.Errorf("non-strict %s: %v", kw, err)
		}
	}
	for _, schema := range []string{
		`{"allOf":[{"type":"string"},{"minLength":2}]}`, `{"type":"array","items":[{"type":"string"}]}`,
		`{"type":"object","properties":{"a":false}}`,
	} {
		var ke *KeywordError
		if _, err := CompileWith([]byte(schema), Options{Strict: true}); !errors.As(err, &ke) {
			t.Errorf("strict %s: error %v, want a KeywordError", schema, err)
		}
	}
	ok := `{"type":"object","title":"T","description":"d","properties":{"s":{"type":"string","format":"email","minLength":1,"maxLength":9,"default":"x","examples":["a"]},
		"n":{"type":"number","minimum":0,"exclusiveMaximum":1},"a":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}},
		"required":["s"],"additionalProperties":false,"$schema":"https://json-schema.org/draft/2020-12/schema"}`
	if _, err := CompileWith([]byte(ok), Options{Strict: true}); err != nil {
		t.Errorf("strict supported keywords: %v", err)
	}
}

func TestCompileLimits(t *testing.T) {
	deep := strings.Repeat(`{"type":"array","items":`, MaxSchemaDepth+1) + `{}` + strings.Repeat(`}`, MaxSchemaDepth+1)
	if _, err := Compile([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("schema %d deep: %v", MaxSchemaDepth+1, err)
	}
	var wide strings.Builder
	wide.WriteString(`{"type":"object","properties":{`)
	for i := range 64 {
		if i > 0 {
			wide.WriteString(",")
		}
		fmt.Fprintf(&wide, `"p%d":{"type":"object","properties":{`, i)
		for j := range 64 {
			if j > 0 {
				wide.WriteString(",")
			}
			fmt.Fprintf(&wide, `"q%d":{"type":"integer"}`, j)
		}
		wide.WriteString(`}}`)
	}
	wide.WriteString(`}}`)
	if _, err := Compile([]byte(wide.String())); err == nil || !strings.Contains(err.Error(), "subschemas") {
		t.Errorf("%d subschemas: %v", 64*65, err)
	}
	// Each level doubles the smallest value: 2^13 copies of a required key.
	var double strings.Builder
	double.WriteString(`{"$defs":{"l0":{"type":"integer"}`)
	for i := 1; i <= 13; i++ {
		fmt.Fprintf(&double, `,"l%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/l%d"},"b":{"$ref":"#/$defs/l%d"}},"required":["a","b"]}`, i, i-1, i-1)
	}
	double.WriteString(`},"$ref":"#/$defs/l13"}`)
	if _, err := Compile([]byte(double.String())); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("exponential smallest value: %v", err)
	}
	for _, bad := range []string{
		`{"type":"string","minLength":5,"maxLength":4}`, `{"type":"string","maxLength":-1}`, `{"type":"string","minLength":1.5}`,
		`{"type":"integer","minimum":5,"maximum":4}`, `{"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2}`,
		`{"type":"array","minItems":"2"}`, `{"type":"number","minimum":"0"}`, `{"type":"string","const":"abc","maxLength":2}`,
		`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`,
	} {
		if _, err := Compile([]byte(bad)); err == nil {
			t.Errorf("Compile(%s): no error", bad)
		}
	}
}

// TestMinimalValues checks the smallest value of schemas and that an
// empty acceptor's completion is it.
func TestMinimalValues(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"integer","minimum":100}`:                                                                     `100`,
		`{"type":"integer","maximum":-5}`:                                                                      `-5`,
		`{"type":"number","exclusiveMinimum":0,"maximum":1}`:                                                   `1`,
		`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`:                                          `0.1`,
		`{"type":"number","minimum":0.25,"maximum":0.3}`:                                                       `0.3`,
		`{"type":"number","minimum":-0.001,"maximum":-0.0005}`:                                                 `-0.001`,
		`{"type":"string","minLength":3}`:                                                                      `"aaa"`,
		`{"type":"array","items":{"type":"integer","minimum":7},"minItems":2}`:                                 `[7,7]`,
		`{"type":"object","properties":{"b":{"type":"boolean"},"a":{"enum":["xy","z"]}},"required":["a","b"]}`: `{"a":"z","b":true}`,
		`{"anyOf":[{"type":"string","minLength":4},{"type":"integer","minimum":10}]}`:                          `10`,
		`{"enum":[123,"ab",null]}`:                                                                             `123`,
	} {
		g := mustCompile(t, schema)
		if got := string(g.root.minimal); got != want {
			t.Errorf("%s: smallest value %s, want %s", schema, got, want)
		}
		if got := string(NewAcceptor(g).Completion()); got != want {
			t.Errorf("%s: completion of nothing %s, want %s", schema, got, want)
		}
	}
}

// TestCompletionFromEveryPrefix completes every prefix of valid documents
// and checks the result is complete and matches the schema.
func TestCompletionFromEveryPrefix(t *testing.T) {
	docs := map[string][]string{
		"bounds": {`{"i":-3,"n":0.5,"s":"abc","a":[1,2],"e":5,"big":123456789012345678}`, `{ "big" : 1000 , "a":[9,9,9], "s":"東京x","n":2.5,"i":7}`},
		"person": {`{"name":"Ada","tags":["a","b\u00e9\n"],"kind":{"a":"x","b":[1,2]},"age":37,"score":1000.5}`},
		"tree":   {`{"children":[{"value":2,"children":[]},{"value":-3e2}],"value":1}`},
		"tight":  {`{"z":-1000,"x":[],"y":0.1}`},
	}
	for name, list := range docs {
		var schema any
		if err := json.Unmarshal([]byte(testSchemas[name]), &schema); err != nil {
			t.Fatal(err)
		}
		g := mustCompile(t, testSchemas[name])
		for _, doc := range list {
			for i := 0; i <= len(doc); i++ {
				a := NewAcceptor(g)
				if !a.Push([]byte(doc[:i])) {
					t.Fatalf("%s: prefix %q rejected", name, doc[:i])
				}
				c, ok := a.s.completion()
				if !ok {
					t.Fatalf("%s: no completion after %q", name, doc[:i])
				}
				full := doc[:i] + string(c)
				if !accepts(g, full) {
					t.Fatalf("%s: %q + completion %q is not accepted", name, doc[:i], c)
				}
				if err := validate(schema, decode(t, []byte(full)), schema); err != nil {
					t.Fatalf("%s: completed %q does not match: %v", name, full, err)
				}
			}
		}
	}
}

// TestBudget runs walks that call Budget before each token and checks
// every document ends within its budget and matches its schema. Budgets
// start just above the smallest document; half the walks pick tokens at
// random, half pick the token after which the completion is longest.
func TestBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	tokens, eos := randomVocab(rng, 1500)
	v, err := NewVocab(tokens, eos)
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, len(tokens))
	for _, name := range slices.Sorted(maps.Keys(testSchemas)) {
		schemaText := testSchemas[name]
		var schema any
		if err := json.Unmarshal([]byte(schemaText), &schema); err != nil {
			t.Fatal(err)
		}
		g := mustCompile(t, schemaText)
		for walk := range 20 {
			greedy := walk%2 == 1
			budget := len(g.root.minimal) + 1 + rng.IntN(40)
			c := NewConstraint(g, v)
			var out []byte
			for used := 0; ; used++ {
				if used >= budget {
					t.Fatalf("%s: budget %d spent at %q", name, budget, out)
				}
				c.Budget(budget-used, nil)
				for i := range logits {
					logits[i] = 0
				}
				if c.ApplyMask(logits) == 0 {
					t.Fatalf("%s: nothing allowed after %q", name, out)
				}
				var allowed []int
				for id, l := range logits {
					if !math.IsInf(float64(l), -1) {
						allowed = append(allowed, id)
					}
				}
				pick := allowed[rng.IntN(len(allowed))]
				if greedy {
					pick = longestAfter(c, allowed)
				}
				if err := c.Accept(pick); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if c.Finished() {
					break
				}
				out = append(out, tokens[pick]...)
			}
			if err := validate(schema, decode(t, out), schema); err != nil {
				t.Fatalf("%s: %s does not match: %v", name, out, err)
			}
		}
	}
}

// longestAfter returns the token of ids after which c's completion is
// longest.
func longestAfter(c *Constraint, ids []int) int {
	best, most := ids[0], -1
	for _, id := range ids {
		d := c.Clone()
		if d.Accept(id) != nil || d.Finished() {
			continue
		}
		if n := len(d.Completion()); n > most {
			best, most = id, n
		}
	}
	return best
}

// TestGrowthBound checks the bounds budgets rest on, on random walks:
// one byte lengthens a completion by at most the grammar's growth, and one
// token by at most that for its start and twice that for each of its
// bytes that can open something.
func TestGrowthBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	tokens, eos := randomVocab(rng, 1500)
	v, err := NewVocab(tokens, eos)
	if err != nil {
		t.Fatal(err)
	}
	mask := make([]bool, len(tokens))
	for _, name := range slices.Sorted(maps.Keys(testSchemas)) {
		g := mustCompile(t, testSchemas[name])
		for range 6 {
			c := NewConstraint(g, v)
			for step := 0; step < 40 && !c.Done(); step++ {
				before := len(c.Completion())
				c.Allowed(mask)
				var allowed []int
				for id, ok := range mask {
					if ok && !v.isEOS[id] {
						allowed = append(allowed, id)
					}
				}
				for _, id := range allowed {
					s := c.s
					for i, b := range tokens[id] {
						prev, _ := s.completion()
						if !s.step(b, nil) {
							t.Fatalf("%s: allowed token %q fails at byte %d", name, tokens[id], i)
						}
						if now, _ := s.completion(); len(now)-len(prev) > g.growth() {
							t.Fatalf("%s: byte %q after %q lengthens %q to %q, more than %d", name, b, tokens[id][:i], prev, now, g.growth())
						}
					}
					after, _ := s.completion()
					if bound := (1 + 2*int(v.structs[id])) * g.growth(); len(after)-before > bound {
						t.Fatalf("%s: token %q lengthens the completion by %d, more than %d", name, tokens[id], len(after)-before, bound)
					}
				}
				if err := c.Accept(allowed[rng.IntN(len(allowed))]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestTextRule(t *testing.T) {
	cases := []struct {
		schema   string
		ok, bad  []string
		minimal  string
		noString bool
	}{
		{schema: `{"type":"string"}`, ok: []string{"", "any\ntext <b>", "東京😀"}, bad: []string{"\xff", "\xe6\x9d"}},
		{schema: `{"type":"string","minLength":2,"maxLength":3}`, ok: []string{"ab", "東京x"}, bad: []string{"a", "abcd", "東京xy"}, minimal: "aa"},
		{schema: `{"enum":["red","green",3]}`, ok: []string{"red", "green"}, bad: []string{"re", "3", "blue"}, minimal: "red"},
		{schema: `{"type":["integer","string"],"maxLength":1}`, ok: []string{"a", ""}, bad: []string{"ab"}},
		{schema: `{"type":"integer"}`, noString: true},
		{schema: `{"enum":[1,2]}`, noString: true},
	}
	for _, tc := range cases {
		g := mustCompile(t, tc.schema)
		r := g.TextRule()
		if tc.noString {
			if r != nil {
				t.Errorf("%s: a text rule for a schema without strings", tc.schema)
			}
			continue
		}
		if r == nil {
			t.Fatalf("%s: no text rule", tc.schema)
		}
		run := func(s string) bool {
			x := r.Start()
			for i := 0; i < len(s); i++ {
				if !x.Step(s[i]) {
					return false
				}
			}
			return x.Complete()
		}
		for _, s := range tc.ok {
			if !run(s) {
				t.Errorf("%s: rejects %q", tc.schema, s)
			}
		}
		for _, s := range tc.bad {
			if run(s) {
				t.Errorf("%s: accepts %q", tc.schema, s)
			}
		}
		if got := r.Minimal(); got != tc.minimal {
			t.Errorf("%s: minimal %q, want %q", tc.schema, got, tc.minimal)
		}
		// Every prefix of an allowed text completes to an allowed text.
		for _, s := range tc.ok {
			for i := 0; i <= len(s); i++ {
				x := r.Start()
				for j := 0; j < i; j++ {
					x.Step(s[j])
				}
				full := s[:i] + string(x.Completion())
				if !run(full) || !utf8.ValidString(full) {
					t.Errorf("%s: %q completed to %q, which is not allowed", tc.schema, s[:i], full)
				}
			}
		}
	}
}

// TestWalkMatchesBruteForce compares Walk over a subset with a token by
// token check.
func TestWalkMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	tokens, eos := randomVocab(rng, 800)
	v, err := NewVocab(tokens, eos)
	if err != nil {
		t.Fatal(err)
	}
	sub := v.Subset(func(tok []byte) bool { return strings.ContainsAny(string(tok), "\"{") })
	// The automaton: bytes in non-decreasing order.
	step := func(s *byte, b byte) bool {
		if b < *s {
			return false
		}
		*s = b
		return true
	}
	for _, start := range []byte{0, '"', '{', 'a'} {
		m := make([]uint64, v.Words())
		Walk(sub, start, step, m)
		for id, tok := range tokens {
			want := len(tok) > 0 && v.TokenBytes(id) != nil && strings.ContainsAny(string(tok), "\"{")
			s := start
			for _, b := range tok {
				want = want && step(&s, b)
			}
			if got := m[id>>6]&(1<<(id&63)) != 0; got != want {
				t.Fatalf("start %q token %q: walk %v, brute force %v", start, tok, got, want)
			}
		}
	}
}

// TestTextRulePattern checks a raw text under a pattern: accepted, refused
// and completed.
func TestTextRulePattern(t *testing.T) {
	g := mustCompile(t, `{"type":"string","pattern":"^[a-z]+-\\d{2}$","maxLength":6}`)
	r := g.TextRule()
	run := func(s string) (Text, bool) {
		x := r.Start()
		for _, b := range []byte(s) {
			if !x.Step(b) {
				return x, false
			}
		}
		return x, true
	}
	for s, want := range map[string]bool{"ab-12": true, "abc-12": true, "abcd-12": false, "ab12": false, "ab-1": false} {
		x, ok := run(s)
		if got := ok && x.Complete(); got != want {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
	for _, prefix := range []string{"", "a", "abc-", "ab-1"} {
		x, ok := run(prefix)
		if !ok {
			t.Fatalf("%q refused", prefix)
		}
		full := prefix + string(x.Completion())
		if y, ok := run(full); !ok || !y.Complete() {
			t.Errorf("%q + completion %q = %q does not match", prefix, x.Completion(), full)
		}
	}
}

// TestPatternProperties checks patternProperties under strict and not: it
// compiles, a bad pattern names its path, a declared name a pattern also
// matches is refused under strict only, and completions from every prefix
// of documents with pattern keys end in documents the schema accepts.
func TestPatternProperties(t *testing.T) {
	for _, name := range []string{"patprops", "patmap", "patoverlap"} {
		if _, err := CompileWith([]byte(testSchemas[name]), Options{Strict: true}); err != nil {
			t.Errorf("strict %s: %v", name, err)
		}
	}
	var pe *PatternError
	if _, err := Compile([]byte(`{"type":"object","patternProperties":{"(?=x)":{}}}`)); !errors.As(err, &pe) || pe.Path != "#/patternProperties/(?=x)" {
		t.Errorf("lookahead pattern: error %v, want a PatternError at #/patternProperties/(?=x)", err)
	}
	if _, err := Compile([]byte(`{"type":"object","patternProperties":{"^x":5}}`)); err == nil {
		t.Error("a pattern's schema that is not one: no error")
	}
	overlap := `{"type":"object","properties":{"xa":{"type":"string"}},"patternProperties":{"^x":{"type":"integer"}}}`
	if _, err := CompileWith([]byte(overlap), Options{Strict: true}); err == nil || !strings.Contains(err.Error(), `"xa"`) {
		t.Errorf("strict overlap: error %v, want one naming \"xa\"", err)
	}
	g, err := Compile([]byte(overlap))
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(g, `{"xa":"s","xb":1}`) || accepts(g, `{"xa":1}`) || accepts(g, `{"xb":"s"}`) || accepts(g, `{"y":1}`) {
		t.Error("non-strict overlap: the declared property's schema, else the pattern's, else nothing")
	}
	req, err := Compile([]byte(`{"type":"object","patternProperties":{"^x":{"type":"integer"}},"required":["xy"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(req, `{"xy":1,"xz":2}`) || accepts(req, `{"xz":2}`) || accepts(req, `{"xy":"s"}`) {
		t.Error("a required name a pattern matches: required, with the pattern's schema")
	}
	for name, docs := range map[string][]string{
		"patprops":   {`{"x-ab":"abc","id":2,"n_7":1.5}`, `{"id":2,"x-q":""}`},
		"patmap":     {`{"ab":true,"abc":null,"abcd":5,"A":-1}`},
		"patoverlap": {`{"xa":1,"b":"s"}`},
	} {
		var schema any
		if err := json.Unmarshal([]byte(testSchemas[name]), &schema); err != nil {
			t.Fatal(err)
		}
		g := mustCompile(t, testSchemas[name])
		for _, doc := range docs {
			for i := 0; i <= len(doc); i++ {
				a := NewAcceptor(g)
				if !a.Push([]byte(doc[:i])) {
					t.Fatalf("%s: prefix %q refused", name, doc[:i])
				}
				out := a.Completion()
				full := doc[:i] + string(out)
				if !accepts(g, full) {
					t.Fatalf("%s: completion %q after %q is refused", name, out, doc[:i])
				}
				if err := validate(schema, decode(t, []byte(full)), schema); err != nil {
					t.Fatalf("%s: completed %s: %v", name, full, err)
				}
			}
		}
	}
}
