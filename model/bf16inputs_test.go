package model

import (
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute/cpu"
)

// bf16InputsGuard bounds the logits' relative error (max|diff| / max|ref|,
// over every position) of the small checkpoint on a CPU backend that rounds
// the inputs of bf16 products to bf16 (cpu.Options.BF16Inputs), against the
// exact backend. Like quantGuard it guards against broken kernels, not an
// accuracy target: random weights amplify small input errors far more than
// a trained model's do. Measured: 0.016 (pure Go) and 0.019 (AVX512_BF16)
// over the 130-token case, top-1 agreement 128 of 130 (q8_0: 0.090).
const bf16InputsGuard = 0.03

// TestBF16InputsSmall checks the small checkpoint on a CPU backend with
// bf16 inputs against the exact backend: every position's logits within
// bf16InputsGuard, with the share of positions whose top token agrees
// logged, for the detected and the pure-Go kernels.
func TestBF16InputsSmall(t *testing.T) {
	exact := cpu.New(cpu.Options{})
	defer exact.Close()
	gm := loadGolden(t, "small", Options{Backend: exact})
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt
	_, want := prefillSeq(t, gm.m, prompt)
	vocab := gm.m.Config().VocabSize
	for name, k := range map[string]*asm.Kernels{"detected": asm.Detect(), "generic": asm.Generic()} {
		t.Run(name, func(t *testing.T) {
			be := cpu.New(cpu.Options{Kernels: k, BF16Inputs: true})
			defer be.Close()
			m, err := Open(gm.dir, Options{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, got := prefillSeq(t, m, prompt)
			agree := 0
			for p := range prompt {
				if argmax(got[p*vocab:(p+1)*vocab]) == argmax(want[p*vocab:(p+1)*vocab]) {
					agree++
				}
			}
			e := relErr(got, want)
			t.Logf("%s: rel err %.3g over %d positions, top-1 agreement %d/%d", name, e, len(prompt), agree, len(prompt))
			if !(e <= bf16InputsGuard) {
				t.Errorf("rel err %.3g > %.3g", e, bf16InputsGuard)
			}
		})
	}
}

// TestPrefillCutsExactBF16Inputs is TestPrefillCutsExact on a backend with
// bf16 inputs: the same kernel sums every input alike whatever the batch,
// so cuts at chunk multiples and other sequences change no bit.
func TestPrefillCutsExactBF16Inputs(t *testing.T) {
	be := cpu.New(cpu.Options{BF16Inputs: true})
	defer be.Close()
	gm := loadGolden(t, "small", Options{Backend: be})
	checkPrefillCuts(t, gm.m)
}
