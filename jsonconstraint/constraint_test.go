package jsonconstraint

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

var testSchemas = map[string]string{
	"person": `{"type":"object","properties":{
		"name":{"type":"string"},"age":{"type":"integer"},
		"tags":{"type":"array","items":{"type":"string"}},
		"kind":{"enum":["red","green",1,null,{"b":[1,2],"a":"x"}]},
		"score":{"type":"number","minimum":0}},
		"required":["name","age"],"additionalProperties":false}`,
	"tree": `{"$defs":{"node":{"type":"object","properties":{
		"value":{"type":"number"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
		"required":["value"]}},"$ref":"#/$defs/node"}`,
	"union":    `{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]}]}`,
	"nullable": `{"type":["string","null"]}`,
	"map":      `{"type":"object","additionalProperties":{"type":"integer"}}`,
	"const":    `{"type":"object","properties":{"id":{"const":"a\"b"},"v":{"type":"array","items":{"type":"boolean"}}},"required":["id","v"]}`,
	"ignored":  `{"type":"string","minLength":3,"pattern":"^a","format":"email"}`,
	"empty":    `{}`,
	"patterns": `{"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},
		"tag":{"type":"string","pattern":"x","maxLength":4},"q":{"type":"string","pattern":"^a\"b\\\\c\\n+$"},
		"free":{"type":"string","pattern":"é|\\p{Greek}{2}","minLength":2}},"required":["id","tag","q","free"]}`,
	"openobj":  `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true,"required":["a","zz"]}`,
	"defsroot": `{"definitions":{"list":{"type":"array","items":{"$ref":"#"}}},"anyOf":[{"$ref":"#/definitions/list"},{"type":"null"}]}`,
	"bounds": `{"type":"object","properties":{
		"i":{"type":"integer","minimum":-3,"maximum":7},
		"n":{"type":"number","exclusiveMinimum":0,"maximum":2.5},
		"s":{"type":"string","minLength":3,"maxLength":5},
		"a":{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":2,"maxItems":3},
		"e":{"enum":[0,1,5,7],"minimum":1,"exclusiveMaximum":7},
		"big":{"type":"integer","minimum":1000}},
		"required":["i","n","s","a"],"additionalProperties":false}`,
	"patprops": `{"type":"object","properties":{"id":{"type":"integer"}},
		"patternProperties":{"^x-[a-z]+$":{"type":"string","maxLength":3},"^n_\\d+$":{"type":"number"}},"required":["id"]}`,
	"patmap": `{"type":"object","patternProperties":{"^[a-z]{2}$":{"type":"boolean"},"^[a-z]{3}$":{"type":"null"}},
		"additionalProperties":{"type":"integer"}}`,
	"patoverlap": `{"type":"object","patternProperties":{"a":{"type":"integer"},"b":{"type":"string"}},"additionalProperties":false}`,
	"tight": `{"type":"object","properties":{"x":{"type":"array","maxItems":0},"y":{"type":"number","minimum":0.1,"maximum":0.1},
		"z":{"type":"integer","maximum":-100,"minimum":-1000}},"required":["x","y","z"]}`,
}

func mustCompile(t testing.TB, schema string) *Grammar {
	t.Helper()
	g, err := Compile([]byte(schema))
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	return g
}

func accepts(g *Grammar, doc string) bool {
	a := NewAcceptor(g)
	return a.Push([]byte(doc)) && a.Complete()
}

