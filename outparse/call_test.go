package outparse

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/govinfer/govinfer/grammar"
	"github.com/govinfer/govinfer/grammar/lark"
	"github.com/govinfer/govinfer/internal/schemacheck"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/tokenizer"
)

type callVocabs struct {
	tok *tokenizer.Tokenizer
	cv  *CallVocab
	v   *jsonconstraint.Vocab
	eos []int
	err error
}

var loadCallVocab = sync.OnceValue(func() callVocabs {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		return callVocabs{err: err}
	}
	var eos []int
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, _ := tok.TokenID(s)
		eos = append(eos, id)
	}
	cv, err := NewCallVocab(tok, eos)
	if err != nil {
		return callVocabs{err: err}
	}
	return callVocabs{tok: tok, cv: cv, v: cv.Vocab(), eos: eos}
})

func callVocab(t *testing.T) callVocabs {
	t.Helper()
	cv := loadCallVocab()
	if cv.err != nil {
		t.Fatal(cv.err)
	}
	return cv
}

// generation is the result of driving a CallConstraint.
type generation struct {
	text   string
	tokens int
	eos    bool // ended with an end-of-sequence token
}

// drive samples uniformly among the allowed tokens (the hardest case for
// budgets: long values) until an end-of-sequence token or maxTokens,
// feeding prefix first. Every check-th step it compares the mask with a
// token-by-token reference.
func drive(t *testing.T, cv callVocabs, c *CallConstraint, rng *rand.Rand, maxTokens int, prefix []int, check int) generation {
	t.Helper()
	return generate(t, cv, c, maxTokens, func(step int, allowed []int, after string) int {
		if check > 0 && step%check == 0 {
			checkMask(t, cv, c, allowed, after)
		}
		pick := allowed[rng.IntN(len(allowed))]
		if step < len(prefix) {
			pick = prefix[step]
			if !slices.Contains(allowed, pick) {
				t.Fatalf("prefix token %d %q not allowed after %q", pick, cv.v.TokenBytes(pick), after)
			}
		}
		return pick
	})
}

// generate runs c until an end-of-sequence token or maxTokens, taking at
// each step the token choose picks among the allowed ones.
func generate(t *testing.T, cv callVocabs, c *CallConstraint, maxTokens int, choose func(step int, allowed []int, after string) int) generation {
	t.Helper()
	logits := make([]float32, cv.v.Size()+7)
	var out strings.Builder
	for step := 0; step < maxTokens; step++ {
		pick := choose(step, allowedTokens(t, c, logits, out.String()), out.String())
		if err := c.Accept(pick); err != nil {
			t.Fatalf("after %q: %v", out.String(), err)
		}
		if cv.v.IsEOS(pick) {
			return generation{text: out.String(), tokens: step + 1, eos: true}
		}
		out.Write(cv.v.TokenBytes(pick))
	}
	return generation{text: out.String(), tokens: maxTokens}
}

// allowedTokens runs c's logit processor on zeroed logits and returns the
// ids it leaves allowed; it fails when there are none.
func allowedTokens(t *testing.T, c *CallConstraint, logits []float32, after string) []int {
	t.Helper()
	clear(logits)
	c.Process(logits)
	var allowed []int
	for id, l := range logits {
		if !math.IsInf(float64(l), -1) {
			allowed = append(allowed, id)
		}
	}
	if len(allowed) == 0 {
		t.Fatalf("nothing allowed after %q", after)
	}
	return allowed
}

// stepToken advances s by a token's bytes under g; false when one of them
// cannot come.
func stepToken(g *CallGrammar, s callState, tb []byte) (callState, bool) {
	for _, b := range tb {
		if !g.step(&s, b) {
			return s, false
		}
	}
	return s, true
}

// checkMask compares the allowed tokens with stepping each token's bytes.
func checkMask(t *testing.T, cv callVocabs, c *CallConstraint, allowed []int, after string) {
	t.Helper()
	want := map[int]bool{}
	for id := range cv.v.Size() {
		if cv.v.IsEOS(id) {
			if c.eosAllowed() {
				want[id] = true
			}
			continue
		}
		tb := cv.v.TokenBytes(id)
		if len(tb) == 0 {
			continue
		}
		if !c.forced.Done() {
			f := c.forced
			if f.Accept(cv.v, id) == nil {
				want[id] = true
			}
			continue
		}
		if _, ok := stepToken(c.g, c.s, tb); ok {
			want[id] = true
		}
	}
	if len(want) != len(allowed) {
		t.Fatalf("after %q: %d tokens allowed, the reference allows %d", after, len(allowed), len(want))
	}
	for _, id := range allowed {
		if !want[id] {
			t.Fatalf("after %q: token %d %q allowed, the reference refuses it", after, id, cv.v.TokenBytes(id))
		}
	}
}

