package randmodel

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model"
)

// familySizes is the "Sizes" table of the qwen35-moe spec: the text part of
// every Qwen3.5 release.
var familySizes = []struct {
	name                          string
	hidden, layers, heads, kv     int
	ffn, linearV, linearK         int
	tied                          bool
	experts, top, width, sharedFF int
}{
	{"qwen3.5-0.8b", 1024, 24, 8, 2, 3584, 16, 16, true, 0, 0, 0, 0},
	{"qwen3.5-2b", 2048, 24, 8, 2, 6144, 16, 16, true, 0, 0, 0, 0},
	{"qwen3.5-4b", 2560, 32, 16, 4, 9216, 32, 16, true, 0, 0, 0, 0},
	{"qwen3.5-9b", 4096, 32, 16, 4, 12288, 32, 16, false, 0, 0, 0, 0},
	{"qwen3.5-27b", 5120, 64, 24, 4, 17408, 48, 16, false, 0, 0, 0, 0},
	{"qwen3.5-35b-a3b", 2048, 40, 16, 2, 0, 32, 16, false, 256, 8, 512, 512},
	{"qwen3.5-122b-a10b", 3072, 48, 32, 2, 0, 64, 16, false, 256, 8, 1024, 1024},
	{"qwen3.5-397b-a17b", 4096, 60, 32, 2, 0, 64, 16, false, 512, 10, 1024, 1024},
}

// TestFamilyConfigs checks every family shape's config.json, as
// model.ParseConfig reads it, against the spec's table and the widths
// common to the family.
func TestFamilyConfigs(t *testing.T) {
	for _, want := range familySizes {
		t.Run(want.name, func(t *testing.T) {
			s, err := LookupShape(want.name)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(s.Config())
			if err != nil {
				t.Fatal(err)
			}
			c, err := model.ParseConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			type sizes struct {
				Hidden, Layers, Heads, KV, FFN, LinearV, LinearK int
				Tied                                             bool
				Experts, Top, Width, Shared                      int
			}
			got := sizes{c.HiddenSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.IntermediateSize,
				c.LinearNumValueHeads, c.LinearNumKeyHeads, c.TieWordEmbeddings,
				c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertIntermediateSize}
			if w := (sizes{want.hidden, want.layers, want.heads, want.kv, want.ffn, want.linearV, want.linearK, want.tied,
				want.experts, want.top, want.width, want.sharedFF}); got != w {
				t.Errorf("sizes\n got %+v\nwant %+v", got, w)
			}
			if c.VocabSize != 248320 || c.HeadDim != 256 || c.RotaryDim() != 64 || c.RopeTheta != 1e7 ||
				!slices.Equal(c.MRopeSection, []int{11, 11, 10}) || c.LinearKeyHeadDim != 128 ||
				c.LinearValueHeadDim != 128 || c.LinearConvKernel != 4 || c.MaxContext() != 262144 {
				t.Errorf("common widths: %+v", c)
			}
			if !slices.Equal(c.LayerTypes, LayerTypes(want.layers)) || c.LayerTypes[3] != model.FullAttention {
				t.Errorf("layer_types %v", c.LayerTypes)
			}
			var top struct {
				Architectures []string       `json:"architectures"`
				ModelType     string         `json:"model_type"`
				Text          map[string]any `json:"text_config"`
			}
			if err := json.Unmarshal(raw, &top); err != nil {
				t.Fatal(err)
			}
			arch, mt, textMT := "Qwen3_5ForConditionalGeneration", "qwen3_5", "qwen3_5_text"
			if want.experts > 0 {
				arch, mt, textMT = "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "qwen3_5_moe_text"
				if _, ok := top.Text["intermediate_size"]; ok {
					t.Error("a MoE config has intermediate_size")
				}
			}
			if !slices.Equal(top.Architectures, []string{arch}) || top.ModelType != mt || top.Text["model_type"] != textMT {
				t.Errorf("architectures %v, model_type %q, text model_type %v; want %s, %s, %s",
					top.Architectures, top.ModelType, top.Text["model_type"], arch, mt, textMT)
			}
			if top.Text["mtp_num_hidden_layers"] != 1.0 {
				t.Errorf("mtp_num_hidden_layers %v, want 1", top.Text["mtp_num_hidden_layers"])
			}
		})
	}
}