func TestAcceptorAnyJSON(t *testing.T) {
	valid := []string{
		`0`, `-0`, `12`, `-1.5e+10`, `3E2`, `0.25`, `true`, `false`, `null`, `""`, `"a\"\\\/\b\f\n\r\t\u00e9\uD83D"`,
		`"東京 😀"`, `[]`, `{}`, `[1,[2,{"a":[]}],"x"]`, "{ \"a\" : 1 ,\n\t\"b\":[ ] }", ` 7`, `{"a":1,"a":2}`,
		`123456789012345678`, `1.123456789012345678e99`,
	}
	for _, doc := range valid {
		if !accepts(AnyJSON(), doc) {
			t.Errorf("rejects valid %q", doc)
		}
		if !json.Valid([]byte(doc)) {
			t.Errorf("test bug: %q is not JSON", doc)
		}
	}
	invalid := []string{
		``, ` `, `01`, `-`, `1.`, `.5`, `1e`, `+1`, `1 `, `[1,]`, `{"a"}`, `{"a":}`, `{,}`, `[`, `{"a":1,}`, `"abc`,
		`"\x"`, `"\u12G4"`, "\"a\x01\"", "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xe0\x80\x80\"", `tru`, `nul`,
		`truex`, `{"a\u0062":1}`, `[] []`, `1234567890123456789`, `1.1234567890123456789`, `1e123`,
		`{"a":1}` + strings.Repeat(" ", 1), "[" + strings.Repeat(" ", MaxWhitespace+1) + "]",
	}
	for _, doc := range invalid {
		if accepts(AnyJSON(), doc) {
			t.Errorf("accepts invalid %q", doc)
		}
	}
	if !accepts(AnyJSON(), "["+strings.Repeat(" ", MaxWhitespace)+"]") {
		t.Errorf("rejects %d spaces", MaxWhitespace)
	}
	if accepts(AnyObject(), `[1]`) || accepts(AnyObject(), `"x"`) || !accepts(AnyObject(), `{"k":[1,{"z":null}]}`) {
		t.Errorf("AnyObject accepts the wrong kinds")
	}
}

// TestAcceptorSound pushes random JSON-ish byte strings: whatever the
// acceptor takes as complete must be valid JSON.
func TestAcceptorSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"{", "}", "[", "]", "\"", ":", ",", " ", "0", "1", "-", ".", "e", "+", "true", "null", "a", "\\", "u", "é", "\xe6"}
	n, complete := 200000, 0
	if testing.Short() {
		n = 20000
	}
	for range n {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		doc := b.String()
		if accepts(AnyJSON(), doc) {
			complete++
			if !json.Valid([]byte(doc)) {
				t.Fatalf("accepts %q, which is not JSON", doc)
			}
		}
	}
	if complete < n/100 {
		t.Fatalf("only %d of %d random strings complete: the test exercises too little", complete, n)
	}
}

// randomValue generates a random JSON value.
func randomValue(rng *rand.Rand, depth int) any {
	k := rng.IntN(7)
	if depth > 3 {
		k = rng.IntN(4)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return json.Number([]string{"0", "-7", "12.5", "1e3", "-0.001", "123456789012345678"}[rng.IntN(6)])
	case 3:
		return []string{"", "abc", "q\"uote", "back\\slash", "new\nline", "東京", "😀", "\u0001", "<&>"}[rng.IntN(9)]
	case 4, 5:
		var a []any
		for range rng.IntN(4) {
			a = append(a, randomValue(rng, depth+1))
		}
		return a
	default:
		m := map[string]any{}
		for range rng.IntN(4) {
			m[[]string{"a", "b", "key", "東"}[rng.IntN(4)]] = randomValue(rng, depth+1)
		}
		return m
	}
}

// TestAcceptorComplete checks that valid documents are accepted, in
// compact and indented forms.
func TestAcceptorComplete(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		v := randomValue(rng, 0)
		compact, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		indented, _ := json.MarshalIndent(v, "", "  ")
		for _, doc := range [][]byte{compact, indented} {
			if !accepts(AnyJSON(), string(doc)) {
				t.Fatalf("rejects %q", doc)
			}
		}
	}
}