// randomTools returns n tools with random parameter schemas.
func randomTools(rng *rand.Rand, n int) ([]CallTool, map[string][]byte) {
	var tools []CallTool
	schemas := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("tool_%d", i)
		params, _ := json.Marshal(schemacheck.RandomParameters(rng))
		tools = append(tools, CallTool{Name: name, Parameters: params})
		schemas[name] = params
	}
	return tools, schemas
}

// checkCall parses a generation and validates its one call.
func checkCall(t *testing.T, g *CallGrammar, gen generation, thinking bool, names []string, schemas map[string][]byte) Call {
	t.Helper()
	res := ParseAll(gen.text, Options{Thinking: thinking, Tools: g.Schemas()})
	if len(res.ToolCalls) != 1 {
		t.Fatalf("%d calls in %q", len(res.ToolCalls), gen.text)
	}
	call := res.ToolCalls[0]
	if !slices.Contains(names, call.Function.Name) {
		t.Fatalf("called %q, want one of %v", call.Function.Name, names)
	}
	if err := schemacheck.ValidateJSON(schemas[call.Function.Name], []byte(call.Function.Arguments)); err != nil {
		t.Fatalf("arguments %s of %s do not match %s: %v\noutput %q", call.Function.Arguments, call.Function.Name, schemas[call.Function.Name], err, gen.text)
	}
	if strings.TrimSpace(res.Content) != "" {
		t.Fatalf("content %q beside a forced call", res.Content)
	}
	return call
}

func TestCallForcedRandomTools(t *testing.T) {
	cv := callVocab(t)
	rng := rand.New(rand.NewPCG(41, 42))
	runs := 24
	if testing.Short() {
		runs = 8
	}
	for run := range runs {
		tools, schemas := randomTools(rng, 1+rng.IntN(4))
		var names []string
		for _, tl := range tools {
			names = append(names, tl.Name)
		}
		o := CallOptions{Tools: tools, Force: true, Thinking: rng.IntN(3) == 0}
		if rng.IntN(2) == 0 {
			o.Function = names[rng.IntN(len(names))]
			names = []string{o.Function}
		}
		g, err := NewCallGrammar(cv.cv, o)
		if err != nil {
			t.Fatal(err)
		}
		maxTokens := 120 + rng.IntN(200)
		check := 0
		if run%6 == 0 {
			check = 23
		}
		c := g.NewConstraint(maxTokens, 24)
		gen := drive(t, cv, c, rng, maxTokens, nil, check)
		if !gen.eos {
			t.Fatalf("run %d: no end within %d tokens: %q", run, maxTokens, gen.text)
		}
		call := checkCall(t, g, gen, o.Thinking, names, schemas)
		// The budget counts the reasoning; the tokens of "\n</think>" follow it.
		if o.Thinking && c.thought > 24+len("\n</think>") {
			t.Errorf("run %d: %d reasoning tokens, budget 24", run, c.thought)
		}
		t.Logf("run %d: %d tokens, %s(%s)", run, gen.tokens, call.Function.Name, call.Function.Arguments)
	}
}

// TestCallTightBudget gives each call just enough tokens for its smallest
// form (and a little more): the completion must still fit.
func TestCallTightBudget(t *testing.T) {
	cv := callVocab(t)
	rng := rand.New(rand.NewPCG(43, 44))
	for range 15 {
		tools, schemas := randomTools(rng, 1)
		g, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		f := cv.v.Force(g.completion(g.start()), cv.cv.encode)
		need := f.Tokens() + 1 + g.margin
		gen := drive(t, cv, g.NewConstraint(need, 0), rng, need, nil, 0)
		if !gen.eos {
			t.Fatalf("budget %d: no end: %q", need, gen.text)
		}
		checkCall(t, g, gen, false, []string{tools[0].Name}, schemas)
	}
}

