package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// blockTol bounds how far prefill in blocks, or inside a batch, may move the
// logits relative to one block alone. The math is the same up to float32
// summation order, so this is far below the golden tolerance.
const blockTol = 1e-5

// TestBlockPrefill checks that feeding a prompt in blocks of 1, 7, 64 and 65
// tokens gives the logits of one block, on both test checkpoints.
func TestBlockPrefill(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) { checkBlockPrefill(t, name, Options{}) })
	}
}

func checkBlockPrefill(t *testing.T, name string, opts Options) {
	gm := loadGolden(t, name, opts)
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt // 130 tokens
	if testing.Short() {
		prompt = prompt[:70]
	}
	seq, want := prefill(t, gm.m, prompt, 0, false)
	seq.Close()
	for _, block := range []int{1, 7, 64, 65} {
		seq, got := prefill(t, gm.m, prompt, block, false)
		seq.Close()
		checkClose(t, fmt.Sprintf("blocks of %d", block), got, want, blockTol)
	}
}

// TestBatchMatchesSolo runs several sequences at different lengths in one
// step, some prefilling and some decoding, and checks each gets the logits
// it gets alone.
func TestBatchMatchesSolo(t *testing.T) { checkBatchMatchesSolo(t, Options{MaxStepTokens: 48}) }

func checkBatchMatchesSolo(t *testing.T, opts Options) {
	gm := loadGolden(t, "small", opts)
	m := gm.m
	vocab := m.Config().VocabSize
	r := rand.New(rand.NewPCG(1, 2))
	randomTokens := func(n int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = r.IntN(vocab)
		}
		return ids
	}
	type job struct {
		history []int // fed before the batched step
		next    []int // fed in the batched step
	}
	jobs := []job{
		{nil, randomTokens(1)},
		{randomTokens(9), randomTokens(1)},
		{randomTokens(33), randomTokens(5)},
		{nil, randomTokens(70)},
		{randomTokens(3), randomTokens(17)},
	}
	// Solo reference.
	want := make([][]float32, len(jobs))
	for i, j := range jobs {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if len(j.history) > 0 {
			if _, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: j.history, Logits: NoLogits}}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: j.next, Logits: AllLogits}})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out[0].Logits
		seq.Close()
	}
	// The same in one batch.
	inputs := make([]Input, len(jobs))
	for i, j := range jobs {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		if len(j.history) > 0 {
			if _, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: j.history, Logits: NoLogits}}); err != nil {
				t.Fatal(err)
			}
		}
		inputs[i] = Input{Seq: seq, Tokens: j.next, Logits: AllLogits}
	}
	out, err := m.Step(context.Background(), inputs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if len(out[i].Logits) != len(jobs[i].next)*vocab {
			t.Fatalf("job %d: %d logits, want %d", i, len(out[i].Logits), len(jobs[i].next)*vocab)
		}
		checkClose(t, fmt.Sprintf("job %d", i), out[i].Logits, want[i], blockTol)
	}
}

// TestStepErrors checks that bad inputs are rejected with an error, not a
// panic, and leave the sequence usable.
func TestStepErrors(t *testing.T) {
	gm := loadGolden(t, "tiny", Options{})
	m := gm.m
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	ctx := context.Background()
	cases := map[string][]Input{
		"no tokens":        {{Seq: seq}},
		"negative token":   {{Seq: seq, Tokens: []int{-1}}},
		"token past vocab": {{Seq: seq, Tokens: []int{m.Config().VocabSize}}},
		"nil sequence":     {{Tokens: []int{1}}},
		"duplicate":        {{Seq: seq, Tokens: []int{1}}, {Seq: seq, Tokens: []int{2}}},
	}
	for name, in := range cases {
		if _, err := m.Step(ctx, in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: []int{1, 2}}}); err != nil {
		t.Fatalf("sequence unusable after rejected inputs: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Step(cancelled, []Input{{Seq: seq, Tokens: []int{3}}}); err == nil {
		t.Error("cancelled context: no error")
	}
	seq.Close()
	if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: []int{1}}}); err == nil {
		t.Error("closed sequence: no error")
	}
}

// TestLastArgmax checks the argmax-only mode against the argmax of the
// downloaded logits, alone and mixed with other modes in one step.
func TestLastArgmax(t *testing.T) { checkLastArgmax(t, Options{}) }

func checkLastArgmax(t *testing.T, opts Options) {
	gm := loadGolden(t, "small", opts)
	m := gm.m
	ctx := context.Background()
	prompts := [][]int{gm.g.Cases[0].Prompt, gm.g.Cases[1].Prompt, gm.g.Cases[2].Prompt}
	want := make([]int, len(prompts))
	for i, p := range prompts {
		seq, logits := prefill(t, m, p, 0, false)
		seq.Close()
		want[i] = argmax(logits)
	}
	modes := []LogitsMode{LastArgmax, LastLogits, LastArgmax}
	inputs := make([]Input, len(prompts))
	for i, p := range prompts {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		inputs[i] = Input{Seq: seq, Tokens: p, Logits: modes[i]}
	}
	out, err := m.Step(ctx, inputs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		got := out[i].Argmax
		if modes[i] == LastLogits {
			got = argmax(out[i].Logits)
		} else if out[i].Logits != nil {
			t.Errorf("input %d: LastArgmax returned logits", i)
		}
		if got != want[i] {
			t.Errorf("input %d (%v): argmax %d, want %d", i, modes[i], got, want[i])
		}
	}
	if _, err := m.Step(ctx, []Input{{Seq: inputs[0].Seq, Tokens: []int{1}, Logits: AllArgmax + 1}}); err == nil {
		t.Error("unknown logits mode accepted")
	}
}
