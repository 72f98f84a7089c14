package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute/cpu"
)

// cutChunk is the prefill chunk at whose multiples a prompt may be cut
// without changing any result bit (the CPU backend's delta-rule chunk and
// the engine's default prompt chunk).
const cutChunk = 64

// TestPrefillCutsExact checks that prefill on the CPU is bitwise
// independent of where a prompt is cut at multiples of cutChunk, and of
// the other sequences in the step: the logits at every position, and the
// next decoded step, equal a cold single-pass run bit for bit. Prefix
// reuse resumes prefill from such cut points and relies on it.
func TestPrefillCutsExact(t *testing.T) {
	sets := map[string]cpu.Options{
		// Where the CPU has AVX-512, every row on the FMA products of the
		// tile layout; and on the row-major kernels.
		"detected":  {Kernels: asm.Detect(), NoAMXTiles: true},
		"row-major": {Kernels: asm.Detect(), NoAMXTiles: true, NoFMATiles: true},
		"generic":   {Kernels: asm.Generic()},
		// Prompt rows on AMX tiles, decode rows on the FMA products of
		// the tile layout, where the CPU has AMX.
		"amx-tiles": {},
	}
	for _, name := range []string{"tiny", "small"} {
		for kname, o := range sets {
			t.Run(name+"/"+kname, func(t *testing.T) {
				be := cpu.New(o)
				defer be.Close()
				gm := loadGolden(t, name, Options{Backend: be})
				checkPrefillCuts(t, gm.m)
			})
		}
	}
}

func checkPrefillCuts(t *testing.T, m *Model) {
	r := rand.New(rand.NewPCG(7, 8))
	vocab := m.Config().VocabSize
	for _, n := range []int{65, 79, 150} {
		prompt := make([]int, n)
		for i := range prompt {
			prompt[i] = r.IntN(vocab)
		}
		want, wantNext := cutRun(t, m, prompt, nil, nil)
		for _, cuts := range [][]int{{64}, {128}, {64, 128}} {
			got, gotNext := cutRun(t, m, prompt, cuts, nil)
			sameLogits(t, fmt.Sprintf("%d tokens cut at %v", n, cuts), got, want)
			sameLogits(t, fmt.Sprintf("%d tokens cut at %v, next step", n, cuts), gotNext, wantNext)
		}
		// Beside other sequences: one decoding, one prefilling.
		other := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
		got, gotNext := cutRun(t, m, prompt, []int{64}, other)
		sameLogits(t, fmt.Sprintf("%d tokens cut at 64 beside other sequences", n), got, want)
		sameLogits(t, fmt.Sprintf("%d tokens beside other sequences, next step", n), gotNext, wantNext)
	}
}

// cutRun prefills prompt into a new sequence in passes ending at cuts,
// returning the logits of every position and of one decode step after it.
// With others, every step also carries a sequence that prefills others
// and then decodes (Input.Decode, so that decode rows share the passes).
func cutRun(t *testing.T, m *Model, prompt, cuts, others []int) (logits, next []float32) {
	t.Helper()
	ctx := context.Background()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	var side *Sequence
	sideFed := 0
	if others != nil {
		if side, err = m.NewSequence(); err != nil {
			t.Fatal(err)
		}
		defer side.Close()
	}
	step := func(tokens []int, decode bool) []float32 {
		in := []Input{{Seq: seq, Tokens: tokens, Logits: AllLogits, Decode: decode}}
		if side != nil {
			tok := []int{others[sideFed%len(others)]}
			if sideFed == 0 {
				tok = others[:7]
			}
			in = append([]Input{{Seq: side, Tokens: tok, Logits: LastLogits, Decode: sideFed > 0}}, in...)
			sideFed += len(tok)
		}
		out, err := m.Step(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return out[len(out)-1].Logits
	}
	start := 0
	for _, c := range append(cuts, len(prompt)) {
		if c <= start || c > len(prompt) {
			continue
		}
		logits = append(logits, step(prompt[start:c], false)...)
		start = c
	}
	next = step([]int{prompt[0]}, true)
	return logits, next
}

// sameLogits fails unless got and want are identical bit for bit.
func sameLogits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: logit %d is %v, %v in one pass (first difference)", what, i, got[i], want[i])
		}
	}
}
