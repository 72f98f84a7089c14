package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/safetensors"
)

// loraAdapters are testdata/lora's adapters for testdata/models/small,
// with float64 goldens of the adapted model (testdata/lora/README.md).
var loraAdapters = []string{"lora-small-a", "lora-small-b"}

// loraGolden is an adapter's golden.json and golden.safetensors.
type loraGolden struct {
	Cases []struct {
		Name        string       `json:"name"`
		Prompt      []int        `json:"prompt"`
		LastLogits  tensorRef    `json:"last_logits"`
		GreedySteps []goldenStep `json:"greedy_steps"`
		BaseTokens  []int        `json:"base_model_greedy_tokens"`
	} `json:"cases"`
	Tolerances struct {
		LogitsRelMax float64 `json:"logits_rel_max"`
	} `json:"recommended_tolerances"`
	tensors *safetensors.File
}

type goldenStep struct {
	Token     int     `json:"token"`
	MarginRel float64 `json:"margin_rel"`
}

func loraDir(name string) string { return filepath.Join("..", "testdata", "lora", name) }

func loadLoRAGolden(t testing.TB, name string) *loraGolden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(loraDir(name), "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := &loraGolden{}
	if err := json.Unmarshal(data, g); err != nil {
		t.Fatalf("%s golden.json: %v", name, err)
	}
	if g.Tolerances.LogitsRelMax <= 0 || len(g.Cases) == 0 {
		t.Fatalf("%s golden.json has no cases or tolerances", name)
	}
	if g.tensors, err = safetensors.Open(filepath.Join(loraDir(name), "golden.safetensors")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.tensors.Close() })
	return g
}

func (g *loraGolden) floats(t testing.TB, name string) []float32 {
	t.Helper()
	ten, ok := g.tensors.Tensor(name)
	if !ok {
		t.Fatalf("golden tensor %s missing", name)
	}
	v, err := ten.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func loadAdapter(t testing.TB, name string) *lora.Adapter {
	t.Helper()
	ad, err := lora.Load(loraDir(name))
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// attach attaches testdata/lora's adapter name to m.
func attach(t testing.TB, m *Model, name string) *Adapter {
	t.Helper()
	a, err := m.AttachAdapter(name, loadAdapter(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkLoRAGoldens runs every case of adapter name's goldens on m, whose
// sequences run with the adapters newSeq gives them: the last logits, and
// greedy decoding until the first step whose margin is below the rule.
func checkLoRAGoldens(t *testing.T, m *Model, name string, uses []AdapterUse) {
	g := loadLoRAGolden(t, name)
	vocab := m.Config().VocabSize
	for _, c := range g.Cases {
		t.Run(name+"/"+c.Name, func(t *testing.T) {
			seq, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer seq.Close()
			if err := seq.SetAdapters(uses); err != nil {
				t.Fatal(err)
			}
			out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: c.Prompt}})
			if err != nil {
				t.Fatal(err)
			}
			row := out[0].Logits
			checkClose(t, "last_logits", row, g.floats(t, c.LastLogits.Tensor), g.Tolerances.LogitsRelMax)
			var got []int
			for i, step := range c.GreedySteps {
				tok := argmax(row[:vocab])
				got = append(got, tok)
				if tok != step.Token {
					t.Fatalf("greedy step %d: token %d, golden %d (margin_rel %.3g); tokens %v", i, tok, step.Token, step.MarginRel, got)
				}
				if step.MarginRel < marginRule {
					break
				}
				out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: []int{tok}, Decode: true}})
				if err != nil {
					t.Fatal(err)
				}
				row = out[0].Logits
			}
			if len(got) >= 2 && slices.Equal(got, c.BaseTokens[:len(got)]) {
				t.Errorf("greedy tokens %v are the base model's: the adapter did nothing", got)
			}
		})
	}
}

// TestLoRAGoldens checks the small model with each adapter of testdata/lora
// against the float64 goldens of the adapted model, unmerged.
func TestLoRAGoldens(t *testing.T) { runLoRAGoldens(t, Options{}) }

func runLoRAGoldens(t *testing.T, o Options) {
	m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, o))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, name := range loraAdapters {
		a := attach(t, m, name)
		checkLoRAGoldens(t, m, name, []AdapterUse{{Adapter: a, Scale: 1}})
	}
}

// TestLoRAMixedBatch runs sequences of two adapters and of the base model
// in one step, prompts and decodes mixed, cut into passes, and checks that
// every sequence gets, bit for bit, what it gets alone.
func TestLoRAMixedBatch(t *testing.T) { checkLoRAMixedBatch(t, Options{MaxStepTokens: 48}) }

