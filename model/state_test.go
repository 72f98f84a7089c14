package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// TestRestoreExact checks that a sequence restored from saved state at a
// multiple of 64 positions continues bit for bit as the sequence the state
// was copied from: the logits of the rest of the prompt and of the next
// decode step are the same.
func TestRestoreExact(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			checkRestore(t, loadGolden(t, name, Options{Backend: be}).m)
		})
	}
}

func checkRestore(t *testing.T, m *Model) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	prompt := make([]int, 150)
	for i := range prompt {
		prompt[i] = r.IntN(m.Config().VocabSize)
	}
	step := func(seq *Sequence, tokens []int) []float32 {
		t.Helper()
		out, err := m.Step(ctx, []Input{{Seq: seq, Tokens: tokens, Logits: AllLogits}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Logits
	}
	src, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	step(src, prompt[:64])
	b0, err := src.SaveKV(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Free()
	step(src, prompt[64:128])
	b1, err := src.SaveKV(64, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Free()
	rs, err := src.SaveRecurrent()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Free()
	if rs.Pos() != 128 || b1.Start() != 64 || b1.Len() != 64 {
		t.Fatalf("saved state at %d, block [%d, +%d)", rs.Pos(), b1.Start(), b1.Len())
	}
	if got, want := b0.Bytes()+b1.Bytes()+rs.Bytes(), m.SequenceBytes(128); got != want {
		t.Errorf("saved state takes %d bytes, SequenceBytes(128) says %d", got, want)
	}
	want := step(src, prompt[128:])
	wantNext := step(src, prompt[:1])

	for _, reserve := range []int{0, 200} {
		t.Run(fmt.Sprintf("reserve%d", reserve), func(t *testing.T) {
			dst, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if reserve > 0 {
				if err := dst.Reserve(reserve); err != nil {
					t.Fatal(err)
				}
				if got := dst.StateBytes(); got != m.SequenceBytes(reserve) {
					t.Errorf("reserved sequence takes %d bytes, want %d", got, m.SequenceBytes(reserve))
				}
			}
			if err := dst.Restore([]*KVBlock{b0, b1}, rs); err != nil {
				t.Fatal(err)
			}
			if dst.Len() != 128 {
				t.Fatalf("restored sequence at %d, want 128", dst.Len())
			}
			sameLogits(t, "rest of the prompt", step(dst, prompt[128:]), want)
			sameLogits(t, "next step", step(dst, prompt[:1]), wantNext)
		})
	}

	// Misuse is an error, not a panic.
	bad, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Restore([]*KVBlock{b1}, rs); err == nil {
		t.Error("restore from blocks that do not start at 0 succeeded")
	}
	if err := bad.Restore([]*KVBlock{b0}, rs); err == nil {
		t.Error("restore from blocks that stop short of the state succeeded")
	}
	if _, err := bad.SaveKV(0, 1); err == nil {
		t.Error("saving positions not consumed succeeded")
	}
	if err := bad.Reserve(m.Config().MaxContext() + 1); err == nil {
		t.Error("reserving past the context succeeded")
	}
}