func TestCallAutoStrict(t *testing.T) {
	cv := callVocab(t)
	rng := rand.New(rand.NewPCG(45, 46))
	params := []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7},
		"units":{"enum":["c","f"]}},"required":["city","days"],"additionalProperties":false}`)
	tools := []CallTool{{Name: "get_weather", Parameters: params, Strict: true}, {Name: "search", Parameters: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}
	g, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Thinking: true})
	if err != nil {
		t.Fatal(err)
	}
	prefix := cv.tok.Encode("I should check the weather.\n</think>\n\nLet me look.\n\n<tool_call>\n<function=get_weather>")
	for range 8 {
		c := g.NewConstraint(400, 0)
		if !c.eosAllowed() {
			t.Fatal("auto: the end of sequence is not allowed at the start")
		}
		gen := drive(t, cv, c, rng, 400, prefix, 0)
		res := ParseAll(gen.text, Options{Thinking: true, Tools: g.Schemas()})
		if len(res.ToolCalls) == 0 {
			t.Fatalf("no call in %q", gen.text)
		}
		call := res.ToolCalls[0]
		if err := schemacheck.ValidateJSON(params, []byte(call.Function.Arguments)); err != nil {
			t.Fatalf("strict call %s: %v\n%q", call.Function.Arguments, err, gen.text)
		}
		// After a constrained call only another call or the end may come.
		if res.Reasoning != "I should check the weather." || res.Content != "Let me look." {
			t.Fatalf("reasoning %q, content %q", res.Reasoning, res.Content)
		}
		for _, c := range res.ToolCalls[1:] {
			if err := schemacheck.ValidateJSON(params, []byte(c.Function.Arguments)); c.Function.Name == "get_weather" && err != nil {
				t.Fatalf("second strict call %s: %v", c.Function.Arguments, err)
			}
		}
	}
	// An unconstrained tool's call is left alone.
	c := g.NewConstraint(50, 0)
	drive(t, cv, c, rng, 0, nil, 0)
	for _, id := range cv.tok.Encode("<tool_call>\n<function=search>\n<parameter=q>\nanything") {
		if err := c.Accept(id); err != nil {
			t.Fatalf("unconstrained call: %v", err)
		}
	}
	if c.s.phase != phFreeCall || !c.eosAllowed() {
		t.Fatalf("inside an unconstrained call: phase %d", c.s.phase)
	}
}

func TestCallGrammarErrors(t *testing.T) {
	cv := callVocab(t)
	obj := []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	var ke *jsonconstraint.KeywordError
	for _, tc := range []struct {
		o    CallOptions
		want string
	}{
		{CallOptions{Tools: []CallTool{{Name: "a>b", Parameters: obj}}, Force: true}, "holds '>'"},
		{CallOptions{Tools: []CallTool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"x>y":{}}}`)}}, Force: true}, "parameter name"},
		{CallOptions{Tools: []CallTool{{Name: "f", Parameters: obj}}, Force: true, Function: "g"}, `no tool is named "g"`},
		{CallOptions{Force: true}, "no tools"},
		{CallOptions{Tools: []CallTool{{Name: "f", Parameters: []byte(`{"type":"string"}`)}}, Force: true}, "does not allow an object"},
		{CallOptions{Tools: []CallTool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}}`), Strict: true}}}, `keyword "multipleOf"`},
		{CallOptions{Tools: make([]CallTool, MaxCallTools+1), Force: true}, "at most 128"},
	} {
		_, err := NewCallGrammar(cv.cv, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o.Function, err, tc.want)
		}
		if strings.Contains(tc.want, "keyword") && !errors.As(err, &ke) {
			t.Errorf("strict keyword error %v is not a *KeywordError", err)
		}
	}
	// Not strict: the unsupported keyword is ignored.
	if _, err := NewCallGrammar(cv.cv, CallOptions{Tools: []CallTool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"string","pattern":"^a"}}}`)}}, Force: true}); err != nil {
		t.Errorf("non-strict pattern: %v", err)
	}
}

func TestWatcher(t *testing.T) {
	w := newWatcher(valueEnds...)
	text := "a </paramete</parameter> x<tool_call <tool_call>"
	var hits []int
	var s int16
	for i := 0; i < len(text); i++ {
		var h int
		if s, h = w.step(s, text[i]); h >= 0 {
			hits = append(hits, i)
		}
	}
	if want := []int{23, 47}; !slices.Equal(hits, want) {
		t.Fatalf("hits at %v, want %v", hits, want)
	}
}

func TestThinkingOpened(t *testing.T) {
	if !ThinkingOpened("<|im_start|>assistant\n<think>\n") || ThinkingOpened("<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Fatal("ThinkingOpened misreads the Qwen3.5 generation prompts")
	}
}

