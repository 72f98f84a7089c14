package profile_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/computetest"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/compute/profile"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/quant"
)

var tinyDir = filepath.Join("..", "..", "testdata", "models", "tiny")

// TestConformance runs the backend conformance suite through the wrapper.
func TestConformance(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend { return profile.New(cpu.New(cpu.Options{Threads: 2})) })
}

func TestWeightRole(t *testing.T) {
	for name, want := range map[string]string{
		"model.language_model.layers.3.self_attn.q_proj.weight":        "q_proj",
		"model.language_model.layers.0.linear_attn.in_proj_qkv.weight": "in_proj_qkv",
		"model.layers.1.mlp.down_proj.weight":                          "down_proj",
		"lm_head.weight":                                               "lm_head",
		"model.language_model.embed_tokens.weight":                     "lm_head",
		"model.language_model.layers.0.linear_attn.A_log":              "A_log",
	} {
		if got := profile.WeightRole(name); got != want {
			t.Errorf("WeightRole(%q) = %q, want %q", name, got, want)
		}
	}
}

// run prefills prompt and decodes steps tokens greedily on be, returning
// the prefill's logits and the decoded tokens; with prof, it returns the
// profile of the last decode step too.
func run(t *testing.T, be compute.Backend, prompt []int, steps int, prof *profile.Backend) (logits []float32, toks []int, last []profile.Entry) {
	t.Helper()
	m, err := model.Open(tinyDir, model.Options{Backend: be})
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
	out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: prompt, Logits: model.AllLogits}})
	if err != nil {
		t.Fatal(err)
	}
	logits = out[0].Logits
	tok := compute.Argmax(logits[len(logits)-m.Config().VocabSize:])
	for range steps {
		if prof != nil {
			prof.ResetProfile()
		}
		out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{tok}, Logits: model.LastLogits}})
		if err != nil {
			t.Fatal(err)
		}
		tok = compute.Argmax(out[0].Logits)
		toks = append(toks, tok)
		logits = append(logits, out[0].Logits...)
	}
	if prof != nil {
		last = prof.Profile()
	}
	return logits, toks, last
}

// TestModel checks, on the tiny model, that the wrapper changes no bit of
// the logits, and that a decode step's profile counts one product per
// projection per layer under the weight's role, and the per-layer
// operations once per layer of their kind.
func TestModel(t *testing.T) {
	prompt := []int{1, 17, 300, 42, 999, 5, 77, 640}
	plain := cpu.New(cpu.Options{Threads: 2})
	defer plain.Close()
	wantLogits, wantToks, _ := run(t, plain, prompt, 3, nil)

	prof := profile.New(cpu.New(cpu.Options{Threads: 2}))
	defer prof.Close()
	gotLogits, gotToks, last := run(t, prof, prompt, 3, prof)
	if len(gotLogits) != len(wantLogits) {
		t.Fatalf("%d logits, want %d", len(gotLogits), len(wantLogits))
	}
	for i := range wantLogits {
		if math.Float32bits(gotLogits[i]) != math.Float32bits(wantLogits[i]) {
			t.Fatalf("logit %d: %v with the wrapper, %v without", i, gotLogits[i], wantLogits[i])
		}
	}
	for i := range wantToks {
		if gotToks[i] != wantToks[i] {
			t.Fatalf("token %d: %d with the wrapper, %d without", i, gotToks[i], wantToks[i])
		}
	}

	cfg, err := model.LoadConfig(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	linear := 0
	for _, k := range cfg.LayerTypes {
		if k == model.LinearAttention {
			linear++
		}
	}
	full := cfg.NumLayers - linear
	counts := map[string]int{}
	var total int
	for _, e := range last {
		counts[e.Op] = e.Count
		if e.Time < 0 {
			t.Errorf("%s: negative time %v", e.Op, e.Time)
		}
		total += e.Count
	}
	want := map[string]int{
		"embed":              1,
		"matmul lm_head":     1,
		"matmul in_proj_qkv": linear,
		"matmul in_proj_z":   linear,
		"matmul in_proj_a":   linear,
		"matmul in_proj_b":   linear,
		"matmul out_proj":    linear,
		"matmul q_proj":      full,
		"matmul k_proj":      full,
		"matmul v_proj":      full,
		"matmul o_proj":      full,
		"matmul gate_proj":   cfg.NumLayers,
		"matmul up_proj":     cfg.NumLayers,
		"matmul down_proj":   cfg.NumLayers,
		"delta_rule":         linear,
		"conv":               linear,
		"attention":          full,
	}
	for op, n := range want {
		if counts[op] != n {
			t.Errorf("decode step: %s counted %d times, want %d (profile %+v)", op, counts[op], n, last)
		}
	}
	if counts["matmul"] != 0 {
		t.Errorf("products with unnamed weights: %+v", last)
	}
	prof.ResetProfile()
	if p := prof.Profile(); len(p) != 0 {
		t.Errorf("after ResetProfile: %+v", p)
	}
}

// TestPhases checks that a product's quantizing of its inputs on the CPU
// backend is an entry of its own, taken out of the product's time.
func TestPhases(t *testing.T) {
	const rows, cols, n = 64, 256, 4
	w := make([]byte, rows*quant.Q8_0.RowBytes(cols))
	src := make([]float32, cols)
	for r := range rows {
		for c := range src {
			src[c] = float32((r*cols+c)%17) - 8
		}
		if err := quant.QuantizeRow(quant.Q8_0, w[r*quant.Q8_0.RowBytes(cols):(r+1)*quant.Q8_0.RowBytes(cols)], src); err != nil {
			t.Fatal(err)
		}
	}
	prof := profile.New(cpu.New(cpu.Options{Threads: 2}))
	defer prof.Close()
	wt, err := prof.LoadWeight("model.layers.0.mlp.up_proj.weight", compute.Q8_0, rows, cols, w)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := prof.NewBuffer(n * cols)
	dst, _ := prof.NewBuffer(n * rows)
	prof.ResetProfile()
	start := time.Now()
	prof.MatMul(dst, x, wt, n)
	wall := time.Since(start)
	got := map[string]profile.Entry{}
	var sum time.Duration
	for _, e := range prof.Profile() {
		got[e.Op] = e
		sum += e.Time
	}
	for _, op := range []string{"matmul up_proj", "matmul " + cpu.PhaseQuantizeInputs} {
		if e := got[op]; e.Count != 1 || e.Time <= 0 {
			t.Errorf("%s: %+v, want one call of positive time (profile %+v)", op, e, got)
		}
	}
	if len(got) != 2 || sum > wall {
		t.Errorf("profile %+v sums to %v over a call of %v", got, sum, wall)
	}
}
