package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/safetensors"
)

// TestGoldenMoETiny runs the mixture-of-experts checkpoint against its
// float64 goldens: every case's logits, argmaxes, greedy tokens and the
// hidden states of every layer.
func TestGoldenMoETiny(t *testing.T) { runGoldens(t, "moe-tiny", Options{}) }

// moeTiny is the mixture-of-experts checkpoint with goldens.
var moeTiny = filepath.Join("..", "testdata", "models", "moe-tiny")

// TestMTPGoldensMoE checks the MTP head whose MLP is a mixture of
// experts: teacher-forced outputs, the draft chain, and greedy speculative
// decoding for k = 1..4 against plain greedy decoding.
func TestMTPGoldensMoE(t *testing.T) {
	runMTPGoldens(t, Options{}, moeTiny)
	runSpeculativeGoldens(t, Options{}, moeTiny)
}

// TestMTPGoldensMoECut runs them again with passes of a few tokens, so
// prompts and verify steps are cut across passes.
func TestMTPGoldensMoECut(t *testing.T) {
	runMTPGoldens(t, Options{MaxStepTokens: 7}, moeTiny)
	runSpeculativeGoldens(t, Options{MaxStepTokens: 3}, moeTiny)
}

// checkMoEBatchInvariant checks that a sequence's logits do not depend on
// the sequences that share its steps, bit for bit: decoded tokens beside
// other decodes and prompts that route to other experts, and prompts
// beside them, each against the same step alone.
func checkMoEBatchInvariant(t *testing.T, opts Options) {
	gm := loadGolden(t, "moe-tiny", opts)
	m := gm.m
	vocab := m.Config().VocabSize
	r := rand.New(rand.NewPCG(3, 4))
	tokens := func(n int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = r.IntN(vocab)
		}
		return ids
	}
	type job struct {
		history, next []int
		decode        bool
	}
	jobs := []job{
		{tokens(9), tokens(1), true},
		{tokens(30), tokens(1), true},
		{tokens(2), tokens(1), true},
		{nil, tokens(40), false},
		{tokens(5), tokens(13), false},
	}
	ctx := context.Background()
	start := func(j job) *Sequence {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { seq.Close() })
		if len(j.history) > 0 {
			if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: j.history}}); err != nil {
				t.Fatal(err)
			}
		}
		return seq
	}
	want := make([][]float32, len(jobs))
	for i, j := range jobs {
		out, err := m.Step(ctx, []Input{{Seq: start(j), Tokens: j.next, Logits: AllLogits, Decode: j.decode}})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out[0].Logits
	}
	// Decodes first, as the engine orders a step.
	in := make([]Input, len(jobs))
	for i, j := range jobs {
		in[i] = Input{Seq: start(j), Tokens: j.next, Logits: AllLogits, Decode: j.decode}
	}
	out, err := m.Step(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if !slices.EqualFunc(out[i].Logits, want[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Errorf("job %d: logits in the batch differ from alone (rel %.3g)", i, relErr(out[i].Logits, want[i]))
		}
	}
}

// TestMoEBatchInvariant checks batch invariance on the default CPU backend
// and on the pure-Go kernels.
func TestMoEBatchInvariant(t *testing.T) {
	t.Run("default", func(t *testing.T) { checkMoEBatchInvariant(t, Options{}) })
	t.Run("generic", func(t *testing.T) {
		be := cpu.New(cpu.Options{Kernels: asm.Generic()})
		defer be.Close()
		checkMoEBatchInvariant(t, Options{Backend: be})
	})
}

// writeModuleLayout rewrites the checkpoint in src into dir with one
// module per expert (experts.{e}.{gate,up,down}_proj.weight, as the FP8
// releases store them), in shards of at most shard bytes.
func writeModuleLayout(t *testing.T, src, dir string, shard int64) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []safetensors.Tensor
	for _, name := range f.Names() {
		ten, _ := f.Tensor(name)
		p, kind, ok := strings.Cut(name, "mlp.experts.")
		if !ok {
			out = append(out, safetensors.Tensor{Name: name, DType: ten.DType, Shape: ten.Shape, Data: slices.Clone(ten.Data)})
			continue
		}
		e, rows, cols := ten.Shape[0], ten.Shape[1], ten.Shape[2]
		per := len(ten.Data) / e
		for i := range e {
			data := ten.Data[i*per : (i+1)*per]
			name := fmt.Sprintf("%smlp.experts.%d.", p, i)
			switch kind {
			case "gate_up_proj":
				half := len(data) / 2
				out = append(out,
					safetensors.Tensor{Name: name + "gate_proj.weight", DType: ten.DType, Shape: []int{rows / 2, cols}, Data: slices.Clone(data[:half])},
					safetensors.Tensor{Name: name + "up_proj.weight", DType: ten.DType, Shape: []int{rows / 2, cols}, Data: slices.Clone(data[half:])})
			case "down_proj":
				out = append(out, safetensors.Tensor{Name: name + "down_proj.weight", DType: ten.DType, Shape: []int{rows, cols}, Data: slices.Clone(data)})
			default:
				t.Fatalf("unexpected expert tensor %s", name)
			}
		}
	}
	if err := safetensors.WriteSharded(dir, out, shard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.json", "generation_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMoELayouts checks that the experts stored one module each, in a
// sharded checkpoint, give the fused layout's logits bit for bit, and that
// a checkpoint missing an expert is refused naming it.
func TestMoELayouts(t *testing.T) {
	gm := loadGolden(t, "moe-tiny", Options{})
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt
	_, want := prefill(t, gm.m, prompt, 0, true)
	dir := t.TempDir()
	writeModuleLayout(t, moeTiny, dir, 200<<10)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
		t.Fatalf("not sharded: %v", err)
	}
	m, err := Open(dir, withCPU(t, Options{MTP: true}))
	if err != nil {
		t.Fatal(err)
	}
	_, got := prefill(t, m, prompt, 0, true)
	m.Close()
	if !slices.Equal(got, want) {
		t.Errorf("one module per expert: logits differ from the fused layout's (rel %.3g)", relErr(got, want))
	}
	// An expert missing from the index.
	idx := filepath.Join(dir, "model.safetensors.index.json")
	raw, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	var index map[string]any
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	const missing = "model.language_model.layers.2.mlp.experts.5.up_proj.weight"
	delete(index["weight_map"].(map[string]any), missing)
	raw, _ = json.Marshal(index)
	if err := os.WriteFile(idx, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, withCPU(t, Options{})); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("checkpoint without %s: error %v, want one naming it", missing, err)
	}
}

