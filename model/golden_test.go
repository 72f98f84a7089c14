package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/safetensors"
)

// golden is the part of golden.json the tests read (see
// testdata/models/README.md and the spec it points to).
type golden struct {
	Cases []goldenCase `json:"cases"`
	Debug struct {
		HiddenStates struct {
			Tensor string `json:"tensor"`
			Prompt []int  `json:"prompt"`
			Shape  []int  `json:"shape"`
		} `json:"hidden_states"`
	} `json:"debug"`
	Tolerances struct {
		LogitsRelMax float64 `json:"logits_rel_max"`
		HiddenRelMax float64 `json:"hidden_states_rel_max"`
	} `json:"recommended_tolerances"`
}

type tensorRef struct {
	Tensor string `json:"tensor"`
	Shape  []int  `json:"shape"`
}

type goldenCase struct {
	Name             string     `json:"name"`
	Prompt           []int      `json:"prompt"`
	LastLogits       tensorRef  `json:"last_logits"`
	LastArgmax       int        `json:"last_argmax"`
	AllLogits        *tensorRef `json:"all_logits"`
	GreedyTokens     []int      `json:"greedy_tokens"`
	GreedyStepLogits *tensorRef `json:"greedy_step_logits"`
	GreedySteps      []struct {
		Token     int     `json:"token"`
		MarginRel float64 `json:"margin_rel"`
	} `json:"greedy_steps"`
	PromptArgmax          []int     `json:"prompt_argmax"`
	PromptArgmaxMarginRel []float64 `json:"prompt_argmax_margin_rel"`
}

// marginRule is the spec's threshold: argmaxes and greedy tokens are compared
// where the reference's relative margin is at least this.
const marginRule = 1e-3

// goldenModel is a loaded test checkpoint with its goldens.
type goldenModel struct {
	dir     string
	m       *Model
	g       golden
	tensors *safetensors.File
}

func loadGolden(t testing.TB, name string, opts Options) *goldenModel {
	t.Helper()
	dir := filepath.Join("..", "testdata", "models", name)
	return loadGoldenModel(t, dir, dir, opts)
}

// loadGoldenModel loads the goldens in dir and the model at path: the
// checkpoint in dir, or a GGUF file converted from it.
func loadGoldenModel(t testing.TB, dir, path string, opts Options) *goldenModel {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	gm := &goldenModel{dir: dir}
	if err := json.Unmarshal(data, &gm.g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	if gm.g.Tolerances.LogitsRelMax <= 0 || gm.g.Tolerances.HiddenRelMax <= 0 {
		t.Fatalf("golden.json has no recommended tolerances")
	}
	if gm.tensors, err = safetensors.Open(filepath.Join(dir, "golden.safetensors")); err != nil {
		t.Fatal(err)
	}
	if gm.m, err = Open(path, withCPU(t, opts)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gm.m.Close()
		gm.tensors.Close()
	})
	return gm
}

func (gm *goldenModel) floats(t testing.TB, name string) []float32 {
	t.Helper()
	ten, ok := gm.tensors.Tensor(name)
	if !ok {
		t.Fatalf("golden tensor %s missing", name)
	}
	v, err := ten.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// relErr returns max|got - want| / max|want|.
func relErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var maxDiff, maxRef float64
	for i := range want {
		maxDiff = max(maxDiff, math.Abs(float64(got[i])-float64(want[i])))
		maxRef = max(maxRef, math.Abs(float64(want[i])))
	}
	if maxRef == 0 {
		return maxDiff
	}
	return maxDiff / maxRef
}

func checkClose(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if e := relErr(got, want); !(e <= tol) {
		t.Errorf("%s: max|diff|/max|golden| = %.3g > %.3g (first values got %v want %v)", what, e, tol, head(got), head(want))
	} else if testing.Verbose() {
		t.Logf("%s: rel err %.3g (tol %.3g)", what, e, tol)
	}
}

func head(v []float32) []float32 { return v[:min(4, len(v))] }

// prefill feeds the prompt in blocks of the given size (0: one block) to a
// new sequence and returns it with the logits of every prompt position when
// all is set, else of the last.
func prefill(t testing.TB, m *Model, prompt []int, block int, all bool) (*Sequence, []float32) {
	t.Helper()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	if block <= 0 {
		block = len(prompt)
	}
	var logits []float32
	for i := 0; i < len(prompt); i += block {
		chunk := prompt[i:min(i+block, len(prompt))]
		mode := NoLogits
		if all {
			mode = AllLogits
		} else if i+block >= len(prompt) {
			mode = LastLogits
		}
		out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: chunk, Logits: mode}})
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, out[0].Logits...)
	}
	return seq, logits
}