func TestSchemaAcceptance(t *testing.T) {
	tests := []struct {
		schema string
		ok     []string
		bad    []string
	}{
		{"person",
			[]string{`{"name":"Ada","age":37}`, `{"age":1,"name":"x","tags":["a",""],"kind":"red","score":2.5}`,
				`{"name":"","age":0,"kind":null}`, `{"name":"","age":0,"kind":1}`, `{"name":"","age":0,"kind":{"a":"x","b":[1,2]}}`},
			[]string{`{"name":"Ada"}`, `{"name":"Ada","age":3.5}`, `{"name":"Ada","age":3,"x":1}`, `{"name":1,"age":3}`,
				`{"name":"a","age":1,"name":"b"}`, `{"name":"a","age":1,"kind":"blue"}`, `{"name":"a","age":1,"kind":2}`,
				`{"name":"a","age":1,"tags":[1]}`, `[]`, `{"name":"a","age":1,"score":-0.5}`, `{"name":"a","age":1,"kind":{"b":[1,2],"a":"x"}}`}},
		{"tree",
			[]string{`{"value":1}`, `{"value":1,"children":[{"value":2,"children":[]},{"value":-3e2}]}`},
			[]string{`{"children":[]}`, `{"value":1,"children":[{}]}`, `{"value":"1"}`}},
		{"union",
			[]string{`"s"`, `-5`, `{"x":true}`},
			[]string{`1.5`, `null`, `{}`, `{"x":1}`, `[]`}},
		{"nullable", []string{`"a"`, `null`}, []string{`1`, `true`}},
		{"map", []string{`{}`, `{"a":1,"b":-2}`}, []string{`{"a":"x"}`, `{"a":1.5}`}},
		{"const", []string{`{"id":"a\"b","v":[true,false]}`}, []string{`{"id":"ab","v":[]}`, `{"v":[]}`}},
		{"ignored", []string{`"anything"`, `"abc"`}, []string{`1`, `"ab"`, `"xyz"`}}, // the pattern is enforced; format is not
		{"bounds",
			[]string{`{"i":-3,"n":0.5,"s":"abc","a":[1,2],"e":5,"big":123456789012345678}`, `{"i":7,"n":2.5,"s":"東京x","a":[9,9,9],"e":1,"big":1000}`,
				`{"i":0,"n":1,"s":"abcde","a":[0,0]}`, `{"i":-0,"n":0.0001,"s":"a\nb","a":[1,2,3]}`},
			[]string{`{"i":-4,"n":1,"s":"abc","a":[1,2]}`, `{"i":8,"n":1,"s":"abc","a":[1,2]}`, `{"i":1,"n":0,"s":"abc","a":[1,2]}`,
				`{"i":1,"n":2.51,"s":"abc","a":[1,2]}`, `{"i":1,"n":1,"s":"ab","a":[1,2]}`, `{"i":1,"n":1,"s":"abcdef","a":[1,2]}`,
				`{"i":1,"n":1,"s":"abc","a":[1]}`, `{"i":1,"n":1,"s":"abc","a":[1,2,3,4]}`, `{"i":1.5,"n":1,"s":"abc","a":[1,2]}`,
				`{"i":1,"n":1e0,"s":"abc","a":[1,2]}`, `{"i":1,"n":1,"s":"a\u0062c","a":[1,2]}`, `{"i":1,"n":1,"s":"abc","a":[1,2],"e":7}`,
				`{"i":1,"n":1,"s":"abc","a":[1,2],"e":0}`, `{"i":1,"n":1,"s":"abc","a":[1,2],"big":1234567890123456789}`}},
		{"tight", []string{`{"x":[],"y":0.1,"z":-100}`}, []string{`{"x":[1],"y":0.1,"z":-100}`, `{"x":[],"y":0,"z":-100}`, `{"x":[],"y":0.1,"z":-99}`}},
		{"empty", []string{`1`, `{"a":[null]}`, `"x"`}, []string{`{`}},
		{"patterns", []string{`{"id":"AB-123","tag":"x","q":"a\"b\\c\n","free":"café"}`, `{"id":"ZZ-000","tag":"_x__","q":"a\"b\\c\n\n","free":"αβ"}`},
			[]string{`{"id":"AB-1234","tag":"x","q":"a\"b\\c\n","free":"café"}`, `{"id":"AB-123","tag":"xyzzy","q":"a\"b\\c\n","free":"café"}`,
				`{"id":"AB-123","tag":"x","q":"a\"b\\c","free":"café"}`, `{"id":"AB-123","tag":"x","q":"a\"b\\c\n","free":"é"}`,
				`{"id":"AB-123","tag":"x","q":"a\u0022b\\c\n","free":"café"}`}},
		{"openobj", []string{`{"a":1,"zz":[],"q":"r"}`}, []string{`{"a":1}`, `{"a":"x","zz":1}`}},
		{"patprops", []string{`{"id":1}`, `{"x-ab":"abc","id":2,"n_7":1.5,"x-q":""}`},
			[]string{`{"x-ab":"abc"}`, `{"id":1,"x-ab":"abcd"}`, `{"id":1,"x-AB":"a"}`, `{"id":1,"n_7":"a"}`, `{"id":1,"y":1}`,
				`{"id":1,"id":2}`}},
		{"patmap", []string{`{"ab":true,"abc":null,"abcd":5,"A":-1}`, `{}`},
			[]string{`{"ab":1}`, `{"abc":true}`, `{"abcd":null}`}},
		{"patoverlap", []string{`{"xa":1,"b":"s"}`, `{}`},
			[]string{`{"ab":1}`, `{"ab":"s"}`, `{"c":1}`, `{"a":"s"}`}},
		{"defsroot", []string{`null`, `[]`, `[null,[[]]]`}, []string{`1`, `[1]`}},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			g := mustCompile(t, testSchemas[tc.schema])
			var schema any
			if err := json.Unmarshal([]byte(testSchemas[tc.schema]), &schema); err != nil {
				t.Fatal(err)
			}
			for _, doc := range tc.ok {
				if !accepts(g, doc) {
					t.Errorf("rejects %s", doc)
				}
				if err := validate(schema, decode(t, []byte(doc)), schema); err != nil {
					t.Errorf("test bug: %s does not match: %v", doc, err)
				}
			}
			for _, doc := range tc.bad {
				if accepts(g, doc) {
					t.Errorf("accepts %s", doc)
				}
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	bad := []string{
		`not json`, `5`, `{"type":"strin"}`, `{"type":7}`, `{"type":[]}`, `{"enum":[]}`, `{"enum":5}`,
		`{"type":"string","enum":[1,2]}`, `{"anyOf":[]}`, `{"$ref":"#/$defs/missing"}`, `{"$ref":"http://x/y"}`,
		`{"type":"object","properties":{"a":{}},"required":["b"]}`, `{"required":[1]}`,
		`{"properties":{"a\"b":{}}}`, `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	}
	for _, s := range bad {
		if _, err := Compile([]byte(s)); err == nil {
			t.Errorf("Compile(%s): no error", s)
		}
	}
	many := `{"type":"object","properties":{`
	for i := range 65 {
		if i > 0 {
			many += ","
		}
		many += `"p` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":{}`
	}
	if _, err := Compile([]byte(many + `}}`)); err == nil {
		t.Errorf("65 properties: no error")
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range testSchemas {
		f.Add(s, "{}")
	}
	f.Fuzz(func(t *testing.T, schema, doc string) {
		g, err := Compile([]byte(schema))
		if err != nil {
			return
		}
		if accepts(g, doc) && !json.Valid([]byte(doc)) {
			t.Fatalf("schema %s accepts %q, which is not JSON", schema, doc)
		}
	})
}

// walk generates one document by a random walk over allowed tokens,
// checking each mask against a token-by-token reference when check is set.
// After budget tokens it steers to the shortest completion.
func walk(t *testing.T, rng *rand.Rand, g *Grammar, v *Vocab, tokens [][]byte, eos []int, budget int, check func(step int) bool) []byte {
	t.Helper()
	c := NewConstraint(g, v)
	mask := make([]bool, len(tokens))
	logits := make([]float32, len(tokens)+3)
	byteToken := map[byte]int{}
	for id, tok := range tokens {
		if len(tok) == 1 {
			if _, ok := byteToken[tok[0]]; !ok {
				byteToken[tok[0]] = id
			}
		}
	}
	var out, plan []byte
	for step := 0; ; step++ {
		if step > budget+500 {
			t.Fatalf("no end after %d tokens: %q", step, out)
		}
		n := c.Allowed(mask)
		for i := range logits {
			logits[i] = 1
		}
		if m := c.ApplyMask(logits); m != n {
			t.Fatalf("ApplyMask allows %d, Allowed %d", m, n)
		}
		for i := range logits {
			if (i < len(mask) && mask[i]) != !math.IsInf(float64(logits[i]), -1) {
				t.Fatalf("ApplyMask and Allowed disagree on token %d", i)
			}
		}
		if n == 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		if check != nil && check(step) {
			for id, tok := range tokens {
				want := false
				if len(tok) > 0 {
					a := Acceptor{s: c.s}
					want = a.Push(tok)
				}
				for _, e := range eos {
					if id == e {
						want = c.Done()
					}
				}
				if mask[id] != want {
					t.Fatalf("after %q: token %d %q allowed=%v, reference says %v", out, id, tok, mask[id], want)
				}
			}
		}
		var pick int
		switch {
		case c.Done() && (step >= budget || rng.IntN(4) == 0):
			pick = eos[rng.IntN(len(eos))]
		case step >= budget:
			if len(plan) == 0 {
				var ok bool
				if plan, ok = c.s.completion(); !ok || len(plan) == 0 {
					t.Fatalf("no completion from %q", out)
				}
			}
			pick = byteToken[plan[0]]
			plan = plan[1:]
		default:
			var allowed []int
			for id, ok := range mask {
				if ok {
					allowed = append(allowed, id)
				}
			}
			pick = allowed[rng.IntN(len(allowed))]
		}
		if !mask[pick] {
			t.Fatalf("after %q: picked token %d %q is not allowed", out, pick, tokens[pick])
		}
		if err := c.Accept(pick); err != nil {
			t.Fatalf("after %q: Accept(%d): %v", out, pick, err)
		}
		if c.Finished() {
			return out
		}
		out = append(out, tokens[pick]...)
	}
}

func checkDoc(t *testing.T, schemaText string, out []byte) {
	t.Helper()
	v := decode(t, out)
	var schema any
	if err := json.Unmarshal([]byte(schemaText), &schema); err != nil {
		t.Fatal(err)
	}
	if err := validate(schema, v, schema); err != nil {
		t.Fatalf("output %s does not match the schema: %v", out, err)
	}
}

func TestRandomWalkRandomVocab(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	tokens, eos := randomVocab(rng, 1500)
	v, err := NewVocab(tokens, eos)
	if err != nil {
		t.Fatal(err)
	}
	walks := 12
	if testing.Short() {
		walks = 3
	}
	for name, schema := range testSchemas {
		g := mustCompile(t, schema)
		for range walks {
			out := walk(t, rng, g, v, tokens, eos, rng.IntN(60), func(int) bool { return true })
			checkDoc(t, schema, out)
		}
		_ = name
	}
	for range walks {
		out := walk(t, rng, AnyObject(), v, tokens, eos, rng.IntN(60), func(int) bool { return true })
		if _, ok := decode(t, out).(map[string]any); !ok {
			t.Fatalf("json_object output %s is not an object", out)
		}
	}
}

func TestRandomWalkQwenVocab(t *testing.T) {
	q := loadQwen3()
	if q.err != nil {
		t.Fatal(q.err)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	walks := 3
	if testing.Short() {
		walks = 1
	}
	for name, schema := range testSchemas {
		g := mustCompile(t, schema)
		for range walks {
			// Check the whole mask against the reference on a few steps.
			out := walk(t, rng, g, q.vocab, q.tokens, q.eos, 5+rng.IntN(30), func(step int) bool { return step%7 == 0 })
			checkDoc(t, schema, out)
			t.Logf("%s: %.200s", name, out)
		}
	}
}

func TestAcceptErrors(t *testing.T) {
	tokens := [][]byte{[]byte("{"), []byte("}"), []byte("x"), nil, []byte("{}")}
	v, err := NewVocab(tokens, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	c := NewConstraint(AnyObject(), v)
	if err := c.Accept(2); err == nil {
		t.Fatal("accepted x at the start of an object")
	}
	if err := c.Accept(3); err == nil {
		t.Fatal("accepted EOS at the start")
	}
	if err := c.Accept(99); err == nil {
		t.Fatal("accepted a token outside the vocabulary")
	}
	if err := c.Accept(0); err != nil {
		t.Fatal(err)
	}
	d := c.Clone()
	if err := c.Accept(1); err != nil || !c.Done() {
		t.Fatalf("Accept(}) = %v, done %v", err, c.Done())
	}
	if d.Done() {
		t.Fatal("clone moved with the original")
	}
	mask := make([]bool, len(tokens))
	if n := c.Allowed(mask); n != 1 || !mask[3] {
		t.Fatalf("after {}: %d allowed %v, want only EOS", n, mask)
	}
	if err := c.Accept(3); err != nil || !c.Finished() {
		t.Fatalf("Accept(EOS) = %v", err)
	}
	if err := c.Accept(1); err == nil {
		t.Fatal("accepted a token after EOS")
	}
	if n := c.Allowed(mask); n != 0 {
		t.Fatalf("%d tokens allowed after EOS", n)
	}
	if _, err := NewVocab(tokens, []int{7}); err == nil {
		t.Fatal("NewVocab accepted an EOS id outside the vocabulary")
	}
}