// TestRouteRow checks the routing of one row against its definition:
// softmax, the k largest (ties to the lower index), ascending, weights
// renormalised.
func TestRouteRow(t *testing.T) {
	logits := []float32{0.5, 2, -1, 2, 1.5, 0.5}
	chosen, w := make([]int32, 3), make([]float32, 3)
	routeRow(chosen, w, logits, make([]float64, len(logits)), make([]float64, 3))
	if !slices.Equal(chosen, []int32{1, 3, 4}) {
		t.Errorf("chosen %v, want [1 3 4]", chosen)
	}
	e2, e15 := math.Exp(2), math.Exp(1.5)
	want := []float64{e2 / (2*e2 + e15), e2 / (2*e2 + e15), e15 / (2*e2 + e15)}
	for j := range w {
		if math.Abs(float64(w[j])-want[j]) > 1e-7 {
			t.Errorf("weight %d = %v, want %v", j, w[j], want[j])
		}
	}
	// A tie at the k-th place goes to the lower index.
	routeRow(chosen[:2], w[:2], []float32{1, 3, 1, 1}, make([]float64, 4), make([]float64, 2))
	if !slices.Equal(chosen[:2], []int32{0, 1}) {
		t.Errorf("tie: chosen %v, want [0 1]", chosen[:2])
	}
}

// TestMoEExpertBackend checks experts kept on another backend
// (Options.ExpertBackend, llama.cpp's --cpu-moe and --n-cpu-moe): with a
// second CPU backend every layer's logits, and the MTP head's drafts, are
// the single backend's bit for bit, for all layers and for the first two.
func TestMoEExpertBackend(t *testing.T) {
	gm := loadGolden(t, "moe-tiny", Options{})
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt
	_, want := prefill(t, gm.m, prompt, 0, true)
	for _, layers := range []int{-1, 2} {
		host := cpu.New(cpu.Options{})
		defer host.Close()
		m, err := Open(moeTiny, withCPU(t, Options{ExpertBackend: host, CPUMoELayers: layers}))
		if err != nil {
			t.Fatal(err)
		}
		_, got := prefill(t, m, prompt, 0, true)
		m.Close()
		if !slices.Equal(got, want) {
			t.Errorf("experts of %d layers on another backend: logits differ (rel %.3g)", layers, relErr(got, want))
		}
	}
}

// TestMoEVisionTower checks that the mixture-of-experts checkpoint's
// vision tower (the dense models' tower) opens and encodes an image to
// rows of the text model's width.
func TestMoEVisionTower(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	tw, err := vision.Open(moeTiny, vision.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	c := tw.Config()
	grid := [3]int{1, 2 * c.SpatialMergeSize, 2 * c.SpatialMergeSize}
	pix := make([]float32, grid[0]*grid[1]*grid[2]*c.InChannels*c.TemporalPatchSize*c.PatchSize*c.PatchSize)
	for i := range pix {
		pix[i] = float32(i%17)/17 - 0.5
	}
	emb, err := tw.Encode(context.Background(), pix, grid)
	if err != nil {
		t.Fatal(err)
	}
	tokens := grid[1] * grid[2] / (c.SpatialMergeSize * c.SpatialMergeSize)
	if want := tokens * 64; len(emb) != want {
		t.Fatalf("%d values, want %d (%d tokens of the text model's 64)", len(emb), want, tokens)
	}
	for i, v := range emb {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("value %d is %v", i, v)
		}
	}
}

// TestRouteNotFinite checks that router logits that are not finite are an
// error, not a panic or a silent pick.
func TestRouteNotFinite(t *testing.T) {
	c := &Config{NumExperts: 4, NumExpertsPerTok: 2}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		mo := newMoEScratch(c, 2)
		copy(mo.logits, []float32{1, 2, 3, 4, 0.5, bad, 0, 1})
		if err := mo.route(2, 4, 2); err == nil || !strings.Contains(err.Error(), "row 1") {
			t.Errorf("logit %v: error %v, want one naming row 1", bad, err)
		}
	}
}
