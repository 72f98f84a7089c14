package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestOutputRowsExact checks that the last layer's work on the rows whose
// results are read only (outputRows) gives those rows the bits of running
// it on every row: a step of prompts, a decode row and a prompt cut over
// passes (MaxStepTokens 7, so that some passes read no row at all), asking
// for their last logits, last argmax or hidden rows, against the same step
// asking for every row's logits. Both kinds of last layer: tiny's (full
// attention) and its first three layers (Gated DeltaNet last).
func TestOutputRowsExact(t *testing.T) {
	runOutputRows(t, func(t *testing.T, o Options) Options { return withCPU(t, o) })
}

// runOutputRows runs checkOutputRows on both models of TestOutputRowsExact,
// whole steps and cut into passes, with the options that backend gives.
func runOutputRows(t *testing.T, backend func(*testing.T, Options) Options) {
	tiny := filepath.Join("..", "testdata", "models", "tiny")
	for name, dir := range map[string]string{
		"attention last": tiny,
		"deltanet last":  truncatedCheckpoint(t, tiny, 3),
	} {
		t.Run(name, func(t *testing.T) {
			for _, opts := range []Options{{}, {MaxStepTokens: 7}} {
				m, err := Open(dir, backend(t, opts))
				if err != nil {
					t.Fatal(err)
				}
				checkOutputRows(t, m, func(what string, got, want []float32) { sameLogits(t, what, got, want) })
				m.Close()
			}
		})
	}
}

// checkOutputRows runs the step of TestOutputRowsExact on m and hands each
// input's results, and those of the every-row run, to same.
func checkOutputRows(t *testing.T, m *Model, same func(what string, got, want []float32)) {
	t.Helper()
	ctx := context.Background()
	c := m.Config()
	vocab, h := c.VocabSize, c.HiddenSize
	r := rand.New(rand.NewPCG(3, 4))
	tokens := func(n int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = r.IntN(vocab)
		}
		return ids
	}
	history, decoded := tokens(6), tokens(1)
	type job struct {
		tokens []int
		mode   LogitsMode
		hidden bool
	}
	jobs := []job{
		{decoded, LastLogits, false}, // after history
		{tokens(19), LastLogits, false},
		{tokens(5), LastArgmax, false},
		{tokens(9), NoLogits, true},
		{tokens(11), NoLogits, false},
		{tokens(23), LastLogits, false},
	}
	run := func(all bool) []Output {
		t.Helper()
		inputs := make([]Input, len(jobs))
		for i, j := range jobs {
			seq, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { seq.Close() })
			in := Input{Seq: seq, Tokens: j.tokens, Logits: j.mode, Hidden: j.hidden}
			if i == 0 {
				if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: history, Logits: NoLogits}}); err != nil {
					t.Fatal(err)
				}
				in.Decode = true
			}
			if all {
				in.Logits = AllLogits
			}
			inputs[i] = in
		}
		out, err := m.Step(ctx, inputs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := run(true), run(false)
	for i, j := range jobs {
		n := len(j.tokens)
		last := want[i].Logits[(n-1)*vocab : n*vocab]
		what := fmt.Sprintf("input %d (%d tokens)", i, n)
		switch j.mode {
		case LastLogits:
			same(what+" logits", got[i].Logits, last)
		case LastArgmax:
			if w := argmax(last); got[i].Argmax != w {
				t.Errorf("%s: argmax %d, want %d", what, got[i].Argmax, w)
			}
		}
		if j.hidden {
			if len(got[i].Hidden) != n*h {
				t.Fatalf("%s: %d hidden values, want %d", what, len(got[i].Hidden), n*h)
			}
			same(what+" hidden", got[i].Hidden, want[i].Hidden)
		}
	}
}

// truncatedCheckpoint returns a checkpoint directory holding the first n
// layers of the one in src: its tensors (linked) and its config cut to n
// layers.
func truncatedCheckpoint(t *testing.T, src string, n int) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" || e.IsDir() {
			continue
		}
		abs, err := filepath.Abs(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := editTextConfig(t, data, func(text map[string]any) {
		text["num_hidden_layers"] = n
		if lt, ok := text["layer_types"].([]any); ok {
			text["layer_types"] = lt[:n]
		}
	})
	if err := os.WriteFile(filepath.Join(dst, "config.json"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