// TestTensorsMatchModel checks, without writing anything, that every shape
// writes exactly the tensors, with the shapes, that package model binds for
// its config, MTP head included.
func TestTensorsMatchModel(t *testing.T) {
	for _, s := range Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			raw, err := json.Marshal(s.Config())
			if err != nil {
				t.Fatal(err)
			}
			c, err := model.ParseConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]int{}
			for _, ts := range append(model.TextTensors(c, "model.language_model."), model.MTPTensors(c)...) {
				want[ts.Name] = ts.Shape
			}
			specs := s.specs(Options{MTP: true})
			if len(specs) != len(want) {
				t.Errorf("%d tensors, model binds %d", len(specs), len(want))
			}
			for _, ts := range specs {
				if w, ok := want[ts.name]; !ok || !slices.Equal(w, ts.shape) {
					t.Errorf("%s %v: model wants %v (bound %v)", ts.name, ts.shape, w, ok)
				}
			}
		})
	}
}

// TestGenerateChunks checks that a tensor's bytes do not depend on the
// chunks it is generated in.
func TestGenerateChunks(t *testing.T) {
	s, err := LookupShape("qwen3.5-35b-a3b")
	if err != nil {
		t.Fatal(err)
	}
	spec := s.mtpTensors()[0] // mtp.fc, whose values depend on the index
	spec.shape = []int{5*block + 123}
	n := elements(spec.shape)
	whole := make([]byte, 2*n)
	generate(spec, 9, 0, n, whole)
	pieces := make([]byte, 2*n)
	for _, cut := range [][2]int{{0, block}, {block, 3 * block}, {3 * block, n}} {
		generate(spec, 9, cut[0], cut[1], pieces[2*cut[0]:2*cut[1]])
	}
	if !slices.Equal(whole, pieces) {
		t.Error("chunked generation differs from generating the whole tensor")
	}
}

// TestConfigOnly writes the configs of the two largest shapes, too large
// to write here, and reads them back with model.LoadConfig.
func TestConfigOnly(t *testing.T) {
	for _, name := range []string{"qwen3.5-122b-a10b", "qwen3.5-397b-a17b"} {
		s, err := LookupShape(name)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := WriteConfig(dir, s, Options{}); err != nil {
			t.Fatal(err)
		}
		c, err := model.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.HiddenSize != s.Hidden || c.NumLayers != s.Layers || c.NumExperts != s.Experts ||
			c.NumExpertsPerTok != s.ExpertsPerTok || c.MoEIntermediateSize != s.ExpertWidth ||
			c.SharedExpertIntermediateSize != s.SharedExpertWidth || c.IntermediateSize != 0 {
			t.Errorf("%s: loaded %+v", name, c)
		}
		if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); !os.IsNotExist(err) {
			t.Errorf("%s: WriteConfig wrote weights (%v)", name, err)
		}
	}
}

// TestSize checks Size against the file Write makes.
func TestSize(t *testing.T) {
	s, err := LookupShape("tiny")
	if err != nil {
		t.Fatal(err)
	}
	s.Experts, s.ExpertsPerTok, s.ExpertWidth, s.SharedExpertWidth = 4, 2, 16, 24
	o := Options{Seed: 1, MTP: true, Vision: true}
	dir := t.TempDir()
	if err := Write(dir, s, o); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	sz := Size(s, o)
	// The file is its tensors' data after an 8-byte length and a JSON
	// header of a few kilobytes.
	if header := fi.Size() - sz.Total; header < 8 || header > 64<<10 {
		t.Errorf("file of %d bytes for %d bytes of tensors", fi.Size(), sz.Total)
	}
	var layers int64
	for _, n := range sz.Layers {
		layers += n
	}
	if sz.Layers[0] == 0 || sz.Layers[0] == sz.Layers[3] || sz.Embeddings != int64(2*s.Vocab*s.Hidden) /* tied, BF16 */ ||
		layers+sz.Embeddings >= sz.Total {
		t.Errorf("sizes %+v", sz)
	}
}

