package model

import (
	"encoding/binary"

	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// quantGuard bounds the logits' relative error (max|diff| / max|BF16|, over
// every position) of a quantized model against the same checkpoint in BF16,
// on the small test checkpoint. It is a guard against broken kernels or
// layouts, not an accuracy target: on checkpoints of random weights a
// quantized product can flip the sign of a near-zero q·k in the first
// tokens' delta rule, which the gated norm then blows up, so errors are far
// above a trained model's (llama.cpp's own Q8_0 and Q4_K_M files measure
// 0.040 and 0.28 against its BF16 file on testdata/gguf's checkpoint; see
// TestQuantizedCloserThanLlamaCpp). Measured here: q8_0 0.090, q4_k_m 0.32,
// q5_k_m 0.27 over the 130-token case, top-1 agreement with BF16 logged
// (119, 86 and 96 of 130).
var quantGuard = map[string]float64{"q8_0": 0.15, "q4_k_m": 0.5, "q5_k_m": 0.4}

// TestQuantizedSmall checks each quantization mix against the BF16 weights
// of the small checkpoint: every position's logits within quantGuard, and
// reports the share of positions whose top token agrees with BF16
// (teacher-forced: both see the same prompt).
func TestQuantizedSmall(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	gm := loadGolden(t, "small", Options{Backend: be})
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt
	_, want := prefillSeq(t, gm.m, prompt)
	vocab := gm.m.Config().VocabSize
	for mix, guard := range quantGuard {
		t.Run(mix, func(t *testing.T) {
			m, err := Open(gm.dir, Options{Backend: be, Quantize: mix})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if q, all := m.BlockFormatBytes(), m.WeightBytes(); !(q > all/2 && q <= all) || gm.m.BlockFormatBytes() != 0 {
				t.Errorf("%s: %d of %d weight bytes in block formats (BF16 model: %d)", mix, q, all, gm.m.BlockFormatBytes())
			}
			_, got := prefillSeq(t, m, prompt)
			agree := 0
			for p := range prompt {
				if argmax(got[p*vocab:(p+1)*vocab]) == argmax(want[p*vocab:(p+1)*vocab]) {
					agree++
				}
			}
			e := relErr(got, want)
			last := relErr(got[(len(prompt)-1)*vocab:], want[(len(prompt)-1)*vocab:])
			t.Logf("%s: rel err %.3g over %d positions (last %.3g), top-1 agreement %d/%d", mix, e, len(prompt), last, agree, len(prompt))
			if !(e <= guard) {
				t.Errorf("%s: rel err %.3g > %.3g", mix, e, guard)
			}
		})
	}
}

// prefillSeq returns the logits of every position of prompt, fed in one
// step to a new sequence.
func prefillSeq(t *testing.T, m *Model, prompt []int) (*Sequence, []float32) {
	t.Helper()
	seq, logits := prefill(t, m, prompt, 0, true)
	seq.Close()
	return nil, logits
}

// TestQuantizedCloserThanLlamaCpp runs the checkpoint llama.cpp's test GGUF
// files were converted from (testdata/gguf) with each mix and checks that
// govinfer's quantized logits are closer to its BF16 logits than
// llama.cpp's Q8_0 and Q4_K_M files are to llama.cpp's BF16 file, on the
// same prompts.
func TestQuantizedCloserThanLlamaCpp(t *testing.T) {
	dir := filepath.Join("..", "testdata", "gguf")
	prompts := readPrompts(t, filepath.Join(dir, "logits", "prompts.txt"))
	ref := map[string][]float32{}
	for _, name := range []string{"bf16", "q8_0", "q4_k_m"} {
		ref[name] = readF32(t, filepath.Join(dir, "logits", "ksmall-"+name+".f32"))
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	run := func(mix string) []float32 {
		m, err := Open(filepath.Join(dir, "ksmall"), Options{Backend: be, Quantize: mix})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var all []float32
		for _, p := range prompts {
			_, l := prefillSeq(t, m, p)
			all = append(all, l...)
		}
		return all
	}
	bf16 := run("")
	if len(bf16) != len(ref["bf16"]) {
		t.Fatalf("%d logits, llama.cpp's files have %d", len(bf16), len(ref["bf16"]))
	}
	// Both engines in BF16 agree only to llama.cpp's own rounding of the
	// activations (its README: about 1.5e-2 of the largest logit).
	t.Logf("BF16: govinfer against llama.cpp: rel err %.3g", relErr(bf16, ref["bf16"]))
	for _, mix := range []string{"q8_0", "q4_k_m"} {
		ours := relErr(run(mix), bf16)
		theirs := relErr(ref[mix], ref["bf16"])
		t.Logf("%s: govinfer %.3g, llama.cpp %.3g (each against its own BF16)", mix, ours, theirs)
		if !(ours < theirs) {
			t.Errorf("%s: govinfer's rel err %.3g is not below llama.cpp's %.3g", mix, ours, theirs)
		}
	}
}

func readPrompts(t *testing.T, path string) [][]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ps [][]int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var p []int
		for _, f := range strings.Fields(line) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			p = append(p, id)
		}
		ps = append(ps, p)
	}
	return ps
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return v
}

// TestPrefillCutsExactQuantized is TestPrefillCutsExact with quantized
// weights: 8-bit inputs and integer block sums keep every element
// independent of the batch, so cuts at chunk multiples change nothing.
func TestPrefillCutsExactQuantized(t *testing.T) {
	// q4_k_m holds Q4_K, Q6_K and (where rows do not fit 256) Q8_0 weights.
	be := cpu.New(cpu.Options{})
	defer be.Close()
	gm := loadGolden(t, "small", Options{Backend: be, Quantize: "q4_k_m"})
	checkPrefillCuts(t, gm.m)
}
