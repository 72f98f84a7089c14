package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/schemacheck"
	"github.com/govinfer/govinfer/llm"
)

// forcedTools returns tools whose schemas use every JSON type, nesting,
// enums and the string, number and array keywords.
func forcedTools(rng *rand.Rand, n int) ([]llm.Tool, map[string][]byte) {
	var tools []llm.Tool
	schemas := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("fn_%d", i)
		params, _ := json.Marshal(schemacheck.RandomParameters(rng))
		tools = append(tools, llm.Tool{Name: name, Parameters: params})
		schemas[name] = params
	}
	return tools, schemas
}

// TestForcedToolCalls makes forced calls, required and named, with and
// without thinking, sampled and greedy: each ends with finish_reason
// tool_calls and one call whose arguments match the tool's schema.
func TestForcedToolCalls(t *testing.T) {
	m := openModel(t)
	rng := rand.New(rand.NewPCG(51, 52))
	runs := 12
	if testing.Short() {
		runs = 4
	}
	for run := range runs {
		tools, schemas := forcedTools(rng, 1+rng.IntN(3))
		req := llm.ChatRequest{Messages: user("Use a tool."), Tools: tools, ToolChoice: llm.ToolChoice{Mode: "required"},
			Thinking: llm.Bool(run%3 == 0), ThinkingBudget: 16, Params: llm.Params{MaxTokens: 200, Seed: llm.Uint64(uint64(run))}}
		if run%2 == 1 {
			req.ToolChoice = llm.ToolChoice{Mode: "function", Function: tools[len(tools)-1].Name}
			req.Temperature = llm.F64(0)
		}
		st, err := m.Chat(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		c := collect(t, st)[0]
		if c.finish.Finish != llm.FinishToolCalls || len(c.calls) != 1 {
			t.Fatalf("run %d: finish %q with %d calls; reasoning %q content %q", run, c.finish.Finish, len(c.calls), c.reasoning, c.content)
		}
		call := c.calls[0]
		if req.ToolChoice.Function != "" && call.Name != req.ToolChoice.Function {
			t.Fatalf("run %d: called %s, want %s", run, call.Name, req.ToolChoice.Function)
		}
		if err := schemacheck.ValidateJSON(schemas[call.Name], []byte(call.Arguments)); err != nil {
			t.Fatalf("run %d: %s(%s) does not match %s: %v", run, call.Name, call.Arguments, schemas[call.Name], err)
		}
		if strings.TrimSpace(c.content) != "" {
			t.Errorf("run %d: content %q beside a forced call", run, c.content)
		}
		if u := st.Usage(); *req.Thinking && (u.ReasoningTokens == 0 || u.ReasoningTokens > 16+len("\n</think>")) {
			t.Errorf("run %d: %d reasoning tokens with a budget of 16", run, u.ReasoningTokens)
		}
	}
}

func TestThinkingControl(t *testing.T) {
	m := openModel(t)
	opened := func(req llm.ChatRequest) bool {
		t.Helper()
		prompt, _, err := m.ChatPrompt(req)
		if err != nil {
			t.Fatal(err)
		}
		return strings.HasSuffix(prompt, "<think>\n")
	}
	base := llm.ChatRequest{Messages: user("Hi")}
	if !opened(base) {
		t.Fatal("thinking is off by default")
	}
	none := base
	none.ReasoningEffort = "none"
	if opened(none) {
		t.Error("reasoning_effort none leaves thinking on")
	}
	override := none
	override.TemplateArgs = map[string]any{"enable_thinking": true}
	if !opened(override) {
		t.Error("chat_template_kwargs do not override reasoning_effort")
	}
	bad := base
	bad.ReasoningEffort = "extreme"
	var pe *llm.ParamError
	if _, _, err := m.ChatPrompt(bad); !errors.As(err, &pe) || pe.Param != "reasoning_effort" {
		t.Errorf("reasoning_effort extreme: %v", err)
	}

	off, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 512, DefaultTemplateArgs: map[string]any{"enable_thinking": false}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	prompt, _, err := off.ChatPrompt(base)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(prompt, "<think>\n") {
		t.Error("the server default enable_thinking false leaves thinking on")
	}
	on := base
	on.TemplateArgs = map[string]any{"enable_thinking": true}
	if prompt, _, _ = off.ChatPrompt(on); !strings.HasSuffix(prompt, "<think>\n") {
		t.Error("the request's chat_template_kwargs do not override the server default")
	}

	// Reasoning tokens are counted.
	req := llm.ChatRequest{Messages: user("Think."), Params: greedy(10)}
	req.IgnoreEOS = true
	st, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, st)[0]
	if u := st.Usage(); c.content == "" && len(c.calls) == 0 && u.ReasoningTokens != 10 {
		t.Errorf("all reasoning, yet %d of 10 reasoning tokens", u.ReasoningTokens)
	}
	// A thinking budget without tools ends the reasoning.
	req.ThinkingBudget = 4
	st, err = m.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, st)
	if u := st.Usage(); u.ReasoningTokens > 4+len("\n</think>") {
		t.Errorf("budget 4: %d reasoning tokens", u.ReasoningTokens)
	}
}