// runShape writes shape s with opts, opens it on the CPU and feeds it a
// few tokens: the logits must be finite and the residual stream must stay
// in a healthy range through every layer.
func runShape(t *testing.T, s Shape, o Options) {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, s, o); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Open(dir, model.Options{Backend: be, MTP: o.MTP})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.Config(); got.HiddenSize != s.Hidden || got.NumExperts != s.Experts || got.NumLayers != s.Layers {
		t.Fatalf("opened %+v", got)
	}
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	var rms []float64
	out, err := m.StepTrace(context.Background(), []model.Input{{Seq: seq, Tokens: []int{1, 17, 280, 3}, Logits: model.LastLogits}},
		func(_ int, hidden []float32) {
			var sq float64
			for _, v := range hidden {
				sq += float64(v) * float64(v)
			}
			rms = append(rms, math.Sqrt(sq/float64(len(hidden))))
		})
	if err != nil {
		t.Fatal(err)
	}
	logits := out[0].Logits
	if len(logits) != s.Vocab {
		t.Fatalf("%d logits, want %d", len(logits), s.Vocab)
	}
	var sq float64
	for _, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
		sq += float64(v) * float64(v)
	}
	std := math.Sqrt(sq / float64(len(logits)))
	for _, r := range rms {
		if r < 0.05 || r > 50 {
			t.Errorf("residual RMS %.3g after a layer (all: %.3g): the random weights' scale is off", r, rms)
			break
		}
	}
	if std < 0.1 || std > 50 {
		t.Errorf("logits RMS %.3g: the random weights' scale is off", std)
	}
	t.Logf("residual RMS per layer %.3g, logits RMS %.3g", rms, std)
}

// TestFamilyShapesRun writes two layers of family shapes at their real
// widths (a vocabulary of 4,096 in place of 248,320, and the 35B-A3B with 16
// of its 256 experts, 8 of them per token, and its MTP head), opens each on
// the CPU and runs a step.
// The 27B's layers (1.5 GB for two) and the whole 35B-A3B layers (3.4 GB)
// take half a minute or more on two cores: GOVINFER_TEST_FULL_SHAPES=1
// adds them, with their real vocabulary, to the run.
func TestFamilyShapesRun(t *testing.T) {
	full := os.Getenv("GOVINFER_TEST_FULL_SHAPES") != ""
	cases := []struct {
		name, variant string
		vocab         int
		experts       int
		full          bool
	}{
		{"qwen3.5-0.8b", "vocab-4096", 4096, 0, false},
		{"qwen3.5-2b", "vocab-4096", 4096, 0, false},
		{"qwen3.5-4b", "vocab-4096", 4096, 0, false},
		{"qwen3.5-35b-a3b", "vocab-4096-16-experts", 4096, 16, false},
		{"qwen3.5-27b", "full", 0, 0, true},
		{"qwen3.5-35b-a3b", "full", 0, 0, true},
	}
	for _, tc := range cases {
		s, err := LookupShape(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		s.Layers = 2
		if tc.vocab > 0 {
			s.Vocab = tc.vocab
		}
		if tc.experts > 0 {
			s.Experts = tc.experts
		}
		t.Run(s.Name+"/"+tc.variant, func(t *testing.T) {
			if tc.full && (!full || testing.Short()) {
				t.Skip("set GOVINFER_TEST_FULL_SHAPES=1 to write and run the whole layers (not with -short)")
			}
			if !tc.full {
				// Writing waits on the disk: another case computes
				// meanwhile. (The full ones, 7 GB each, run alone.)
				t.Parallel()
			}
			runShape(t, s, Options{Seed: 5, MTP: s.MoE()})
		})
	}
}
