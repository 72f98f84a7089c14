package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// TestMaxGrammarBytes checks Options.MaxGrammarBytes: a regex, a choice
// list or a custom tool's grammar over it is a ParamError naming the field
// and the bound, and one within it runs; two models keep their own bounds.
func TestMaxGrammarBytes(t *testing.T) {
	small, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 1024, MaxGrammarBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	long := `[a-z]+( [a-z]+){0,3}\.` // 22 bytes
	grammar := "start: \"a\" | \"bb\" | \"ccc\"\n"
	for name, req := range map[string]llm.ChatRequest{
		"regex": {Messages: user("Hi"), Params: llm.Params{MaxTokens: 8, Structured: &llm.Structured{Regex: long, Field: "structured_outputs.regex"}}},
		"choice": {Messages: user("Hi"), Params: llm.Params{MaxTokens: 8,
			Structured: &llm.Structured{Choice: []string{"abcdefgh", "ijklmnop", "q"}, Field: "structured_outputs.choice"}}},
		"custom tool": {Messages: user("Hi"), Params: llm.Params{MaxTokens: 8},
			Tools: []llm.Tool{{Name: "t", Custom: true, Grammar: grammar}}},
	} {
		_, err := small.Chat(context.Background(), req)
		var pe *llm.ParamError
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, "at most 16") {
			t.Errorf("%s: error %v, want a ParamError with the bound 16", name, err)
		}
	}
	st, err := small.Chat(context.Background(), llm.ChatRequest{Messages: user("Hi"), Thinking: llm.Bool(false),
		Params: llm.Params{MaxTokens: 8, Temperature: llm.F64(0), Structured: &llm.Structured{Regex: `(yes|no)\.`}}})
	if err != nil {
		t.Fatalf("a regex within the bound: %v", err)
	}
	st.Close()
	// The shared model keeps the default bound.
	st, err = openModel(t).Chat(context.Background(), llm.ChatRequest{Messages: user("Hi"), Thinking: llm.Bool(false),
		Params: llm.Params{MaxTokens: 8, Structured: &llm.Structured{Regex: long}}})
	if err != nil {
		t.Fatalf("default bound: %v", err)
	}
	st.Close()
}
