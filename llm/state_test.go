package llm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// chatLogprobs runs a chat request and returns each choice's tokens with
// their logprobs, and the usage.
func chatLogprobs(t *testing.T, m *llm.Model, req llm.ChatRequest) ([][]llm.Token, string, llm.Usage) {
	t.Helper()
	st, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := make([][]llm.Token, st.Choices())
	var text strings.Builder
	for ev := range st.Events() {
		out[ev.Choice] = append(out[ev.Choice], ev.Tokens...)
		if ev.Choice == 0 && (ev.Kind == llm.KindContent || ev.Kind == llm.KindReasoning) {
			text.WriteString(ev.Text)
		}
	}
	return out, text.String(), st.Usage()
}

// TestPrefixCacheChat replays an agent conversation (system prompt, tools,
// user turns, assistant turns with reasoning and tool calls, tool results)
// turn by turn on a model with the prefix cache and one without: every
// turn's tokens and logprobs are the same bit for bit, and from the second
// turn on most of the prompt is resumed from the cache.
func TestPrefixCacheChat(t *testing.T) {
	warm := openModel(t)
	cold, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048, NoPrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	tools := []llm.Tool{{Name: "read_file", Description: "Read a file of the repository.",
		Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}}
	msgs := []llm.Message{
		{Role: "system", Content: strings.Repeat("You are a careful coding agent. Read before you write. ", 12)},
		{Role: "user", Content: "Find where the engine schedules prefill."},
	}
	params := llm.Params{MaxTokens: 10, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2, N: 2, Seed: llm.Uint64(3)}
	for turn := range 5 {
		req := llm.ChatRequest{Messages: msgs, Tools: tools, Params: params}
		want, _, wu := chatLogprobs(t, cold, req)
		got, text, u := chatLogprobs(t, warm, req)
		what := fmt.Sprintf("turn %d", turn)
		for c := range want {
			if len(got[c]) != len(want[c]) {
				t.Fatalf("%s choice %d: %d tokens, want %d", what, c, len(got[c]), len(want[c]))
			}
			for i := range want[c] {
				g, w := got[c][i], want[c][i]
				if g.ID != w.ID || math.Float64bits(g.Logprob) != math.Float64bits(w.Logprob) {
					t.Fatalf("%s choice %d token %d: %+v, want %+v", what, c, i, g, w)
				}
			}
		}
		if wu.CachedTokens != 0 || u.PromptTokens != wu.PromptTokens {
			t.Errorf("%s: usage %+v without the cache, %+v with it", what, wu, u)
		}
		t.Logf("%s: %d of %d prompt tokens resumed", what, u.CachedTokens, u.PromptTokens)
		if turn > 0 && u.CachedTokens < u.PromptTokens/2 {
			t.Errorf("%s: %d of %d prompt tokens resumed", what, u.CachedTokens, u.PromptTokens)
		}
		// The next turn: the answer (reasoning and a tool call), the
		// tool's result, and every other turn a new user message.
		msgs = append(msgs,
			llm.Message{Role: "assistant", Reasoning: "Look at the engine. " + text, Content: "",
				ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("call_%d", turn), Name: "read_file", Arguments: `{"path": "engine/engine.go"}`}}},
			llm.Message{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", turn), Content: strings.Repeat("func step() {} ", 10)})
		if turn%2 == 1 {
			msgs = append(msgs, llm.Message{Role: "user", Content: "Now look at the tests."})
		}
	}
}

func TestParseStateMemory(t *testing.T) {
	for _, c := range []struct {
		in    string
		bytes int64
		frac  float64
		bad   bool
	}{
		{in: "256KiB", bytes: 256 << 10},
		{in: "8GiB", bytes: 8 << 30},
		{in: "1.5 MiB", bytes: 3 << 19},
		{in: "4096", bytes: 4096},
		{in: "0.8", frac: 0.8},
		{in: "1", frac: 1},
		{in: "0", bad: true},
		{in: "1.5", bad: true},
		{in: "-1GiB", bad: true},
		{in: "8GB", bytes: 8e9},
		{in: "8G", bytes: 8e9},
		{in: "8Gi", bytes: 8 << 30},
		{in: "1e9", bad: true},
		{in: "8XB", bad: true},
		{in: "0B", bad: true},
		{in: "lots", bad: true},
	} {
		b, f, err := llm.ParseStateMemory(c.in)
		if (err != nil) != c.bad || b != c.bytes || f != c.frac {
			t.Errorf("ParseStateMemory(%q) = %d, %v, %v", c.in, b, f, err)
		}
	}
}

// A state memory below MinStateTokens tokens of one sequence is refused at
// Open, naming the minimum; the minimum itself is taken.
func TestStateMemoryMinimum(t *testing.T) {
	probe, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	sm := probe.StateMemory()
	probe.Close()
	need := sm.PerSequence + llm.MinStateTokens*sm.PerToken
	for _, budget := range []int64{1 << 10, need - 1} {
		_, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048, StateMemory: budget})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("minimum of %d bytes (", need)) || !strings.Contains(err.Error(), "256 tokens") {
			t.Errorf("a state memory of %d bytes (the minimum is %d): %v", budget, need, err)
		}
	}
	m, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048, StateMemory: need})
	if err != nil {
		t.Fatalf("the minimum state memory: %v", err)
	}
	defer m.Close()
	if got := m.StateMemory().Tokens; got != llm.MinStateTokens {
		t.Errorf("the minimum state memory holds %d tokens, want %d", got, llm.MinStateTokens)
	}
}

// A max_tokens one sequence's state could never hold is lowered to what it
// holds; a prompt that fills it is refused, saying why.
func TestStateMemoryTooSmall(t *testing.T) {
	m, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048, StateMemory: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sm := m.StateMemory()
	if sm.Budget != 256<<10 || sm.Tokens <= 0 || !sm.PrefixCache || !strings.Contains(sm.String(), "tokens of state") {
		t.Errorf("state memory %+v: %s", sm, sm)
	}
	prompt := m.PromptIDs(llm.Prompt{Text: "Hello"})
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: prompt}},
		Params: llm.Params{MaxTokens: int(sm.Tokens) + 10, IgnoreEOS: true}})
	if err != nil {
		t.Fatalf("oversized request: %v", err)
	}
	out := collect(t, st)[0]
	if want := int(sm.Tokens) - len(prompt) + 1; len(out.tokens) != want || out.finish.Finish != llm.FinishLength {
		t.Errorf("oversized request: %d tokens, finish %s; want %d (what the state holds after the prompt), length", len(out.tokens), out.finish.Finish, want)
	}
	long := make([]int, sm.Tokens+1)
	for i := range long {
		long[i] = 1 + i%1000
	}
	_, err = m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: long}}})
	var ce *llm.ContextLengthError
	if !errors.As(err, &ce) || !strings.Contains(ce.Error(), "state memory") {
		t.Fatalf("a prompt that fills the state memory: %v", err)
	}
	st, err = m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: "Hello"}},
		Params: llm.Params{MaxTokens: int(sm.Tokens) - 10}})
	if err != nil {
		t.Fatalf("a request that fits: %v", err)
	}
	collect(t, st)
}