func TestOpenAIParams(t *testing.T) {
	m := openModel(t)
	var pe *llm.ParamError
	check := func(name string, req llm.ChatRequest, param, text string) {
		t.Helper()
		_, err := m.Chat(context.Background(), req)
		if !errors.As(err, &pe) || pe.Param != param || !strings.Contains(pe.Message, text) {
			t.Errorf("%s: error %v, want a ParamError on %s containing %q", name, err, param, text)
		}
	}
	hot := llm.ChatRequest{Messages: user("Hi"), Params: llm.Params{Temperature: llm.F64(2.5)}}
	check("temperature 2.5", hot, "temperature", "between 0 and 2")

	bias := llm.ChatRequest{Messages: user("Hi"), Params: llm.Params{LogitBias: map[int]float64{-1: 5}}}
	check("bias outside the vocabulary", bias, "logit_bias", "outside the vocabulary")

	strictSchema := llm.ChatRequest{Messages: user("Hi"), Params: llm.Params{ResponseFormat: &llm.ResponseFormat{Type: "json_schema", Strict: true,
		Schema: json.RawMessage(`{"type":"object","propertyNames":{"pattern":"^x"}}`)}}}
	check("strict propertyNames", strictSchema, "response_format.json_schema.schema", `"propertyNames"`)

	strictTool := llm.ChatRequest{Messages: user("Hi"), Tools: []llm.Tool{{Name: "f", Strict: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}`)}}}
	check("strict tool keyword", strictTool, "tools", `"multipleOf"`)

	many := llm.ChatRequest{Messages: user("Hi")}
	for i := range llm.MaxTools + 1 {
		many.Tools = append(many.Tools, llm.Tool{Name: fmt.Sprintf("f%d", i)})
	}
	check("too many tools", many, "tools", "at most 128")

	long := llm.ChatRequest{Messages: user(strings.Repeat("a", m.MaxModelLen()*llm.MaxPromptBytesPerToken))}
	check("long prompt", long, "messages", "bytes")

	wide := llm.ChatRequest{Messages: user(strings.Repeat("word ", m.MaxModelLen()/3)), Params: llm.Params{N: 16, MaxTokens: 1}}
	check("n times the prompt", wide, "n", "prompt tokens")

	// The developer role is the system role.
	dev := llm.ChatRequest{Messages: []llm.Message{{Role: "developer", Content: "Be brief."}, {Role: "user", Content: "Hi"}}}
	sys := llm.ChatRequest{Messages: []llm.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}}
	p1, _, err := m.ChatPrompt(dev)
	if err != nil {
		t.Fatal(err)
	}
	p2, _, _ := m.ChatPrompt(sys)
	if p1 != p2 {
		t.Errorf("developer renders %q, system %q", p1, p2)
	}
	late := llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "Hi"}, {Role: "developer", Content: "Be brief."}}}
	check("developer after user", late, "messages", "System message must be at the beginning")

	// A +100 bias wins; the token's logprob is then about 0.
	target := 1234
	st, err := m.Chat(context.Background(), llm.ChatRequest{Messages: user("Hi"), Thinking: llm.Bool(false),
		Params: llm.Params{MaxTokens: 3, Temperature: llm.F64(0), Logprobs: true, LogitBias: map[int]float64{target: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, st)[0]
	for _, id := range c.tokens {
		if id != target {
			t.Fatalf("tokens %v, want all %d", c.tokens, target)
		}
	}
}

// TestResponseFormatKeywords checks that the schema keywords hold in
// sampled output and that the document ends within max_tokens.
func TestResponseFormatKeywords(t *testing.T) {
	m := openModel(t)
	schema := `{"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":120},"name":{"type":"string","minLength":2,"maxLength":8},
		"tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":3},"score":{"type":"number","exclusiveMinimum":0,"maximum":1}},
		"required":["age","name","tags","score"],"additionalProperties":false}`
	for seed := range 6 {
		st, err := m.Chat(context.Background(), llm.ChatRequest{Messages: user("Describe a person."),
			Params: llm.Params{MaxTokens: 60, Seed: llm.Uint64(uint64(seed)), ResponseFormat: &llm.ResponseFormat{Type: "json_schema", Strict: true, Schema: json.RawMessage(schema)}}})
		if err != nil {
			t.Fatal(err)
		}
		c := collect(t, st)[0]
		if c.finish.Finish != llm.FinishStop {
			t.Fatalf("seed %d: finish %q after %q", seed, c.finish.Finish, c.content)
		}
		if err := schemacheck.ValidateJSON([]byte(schema), []byte(c.content)); err != nil {
			t.Fatalf("seed %d: %s: %v", seed, c.content, err)
		}
	}
}
