//go:build cgo

package vulkan

import (
	"context"
	"math"
	"testing"

	"github.com/govinfer/govinfer/model"
)

// TestSubmitSplitMatchesWholeStep checks that submitting steps in parts
// changes nothing: a prefill and decode steps of the small model give the
// same logits, bit for bit, recorded whole and submitted every 7
// dispatches.
func TestSubmitSplitMatchesWholeStep(t *testing.T) {
	run := func(every int) ([][]float32, int) {
		b := newTestBackend(t, Options{})
		defer b.Close()
		b.rec.submitEvery = every
		m, err := model.Open("../../testdata/models/small", model.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		ctx := context.Background()
		var logits [][]float32
		tokens := []int{3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43}
		s0 := b.rec.submissions
		for step := 0; step < 5; step++ {
			out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: tokens}})
			if err != nil {
				t.Fatal(err)
			}
			logits = append(logits, append([]float32(nil), out[0].Logits...))
			tokens = []int{(step*31 + 7) % m.Config().VocabSize}
		}
		return logits, b.rec.submissions - s0
	}
	whole, n0 := run(0)
	split, n7 := run(7)
	if n7 <= 5*2 || n0 != 5 {
		t.Fatalf("submissions: %d whole (want 5), %d split every 7 dispatches (want many)", n0, n7)
	}
	for s := range whole {
		for i := range whole[s] {
			if math.Float32bits(whole[s][i]) != math.Float32bits(split[s][i]) {
				t.Fatalf("step %d logit %d: %g recorded whole, %g submitted in parts", s, i, whole[s][i], split[s][i])
			}
		}
	}
}