// driveGreedy drives c like drive, but at each step samples the token
// that makes the completion take the most tokens, among the tokens that
// can open something or leave a character unfinished (and a sample of the
// others); it fails if any token lengthens the completion by more than the
// grammar's margin, the room plan keeps for one token.
func driveGreedy(t *testing.T, cv callVocabs, c *CallConstraint, rng *rand.Rand, maxTokens int) generation {
	t.Helper()
	tokens := func(s callState) int {
		f := cv.v.Force(c.g.completion(s), cv.cv.encode)
		return f.Tokens()
	}
	return generate(t, cv, c, maxTokens, func(_ int, allowed []int, after string) int {
		pick := allowed[rng.IntN(len(allowed))]
		if !c.forced.Done() {
			return pick
		}
		before, most := tokens(c.s), -1
		for _, id := range allowed {
			tb := cv.v.TokenBytes(id)
			if cv.v.IsEOS(id) || utf8.Valid(tb) && !strings.ContainsAny(string(tb), "{[,:\"<>=\n\\") && rng.IntN(50) != 0 {
				continue
			}
			s, ok := stepToken(c.g, c.s, tb)
			if !ok {
				continue
			}
			if n := tokens(s); n > most {
				most, pick = n, id
			}
		}
		if most-before > c.g.margin {
			t.Fatalf("after %q: token %q lengthens the completion by %d tokens, more than the margin %d", after, cv.v.TokenBytes(pick), most-before, c.g.margin)
		}
		return pick
	})
}

// TestCallBudgetGreedy checks the margin plan relies on against a sampler
// that lengthens the call as fast as it can, on random tools and on
// schemas whose smallest values are long, with budgets just above the
// smallest call.
func TestCallBudgetGreedy(t *testing.T) {
	cv := callVocab(t)
	rng := rand.New(rand.NewPCG(47, 48))
	long := strings.Repeat("k", 40)
	obj := func(key, value string) string {
		return `{"type":"object","properties":{"` + key + `":` + value + `},"required":["` + key + `"]}`
	}
	hand := []string{
		obj("a", `{"type":"array","items":`+obj(long, obj(long+"y", `{"type":"integer"}`))+`}`),
		obj("a", `{"type":"array","minItems":2,"items":{"type":"array","minItems":2,"items":`+obj(long, `{"type":"string","minLength":5}`)+`}}`),
		obj("q", `{"type":"array","items":`+obj(long, `{"type":"array","minItems":3,"items":`+obj(long+"z", `{"type":"string","minLength":3}`)+`}`)+`}`),
		// Eight required strings: stopping inside a character leaves a
		// completion of continuation bytes and seven parameters.
		`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"},` +
			`"e":{"type":"string"},"f":{"type":"string"},"g":{"type":"string"},"h":{"type":"string"}},"required":["a","b","c","d","e","f","g","h"]}`,
	}
	runs := 40
	if testing.Short() {
		runs = 16
	}
	for run := range runs {
		var tools []CallTool
		schemas := map[string][]byte{}
		if run < 2*len(hand) {
			p := hand[run%len(hand)]
			tools = []CallTool{{Name: "f", Parameters: json.RawMessage(p)}}
			schemas["f"] = []byte(p)
		} else {
			tools, schemas = randomTools(rng, 1)
		}
		g, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		f := cv.v.Force(g.completion(g.start()), cv.cv.encode)
		budget := f.Tokens() + 1 + g.margin + rng.IntN(40)
		gen := driveGreedy(t, cv, g.NewConstraint(budget, 0), rng, budget)
		if !gen.eos {
			t.Fatalf("run %d: no end within %d tokens: %q", run, budget, gen.text)
		}
		checkCall(t, g, gen, false, []string{tools[0].Name}, schemas)
	}
}