func argmax(v []float32) int { return compute.Argmax(v) }

// runGoldens checks a model against every golden case.
func runGoldens(t *testing.T, name string, opts Options) {
	runGoldenModel(t, loadGolden(t, name, opts))
}

// runGoldenModel checks the loaded model against its goldens.
func runGoldenModel(t *testing.T, gm *goldenModel) {
	m, g := gm.m, gm.g
	vocab := m.Config().VocabSize
	tol := g.Tolerances.LogitsRelMax
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			all := c.AllLogits != nil || c.PromptArgmax != nil
			seq, logits := prefill(t, m, c.Prompt, 0, all)
			defer seq.Close()
			last := logits[len(logits)-vocab:]
			checkClose(t, "last_logits", last, gm.floats(t, c.LastLogits.Tensor), tol)
			if c.AllLogits != nil {
				checkClose(t, "all_logits", logits, gm.floats(t, c.AllLogits.Tensor), tol)
			}
			for i, want := range c.PromptArgmax {
				if c.PromptArgmaxMarginRel[i] < marginRule {
					continue
				}
				if got := argmax(logits[i*vocab : (i+1)*vocab]); got != want {
					t.Errorf("prompt position %d: argmax %d, golden %d (margin_rel %.3g)", i, got, want, c.PromptArgmaxMarginRel[i])
				}
			}
			// Greedy decode with caches, one token per step, on the
			// decode kernels where the backend has them.
			var stepLogits []float32
			if c.GreedyStepLogits != nil {
				stepLogits = gm.floats(t, c.GreedyStepLogits.Tensor)
			}
			row := last
			for i, step := range c.GreedySteps {
				if stepLogits != nil {
					checkClose(t, fmt.Sprintf("greedy step %d logits", i), row, stepLogits[i*vocab:(i+1)*vocab], tol)
				}
				got := argmax(row)
				if got != step.Token {
					t.Errorf("greedy step %d: token %d, golden %d (margin_rel %.3g)", i, got, step.Token, step.MarginRel)
				}
				if step.MarginRel < marginRule || got != step.Token {
					break // a legitimate flip here changes the rest
				}
				out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: []int{got}, Decode: true}})
				if err != nil {
					t.Fatal(err)
				}
				row = out[0].Logits
			}
		})
	}
	t.Run("hidden_states", func(t *testing.T) {
		hs := g.Debug.HiddenStates
		want := gm.floats(t, hs.Tensor)
		per := hs.Shape[1] * hs.Shape[2]
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		seen := 0
		_, err = m.StepTrace(context.Background(), []Input{{Seq: seq, Tokens: hs.Prompt}}, func(layer int, h []float32) {
			checkClose(t, fmt.Sprintf("hidden state %d", layer), h, want[layer*per:(layer+1)*per], g.Tolerances.HiddenRelMax)
			seen++
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != hs.Shape[0] {
			t.Errorf("traced %d hidden states, golden has %d", seen, hs.Shape[0])
		}
	})
}

func TestGoldenTiny(t *testing.T)  { runGoldens(t, "tiny", Options{}) }
func TestGoldenSmall(t *testing.T) { runGoldens(t, "small", Options{}) }

// TestGoldenSmallSteps runs the goldens with passes of 7 tokens, so every
// prompt is split across passes inside one Step.
func TestGoldenSmallSteps(t *testing.T) { runGoldens(t, "small", Options{MaxStepTokens: 7}) }

// TestGoldenKernelSets runs the goldens with each CPU kernel set: the pure-Go
// twins, AVX2 and the best the CPU has, with bf16 weights in the row-major
// layout and (AVX-512) on the FMA products of the tile layout, and the
// default backend (on AMX tiles where the CPU has them: prompt rows on the
// tiles, inputs in three bf16 parts, decode rows and logits on FMA over
// the tile layout).
func TestGoldenKernelSets(t *testing.T) {
	sets := map[string]cpu.Options{
		"generic":        {Kernels: asm.Generic()},
		"avx2":           {Kernels: asm.New(asm.Features{AVX2: true})},
		"best":           {NoAMXTiles: true},
		"best/row-major": {NoAMXTiles: true, NoFMATiles: true},
	}
	for name, o := range sets {
		t.Run(name, func(t *testing.T) {
			be := cpu.New(o)
			defer be.Close()
			runGoldens(t, "tiny", Options{Backend: be})
		})
	}
	for _, shape := range []string{"tiny", "small"} {
		t.Run("default/"+shape, func(t *testing.T) {
			be := cpu.New(cpu.Options{})
			defer be.Close()
			runGoldens(t, shape, Options{Backend: be})
		})
	}
}

// TestAllArgmax checks AllArgmax against the argmax of AllLogits rows, with
// the prompt split over passes (MaxStepTokens 7) and beside a sequence
// that asks for its last argmax only, in the same steps.
func TestAllArgmax(t *testing.T) {
	gm := loadGolden(t, "small", Options{MaxStepTokens: 7})
	m := gm.m
	vocab := m.Config().VocabSize
	var prompt []int
	for _, c := range gm.g.Cases {
		if len(c.Prompt) > len(prompt) {
			prompt = c.Prompt
		}
	}
	if len(prompt) < 15 {
		t.Fatalf("longest golden prompt has %d tokens, the test needs 15", len(prompt))
	}
	seq, logits := prefill(t, m, prompt, 0, true)
	seq.Close()
	a, _ := m.NewSequence()
	defer a.Close()
	b, _ := m.NewSequence()
	defer b.Close()
	out, err := m.Step(context.Background(), []Input{
		{Seq: b, Tokens: prompt[:5], Logits: LastArgmax},
		{Seq: a, Tokens: prompt, Logits: AllArgmax},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[1].Logits != nil || len(out[1].Argmaxes) != len(prompt) {
		t.Fatalf("AllArgmax gave %d logits and %d argmaxes for %d tokens", len(out[1].Logits), len(out[1].Argmaxes), len(prompt))
	}
	for i, got := range out[1].Argmaxes {
		if want := argmax(logits[i*vocab : (i+1)*vocab]); got != want {
			t.Errorf("position %d: argmax %d, AllLogits row's %d", i, got, want)
		}
	}
	if out[1].Argmax != out[1].Argmaxes[len(prompt)-1] {
		t.Errorf("Argmax %d, last of Argmaxes %d", out[1].Argmax, out[1].Argmaxes[len(prompt)-1])
	}
	if want := argmax(logits[4*vocab : 5*vocab]); out[0].Argmax != want || out[0].Argmaxes != nil {
		t.Errorf("LastArgmax beside it: %d (argmaxes %v), want %d", out[0].Argmax, out[0].Argmaxes, want)
	}
}

// TestLogitsInto checks that a step writes its logits into
// Input.LogitsInto when it has room (the same values as a fresh slice,
// AllLogits and LastLogits) and allocates when it has not.
func TestLogitsInto(t *testing.T) {
	gm := loadGolden(t, "small", Options{MaxStepTokens: 7})
	m := gm.m
	vocab := m.Config().VocabSize
	prompt := gm.g.Cases[len(gm.g.Cases)-1].Prompt
	_, want := prefill(t, m, prompt, 0, true)
	for _, c := range []struct {
		mode LogitsMode
		cap  int
	}{{AllLogits, len(prompt) * vocab}, {AllLogits, len(prompt)*vocab - 1}, {LastLogits, vocab}, {LastLogits, 3 * vocab}, {LastLogits, vocab - 1}} {
		seq, _ := m.NewSequence()
		buf := make([]float32, c.cap)
		for i := range buf {
			buf[i] = float32(math.NaN())
		}
		out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: prompt, Logits: c.mode, LogitsInto: buf[:0]}})
		seq.Close()
		if err != nil {
			t.Fatal(err)
		}
		w := want
		if c.mode == LastLogits {
			w = want[len(want)-vocab:]
		}
		got := out[0].Logits
		if len(got) != len(w) {
			t.Fatalf("mode %d, room %d: %d logits, want %d", c.mode, c.cap, len(got), len(w))
		}
		if inBuf, room := &got[0] == &buf[0], c.cap >= len(w); inBuf != room {
			t.Errorf("mode %d, room %d for %d logits: written into the buffer: %v", c.mode, c.cap, len(w), inBuf)
		}
		for i := range w {
			if math.Float32bits(got[i]) != math.Float32bits(w[i]) {
				t.Fatalf("mode %d, room %d: logit %d is %v, want %v", c.mode, c.cap, i, got[i], w[i])
			}
		}
	}
}
