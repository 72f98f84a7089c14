package llm

import (
	"strings"
	"testing"

	"github.com/govinfer/govinfer/tokenizer"
)

// A thinking budget is lowered with the answer it belongs to.
func TestLowerBudget(t *testing.T) {
	for _, c := range []struct{ budget, asked, max, want int }{
		{0, 0, 100, 0},           // no budget stays none
		{50, 100, 100, 50},       // nothing lowered
		{50, 200, 100, 25},       // max_tokens halved: the budget too
		{3, 1000, 10, 1},         // never below one token
		{64, 0, 48, 24},          // no max_tokens asked, the budget would take the answer: half of it
		{32, 0, 48, 32},          // fits
		{200, 100, 100, 200},     // the request's own choice, not lowered
		{8000, 65536, 48, 5},     // an agent's budget under --max-tokens 48
		{1 << 30, 1 << 31, 4, 2}, // no overflow
	} {
		if got := lowerBudget(c.budget, c.asked, c.max); got != c.want {
			t.Errorf("lowerBudget(%d, %d, %d) = %d, want %d", c.budget, c.asked, c.max, got, c.want)
		}
	}
}

// A cache break falls at the token where its text's last occurrence ends.
func TestBreakPositions(t *testing.T) {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	lm := &Model{tok: tok}
	prompt := "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nSay hello.<|im_end|>\n" +
		"<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\nSay hello.\nAvailable agents: a, b.<|im_end|>\n<|im_start|>assistant\n"
	ids := tok.Encode(prompt)
	total := 0
	for _, id := range ids {
		total += len(tok.TokenBytes(id))
	}
	if total != len(prompt) {
		t.Fatalf("the tokens' bytes add up to %d, the prompt has %d", total, len(prompt))
	}
	texts := []string{"Say hello.", "You are terse.", "not in the prompt", ""}
	got := lm.breakPositions(prompt, ids, texts)
	want := []int{strings.Index(prompt, "You are terse.") + len("You are terse."), strings.LastIndex(prompt, "Say hello.") + len("Say hello.")}
	if len(got) != len(want) {
		t.Fatalf("breakPositions = %v, want %d positions", got, len(want))
	}
	for i, p := range got {
		covered := len(tok.Decode(ids[:p], false))
		next := covered + len(tok.TokenBytes(ids[p]))
		if covered > want[i] || next <= want[i] {
			t.Errorf("break %d at token %d covers bytes [0, %d), then %d; want the token reaching past byte %d", i, p, covered, next, want[i])
		}
	}
}