// TestCallAutoWithAnswerFormat drives the auto grammar with an answer
// format (a JSON schema, then a regex), with and without thinking, and
// checks masks against stepping each token: the turn is calls that follow
// their schemas, opened where the answer would start, or an answer the
// format accepts whole, within the budget.
func TestCallAutoWithAnswerFormat(t *testing.T) {
	cv := callVocab(t)
	rng := rand.New(rand.NewPCG(47, 48))
	params := []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}`)
	tools := []CallTool{{Name: "get_weather", Parameters: params}}
	schema := []byte(`{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99}},"required":["ok","n"],"additionalProperties":false}`)
	js, err := jsonconstraint.Compile(schema)
	if err != nil {
		t.Fatal(err)
	}
	re, err := grammar.Regex(`(yes|no), [a-z]{1,8}\.`)
	if err != nil {
		t.Fatal(err)
	}
	reCheck := regexp.MustCompile(`^(yes|no), [a-z]{1,8}\.$`)
	for _, thinking := range []bool{false, true} {
		for _, format := range []string{"json", "regex"} {
			o := CallOptions{Tools: tools, Auto: true, Thinking: thinking}
			if format == "json" {
				o.ContentJSON = js
			} else {
				o.ContentGrammar = re
			}
			g, err := NewCallGrammar(cv.cv, o)
			if err != nil {
				t.Fatal(err)
			}
			var think []int
			if thinking {
				think = cv.tok.Encode("Hmm.\n</think>\n\n")
			}
			calls, answers := 0, 0
			for k := range 8 {
				c := g.NewConstraint(300, 0)
				prefix := think
				if k%2 == 1 { // open a call where the answer would start
					prefix = append(slices.Clone(think), cv.tok.Encode("<tool_call>")...)
				}
				gen := drive(t, cv, c, rng, 300, prefix, 3)
				res := ParseAll(gen.text, Options{Thinking: thinking, Tools: g.Schemas()})
				what := fmt.Sprintf("%s, thinking %v: %q", format, thinking, gen.text)
				if !gen.eos {
					t.Fatalf("%s: no end within the budget", what)
				}
				if len(res.ToolCalls) > 0 {
					if strings.TrimSpace(res.Content) != "" {
						t.Fatalf("%s: calls and an answer", what)
					}
					for _, call := range res.ToolCalls {
						if err := schemacheck.ValidateJSON(params, []byte(call.Function.Arguments)); err != nil {
							t.Fatalf("%s: call %s: %v", what, call.Function.Arguments, err)
						}
					}
					calls++
					continue
				}
				switch format {
				case "json":
					if err := schemacheck.ValidateJSON(schema, []byte(res.Content)); err != nil {
						t.Fatalf("%s: answer: %v", what, err)
					}
				default:
					if !reCheck.MatchString(res.Content) {
						t.Fatalf("%s: answer does not match", what)
					}
				}
				answers++
			}
			if calls == 0 || answers == 0 {
				t.Errorf("%s, thinking %v: %d calls, %d answers", format, thinking, calls, answers)
			}
		}
	}
	// A forced call takes no answer format: the call is the answer.
	g, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Force: true, ContentJSON: js})
	if err != nil {
		t.Fatal(err)
	}
	if g.content() {
		t.Error("a forced call has an answer format")
	}
	if _, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Auto: true, ContentJSON: js, ContentGrammar: re}); err == nil {
		t.Error("two answer formats: no error")
	}
}

// TestCallCustomGrammar drives forced calls of a custom tool whose input
// follows a grammar (the patch grammar of the Lark tests), masks checked
// against each token: the input is a whole patch, or a prefix of one when
// the budget ran out first.
func TestCallCustomGrammar(t *testing.T) {
	cv := callVocab(t)
	src, err := os.ReadFile("../grammar/lark/testdata/patch.lark")
	if err != nil {
		t.Fatal(err)
	}
	g, err := lark.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	tools := []CallTool{{Name: "apply_patch", Parameters: []byte(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`),
		Grammar: g, GrammarParam: "input"}}
	cg, err := NewCallGrammar(cv.cv, CallOptions{Tools: tools, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(49, 50))
	// Half the calls start from the value's first byte.
	open := cv.tok.Encode("<tool_call>\n<function=apply_patch>\n<parameter=input>\n")
	for k := range 4 {
		// (A budget well above the margin, so that nothing is forced.)
		c := cg.NewConstraint(400, 0)
		gen := drive(t, cv, c, rng, 400, open[:len(open)*(k%2)], 8)
		res := ParseAll(gen.text, Options{Tools: cg.Schemas()})
		if len(res.ToolCalls) != 1 {
			t.Fatalf("no call in %q", gen.text)
		}
		var args map[string]string
		if err := json.Unmarshal([]byte(res.ToolCalls[0].Function.Arguments), &args); err != nil {
			t.Fatal(err)
		}
		if in := args["input"]; !g.Match([]byte(in)) && !g.Match([]byte(in+"\n")) {
			t.Errorf("input %q is not a patch", in)
		}
	}
}
