package outparse

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/tokenizer"
)

func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// step runs one sampling step on random logits: Process, argmax, Accept.
// It fails the test if every token is masked.
func step(t *testing.T, f *ToolForcer, rng *rand.Rand, vocab int) int {
	t.Helper()
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	f.Process(logits)
	best := -1
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) && (best < 0 || v > logits[best]) {
			best = i
		}
	}
	if best < 0 {
		t.Fatal("every token is masked")
	}
	if err := f.Accept(best); err != nil {
		t.Fatal(err)
	}
	return best
}

func TestToolForcerNamed(t *testing.T) {
	tok := testTokenizer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	f, err := NewToolForcer(tok, "get_weather", []string{"get_weather", "search"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for !f.free {
		if len(ids) > 50 {
			t.Fatal("the forced prefix never ends")
		}
		ids = append(ids, step(t, f, rng, tok.VocabSize()+3))
	}
	if got, want := tok.Decode(ids, false), "<tool_call>\n<function=get_weather>\n"; got != want {
		t.Errorf("forced %q, want %q", got, want)
	}
	// Free afterwards: nothing is masked.
	logits := []float32{1, 2, 3}
	f.Process(logits)
	if !slices.Equal(logits, []float32{1, 2, 3}) {
		t.Errorf("free phase masked %v", logits)
	}
	// A token other than the forced one is refused.
	g, _ := NewToolForcer(tok, "search", nil, false)
	if err := g.Accept(g.forced[0] + 1); err == nil {
		t.Error("a token other than the forced one was accepted")
	}
}

func TestToolForcerRequired(t *testing.T) {
	tok := testTokenizer(t)
	// "get" is a prefix of "get_weather": the closing ">" tells them apart.
	names := []string{"get", "get_weather", "search_web", "x"}
	seen := map[string]bool{}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		f, err := NewToolForcer(tok, "", names, false)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for !f.free {
			if len(ids) > 60 {
				t.Fatalf("seed %d: no name completed: %q", seed, tok.Decode(ids, false))
			}
			if f.pos == len(f.forced) && seed < 3 {
				// Reference: a token is allowed iff it is ordinary and the
				// text with it is a prefix of some full call opening.
				text := tok.Decode(ids, false)
				logits := make([]float32, tok.VocabSize())
				f.Process(logits)
				for id := range logits {
					b := tok.TokenBytes(id)
					want := !tok.IsAdded(id) && len(b) > 0 && slices.ContainsFunc(names, func(n string) bool {
						return strings.HasPrefix(callOpen+n+callNameClose, text+string(b))
					})
					if got := !math.IsInf(float64(logits[id]), -1); got != want {
						t.Fatalf("after %q token %d (%q): allowed %v, want %v", text, id, b, got, want)
					}
				}
			}
			ids = append(ids, step(t, f, rng, tok.VocabSize()))
		}
		text := tok.Decode(ids, false)
		name, ok := strings.CutPrefix(text, callOpen)
		name, ok2 := strings.CutSuffix(name, callNameClose)
		if !ok || !ok2 || !slices.Contains(names, name) {
			t.Fatalf("seed %d: forced %q, not a call opening of one of %v", seed, text, names)
		}
		seen[name] = true
	}
	if len(seen) < 2 {
		t.Errorf("random logits only ever spelled %v", seen)
	}
}

func TestToolForcerAfterThinking(t *testing.T) {
	tok := testTokenizer(t)
	think, ok := tok.TokenID("</think>")
	if !ok {
		t.Fatal("no </think> token")
	}
	f, err := NewToolForcer(tok, "search", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	// Reasoning is free.
	for _, id := range tok.Encode("Let me think about it.") {
		logits := []float32{0.5, -1, 2}
		f.Process(logits)
		if !slices.Equal(logits, []float32{0.5, -1, 2}) {
			t.Fatalf("reasoning was masked: %v", logits)
		}
		if err := f.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Accept(think); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ids []int
	for !f.free {
		if len(ids) > 50 {
			t.Fatal("the forced prefix never ends")
		}
		ids = append(ids, step(t, f, rng, tok.VocabSize()))
	}
	if got, want := tok.Decode(ids, false), "\n\n<tool_call>\n<function=search>\n"; got != want {
		t.Errorf("forced after reasoning %q, want %q", got, want)
	}
}

func TestToolForcerBadNames(t *testing.T) {
	tok := testTokenizer(t)
	if _, err := NewToolForcer(tok, "", nil, false); err == nil {
		t.Error("required with no tools was accepted")
	}
	if _, err := NewToolForcer(tok, "a>b", nil, false); err == nil {
		t.Error("a name with '>' was accepted")
	}
}