func checkLoRAMixedBatch(t *testing.T, o Options) {
	m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, o))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, b := attach(t, m, "lora-small-a"), attach(t, m, "lora-small-b")
	sets := [][]AdapterUse{
		{{Adapter: a, Scale: 1}},
		nil,
		{{Adapter: b, Scale: 1}},
		{{Adapter: a, Scale: 1}},
		{{Adapter: a, Scale: 0.5}, {Adapter: b, Scale: 2}},
	}
	prompts := [][]int{{11, 12, 13, 14, 15, 16, 17}, {21, 22, 23}, {31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50}, {61, 62}, {71, 72, 73, 74, 75}}
	// solo: each sequence alone, prompt then three greedy tokens.
	type trace struct{ logits [][]float32 }
	run := func(together bool) []trace {
		seqs := make([]*Sequence, len(sets))
		for i := range seqs {
			if seqs[i], err = m.NewSequence(); err != nil {
				t.Fatal(err)
			}
			defer seqs[i].Close()
			if err := seqs[i].SetAdapters(sets[i]); err != nil {
				t.Fatal(err)
			}
		}
		out := make([]trace, len(sets))
		next := make([][]int, len(sets))
		step := func(idx []int, decode bool) {
			var in []Input
			for _, i := range idx {
				toks := prompts[i]
				if decode {
					toks = next[i]
				}
				in = append(in, Input{Seq: seqs[i], Tokens: toks, Decode: decode})
			}
			res, err := m.Step(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			for j, i := range idx {
				out[i].logits = append(out[i].logits, res[j].Logits)
				next[i] = []int{argmax(res[j].Logits)}
			}
		}
		all := []int{0, 1, 2, 3, 4}
		for round := range 4 {
			if together {
				// Decoding sequences first, as the engine orders them.
				step(all, round > 0)
				continue
			}
			for _, i := range all {
				step([]int{i}, round > 0)
			}
		}
		return out
	}
	solo, mixed := run(false), run(true)
	for i := range solo {
		for s := range solo[i].logits {
			if !slices.Equal(solo[i].logits[s], mixed[i].logits[s]) {
				t.Errorf("sequence %d (adapters %d) step %d: logits differ in a mixed batch (rel %.3g)", i, len(sets[i]), s, relErr(mixed[i].logits[s], solo[i].logits[s]))
			}
		}
	}
	// The base sequence equals a model without adapters.
	base, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{Backend: o.Backend, MaxStepTokens: o.MaxStepTokens}))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	seq, err := base.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	res, err := base.Step(context.Background(), []Input{{Seq: seq, Tokens: prompts[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res[0].Logits, solo[1].logits[0]) {
		t.Errorf("a sequence without adapters differs from the base model")
	}
}

// TestLoRAScale checks a use's scale against the adapter loaded with its
// scale multiplied, and scale 0 against the base.
func TestLoRAScale(t *testing.T) {
	m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ad := loadAdapter(t, "lora-small-a")
	a, err := m.AttachAdapter("a", ad)
	if err != nil {
		t.Fatal(err)
	}
	scaled := *ad
	scaled.Modules = slices.Clone(ad.Modules)
	for i := range scaled.Modules {
		scaled.Modules[i].Scale *= 0.25
	}
	a4, err := m.AttachAdapter("a/4", &scaled)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{5, 6, 7, 8, 9, 10}
	logits := func(uses []AdapterUse) []float32 { return adapterLogits(t, m, uses, prompt) }
	got, want := logits([]AdapterUse{{Adapter: a, Scale: 0.25}}), logits([]AdapterUse{{Adapter: a4, Scale: 1}})
	if e := relErr(got, want); e > 1e-5 {
		t.Errorf("scale 0.25: rel err %.3g against the adapter scaled at load", e)
	}
	if e := relErr(got, logits([]AdapterUse{{Adapter: a, Scale: 1}})); e < 1e-3 {
		t.Errorf("scale 0.25 gives the logits of scale 1 (rel %.3g)", e)
	}
	if !slices.Equal(logits([]AdapterUse{{Adapter: a, Scale: 0}}), logits(nil)) {
		t.Errorf("scale 0 differs from the base model")
	}
}

// TestLoRAAttachErrors checks that adapters that do not fit the model are
// refused with messages naming the module, and that an adapter in use
// cannot be closed.
func TestLoRAAttachErrors(t *testing.T) {
	m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	edit := func(f func(*lora.Adapter)) *lora.Adapter {
		ad := loadAdapter(t, "lora-small-b")
		ad.Modules = slices.Clone(ad.Modules)
		f(ad)
		return ad
	}
	for _, c := range []struct {
		name string
		ad   *lora.Adapter
		want string
	}{
		{"other base", edit(func(a *lora.Adapter) {
			md := &a.Modules[0]
			md.In++
			md.A = append(md.A, make([]float32, md.Rank)...)
		}), "another base"},
		{"unknown module", edit(func(a *lora.Adapter) { a.Modules[0].Name = "model.language_model.layers.0.linear_attn.conv1d" }), "not a linear"},
		{"layer out of range", edit(func(a *lora.Adapter) {
			a.Modules[0].Name = strings.Replace(a.Modules[0].Name, "layers.0.", "layers.99.", 1)
		}), "not a linear"},
		{"vision", edit(func(a *lora.Adapter) { a.Modules[0].Name = "model.visual.blocks.0.attn.qkv" }), "not a linear"},
		{"empty", &lora.Adapter{}, "no modules"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.AttachAdapter("x", c.ad)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	a := attach(t, m, "lora-small-b")
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	if err := seq.SetAdapters([]AdapterUse{{Adapter: a, Scale: 1}}); err != nil {
		t.Fatal(err)
	}
	if a.Close() {
		t.Fatal("the memory of an adapter a sequence uses was released")
	}
	if a.mods == nil {
		t.Fatal("an adapter in use lost its matrices")
	}
	seq.Close()
	if a.mods != nil || a.InUse() != 0 {
		t.Fatal("the last sequence's close did not release the closed adapter")
	}
	seq2, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq2.Close()
	if err := seq2.SetAdapters([]AdapterUse{{Adapter: a, Scale: 1}}); err == nil {
		t.Fatal("a closed adapter was accepted")
	}
	if err := seq2.SetAdapters([]AdapterUse{{Adapter: attach(t, m, "lora-small-b"), Scale: float32(math.NaN())}}); err == nil {
		t.Fatal("a NaN scale was accepted")
	}
}

// TestLoRAMergedGoldens checks each adapter merged into the weights while
// they load against the goldens of the adapted model.
func TestLoRAMergedGoldens(t *testing.T) { runLoRAMergedGoldens(t, Options{}) }

func runLoRAMergedGoldens(t *testing.T, o Options) {
	for _, name := range loraAdapters {
		o := o
		o.Merge = []MergedAdapter{{Adapter: loadAdapter(t, name), Scale: 1}}
		m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, o))
		if err != nil {
			t.Fatal(err)
		}
		checkLoRAGoldens(t, m, name, nil)
		m.Close()
	}
}

// TestLoRAMergeErrors checks that merging an adapter that does not fit
// the model fails to open it, naming the module.
func TestLoRAMergeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*lora.Adapter)
		want string
	}{
		{"other base", func(a *lora.Adapter) {
			md := &a.Modules[0]
			md.In++
			md.A = append(md.A, make([]float32, md.Rank)...)
		}, "another base"},
		{"missing layer", func(a *lora.Adapter) {
			a.Modules[0].Name = strings.Replace(a.Modules[0].Name, "layers.0.", "layers.99.", 1)
		}, "layers.99"},
		{"not a linear", func(a *lora.Adapter) { a.Modules[0].Name = "model.language_model.layers.0.linear_attn.conv1d" }, "not a linear"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ad := loadAdapter(t, "lora-small-b")
			ad.Modules = slices.Clone(ad.Modules)
			c.edit(ad)
			m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}}))
			if err == nil {
				m.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestLoRAMergeFormat checks MergeFormat "base": the merged matrices keep
// the checkpoint's BF16 (the update rounded with them, so the logits are
// near the goldens but not within their tolerance), and an unknown format
// is refused.
func TestLoRAMergeFormat(t *testing.T) {
	ad := loadAdapter(t, "lora-small-a")
	m, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}, MergeFormat: "base"}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for key, w := range m.w.linears {
		if strings.HasSuffix(key, "mlp.down_proj") && w.DType() != compute.BF16 {
			t.Errorf("%s merged as %v, want the checkpoint's BF16", key, w.DType())
		}
	}
	g := loadLoRAGolden(t, "lora-small-a")
	c := g.Cases[0]
	if e := relErr(adapterLogits(t, m, nil, c.Prompt), g.floats(t, c.LastLogits.Tensor)); e > 0.05 {
		t.Errorf("merged in BF16: rel err %.3g against the goldens, want the update rounded, not lost", e)
	}
	if _, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}, MergeFormat: "bf16"})); err == nil {
		t.Error("merge format bf16 was accepted")
	}
}
