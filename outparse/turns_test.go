package outparse

import (
	"testing"

	"github.com/govinfer/govinfer/tokenizer"
)

func TestTurnPositions(t *testing.T) {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	// A rendering of the Qwen3.5 template: system, user, an assistant turn
	// with a tool call, its result (a user turn), and the generation
	// prompt.
	parts := []string{
		"<|im_start|>system\nYou are terse.<|im_end|>\n",
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n",
		"<|im_start|>assistant\n",
		"<think>\nCall the tool.\n</think>\n\n<tool_call>\n<function=weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
		"<|im_start|>user\n<tool_response>\n12 C\n</tool_response><|im_end|>\n",
		"<|im_start|>assistant\n",
		"<think>\n",
	}
	var ids, want []int
	for i, p := range parts {
		switch i {
		case 1, 4:
			want = append(want, len(ids))
		case 3, 6:
			want = append(want, len(ids))
		}
		ids = append(ids, tok.Encode(p)...)
	}
	// The parts tokenize on their own as they do joined (they meet at
	// special tokens and newlines).
	var joined string
	for _, p := range parts {
		joined += p
	}
	if got := tok.Encode(joined); len(got) != len(ids) {
		t.Fatalf("parts tokenize to %d tokens, the whole to %d", len(ids), len(got))
	}
	got := TurnPositions(tok, ids)
	if len(got) != len(want) {
		t.Fatalf("TurnPositions = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("TurnPositions = %v, want %v", got, want)
		}
	}
}
