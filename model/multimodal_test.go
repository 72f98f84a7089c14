package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/safetensors"
)

// vlTiny is the test checkpoint with a vision tower (and MTP head, which
// the text model ignores).
var vlTiny = filepath.Join("..", "testdata", "models", "vl-tiny")

// mmGolden is the part of vl-tiny's golden.json the multimodal tests read
// (testdata/models/vl-tiny/README.md).
type mmGolden struct {
	ImageTokenID       int `json:"-"`
	VisionStartTokenID int `json:"-"`
	Images             map[string]struct {
		File    string    `json:"file"`
		Grid    [3]int    `json:"grid_thw"`
		NTokens int       `json:"n_tokens"`
		Embeds  tensorRef `json:"embeds"`
	} `json:"images"`
	Cases    []mmCase `json:"mm_cases"`
	TextCase struct {
		Prompt      []int     `json:"prompt"`
		LastLogits  tensorRef `json:"last_logits"`
		AllLogits   tensorRef `json:"all_logits"`
		GreedySteps []mmStep  `json:"greedy_steps"`
		Greedy      []int     `json:"greedy_tokens"`
	} `json:"text_case"`
	Tolerances struct {
		LogitsRelMax float64 `json:"logits_rel_max"`
		EmbedsRelMax float64 `json:"image_embeds_rel_max"`
	} `json:"recommended_tolerances"`
}

type mmStep struct {
	Token     int     `json:"token"`
	MarginRel float64 `json:"margin_rel"`
}

type mmCase struct {
	Name              string    `json:"name"`
	Images            []string  `json:"images"`
	InputIDs          []int     `json:"input_ids"`
	Positions         [3][]int  `json:"positions"`
	RopeDelta         int       `json:"rope_delta"`
	TokenRanges       [][2]int  `json:"image_token_ranges"`
	LastLogits        tensorRef `json:"last_logits"`
	LogitsAtPositions []int     `json:"logits_at_positions"`
	LogitsAt          tensorRef `json:"logits_at"`
	// AllLogits is a tensor reference in the first case, a note in the
	// others.
	AllLogits   json.RawMessage `json:"all_logits"`
	GreedySteps []mmStep        `json:"greedy_steps"`
	// StepLogits row i holds the logits that chose greedy token i.
	StepLogits tensorRef `json:"greedy_step_logits"`
}

// allLogits returns the case's all_logits tensor, or nil.
func (c mmCase) allLogits() *tensorRef {
	var ref tensorRef
	if json.Unmarshal(c.AllLogits, &ref) != nil || ref.Tensor == "" {
		return nil
	}
	return &ref
}

// loadMMGolden reads vl-tiny's goldens and config.json's special ids, and
// opens the golden tensors.
func loadMMGolden(t testing.TB) (*mmGolden, *goldenModel) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlTiny, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := &mmGolden{}
	if err := json.Unmarshal(raw, g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	if len(g.Cases) == 0 || g.Tolerances.LogitsRelMax <= 0 {
		t.Fatal("golden.json lacks mm_cases or logits_rel_max")
	}
	raw, err = os.ReadFile(filepath.Join(vlTiny, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		ImageTokenID       int `json:"image_token_id"`
		VisionStartTokenID int `json:"vision_start_token_id"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	g.ImageTokenID, g.VisionStartTokenID = top.ImageTokenID, top.VisionStartTokenID
	gm := &goldenModel{dir: vlTiny}
	gm.tensors = openGoldenTensors(t, vlTiny)
	return g, gm
}

// openGoldenTensors opens dir/golden.safetensors, closed when the test ends.
func openGoldenTensors(t testing.TB, dir string) *safetensors.File {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// encodeImages preprocesses and encodes the named vl-tiny images with the
// tower, checking each against its golden embeddings.
func encodeImages(t *testing.T, g *mmGolden, gm *goldenModel, tw *vision.Tower, names []string) [][]float32 {
	t.Helper()
	pcfg, err := imageproc.LoadConfig(vlTiny)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, name := range names {
		gi := g.Images[name]
		data, err := os.ReadFile(filepath.Join(vlTiny, gi.File))
		if err != nil {
			t.Fatal(err)
		}
		rgb, err := imageproc.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := pcfg.Process(rgb)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if img.Grid != gi.Grid || img.Tokens != gi.NTokens {
			t.Fatalf("%s: grid %v (%d tokens), golden %v (%d)", name, img.Grid, img.Tokens, gi.Grid, gi.NTokens)
		}
		emb, err := tw.Encode(context.Background(), img.PixelValues, img.Grid)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkClose(t, name+" embeds", emb, gm.floats(t, gi.Embeds.Tensor), g.Tolerances.EmbedsRelMax)
		out = append(out, emb)
	}
	return out
}

// imageInput builds the prompt input of a case: the images' embeddings at
// their pad runs (the i-th image takes the next rows/hidden pads) and the
// positions of vision.RopeIndex, checked against the goldens.
func imageInput(t *testing.T, m *Model, g *mmGolden, c mmCase, embeds [][]float32) (Input, int) {
	t.Helper()
	hidden := m.Config().HiddenSize
	var grids [][3]int
	for _, name := range c.Images {
		grids = append(grids, g.Images[name].Grid)
	}
	pos, delta, err := vision.RopeIndex(c.InputIDs, g.ImageTokenID, g.VisionStartTokenID, grids, 2)
	if err != nil {
		t.Fatal(err)
	}
	for r := range pos {
		if !slices.Equal(pos[r], c.Positions[r]) {
			t.Fatalf("positions row %d = %v, golden %v", r, pos[r], c.Positions[r])
		}
	}
	if delta != c.RopeDelta {
		t.Fatalf("rope delta %d, golden %d", delta, c.RopeDelta)
	}
	in := Input{Tokens: c.InputIDs, Positions: make([][3]int, len(c.InputIDs))}
	for i := range in.Positions {
		in.Positions[i] = [3]int{pos[0][i], pos[1][i], pos[2][i]}
	}
	next := 0
	for i := 0; i < len(c.InputIDs) && next < len(embeds); i++ {
		if c.InputIDs[i] != g.ImageTokenID {
			continue
		}
		n := len(embeds[next]) / hidden
		if rg := c.TokenRanges[next]; rg != [2]int{i, i + n} {
			t.Fatalf("image %d at pads [%d, %d), golden %v", next, i, i+n, rg)
		}
		in.Embeds = append(in.Embeds, EmbedSpan{Index: i, Rows: embeds[next]})
		i += n - 1
		next++
	}
	if next != len(embeds) {
		t.Fatalf("found %d of %d images' pads", next, len(embeds))
	}
	return in, delta
}

// greedyCheck decodes from a prompt's last logits row, one token per step
// with the sequence's rope delta, and compares the tokens with the goldens
// up to the first step whose golden margin is below marginRule.
// stepLogits, when not nil, holds the golden logits row of each step.
func greedyCheck(t *testing.T, m *Model, seq *Sequence, row []float32, steps []mmStep, stepLogits []float32, tol float64) int {
	t.Helper()
	vocab := m.Config().VocabSize
	for i, step := range steps {
		if stepLogits != nil {
			checkClose(t, fmt.Sprintf("greedy step %d logits", i), row, stepLogits[i*vocab:(i+1)*vocab], tol)
		}
		got := argmax(row)
		if got != step.Token {
			t.Errorf("greedy step %d: token %d, golden %d (margin_rel %.3g)", i, got, step.Token, step.MarginRel)
			return i
		}
		if step.MarginRel < marginRule {
			return i + 1
		}
		if i+1 == len(steps) {
			return i + 1
		}
		out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: []int{got}, Logits: LastLogits, Decode: true}})
		if err != nil {
			t.Fatal(err)
		}
		row = out[0].Logits
	}
	return len(steps)
}

// runMultimodalGoldens checks vl-tiny's text model with images against its
// goldens: the images encoded from their files, their embeddings at the
// pads, M-RoPE positions, the prompt's logits (all of them, in one pass
// and cut into small passes that split the images) and greedy decoding
// with the rope delta; and the text-only case.
func runMultimodalGoldens(t *testing.T, opts Options) {
	g, gm := loadMMGolden(t)
	m, err := Open(vlTiny, withCPU(t, opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if got := m.Config().MRopeSection; !slices.Equal(got, []int{2, 1, 1}) {
		t.Fatalf("mrope_section %v, want [2 1 1]", got)
	}
	tw, err := vision.Open(vlTiny, vision.Options{Backend: m.Backend()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	vocab := m.Config().VocabSize
	tol := g.Tolerances.LogitsRelMax
	ctx := context.Background()
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			embeds := encodeImages(t, g, gm, tw, c.Images)
			in, delta := imageInput(t, m, g, c, embeds)
			seq, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer seq.Close()
			seq.SetRopeDelta(delta)
			in.Seq, in.Logits = seq, AllLogits
			out, err := m.Step(ctx, []Input{in})
			if err != nil {
				t.Fatal(err)
			}
			all := out[0].Logits
			last := all[len(all)-vocab:]
			t.Logf("%s: last_logits rel err %.3g", c.Name, relErr(last, gm.floats(t, c.LastLogits.Tensor)))
			checkClose(t, "last_logits", last, gm.floats(t, c.LastLogits.Tensor), tol)
			if ref := c.allLogits(); ref != nil {
				t.Logf("%s: all_logits rel err %.3g", c.Name, relErr(all, gm.floats(t, ref.Tensor)))
				checkClose(t, "all_logits", all, gm.floats(t, ref.Tensor), tol)
			}
			at := gm.floats(t, c.LogitsAt.Tensor)
			for k, p := range c.LogitsAtPositions {
				checkClose(t, fmt.Sprintf("logits at %d", p), all[p*vocab:(p+1)*vocab], at[k*vocab:(k+1)*vocab], tol)
			}
			stepLogits := gm.floats(t, c.StepLogits.Tensor)
			n := greedyCheck(t, m, seq, last, c.GreedySteps, stepLogits, tol)
			t.Logf("%s: %d greedy tokens compared", c.Name, n)

			// The same prompt in passes of 5 tokens, which cut the images'
			// spans, and its state copied to a new sequence, which keeps
			// the rope delta.
			cut, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer cut.Close()
			cut.SetRopeDelta(delta)
			var row []float32
			for lo := 0; lo < len(in.Tokens); lo += 5 {
				hi := min(lo+5, len(in.Tokens))
				part := Input{Seq: cut, Tokens: in.Tokens[lo:hi], Positions: in.Positions[lo:hi], Logits: NoLogits}
				part.Embeds = cutSpans(in.Embeds, lo, hi, m.Config().HiddenSize)
				if hi == len(in.Tokens) {
					part.Logits = LastLogits
				}
				o, err := m.Step(ctx, []Input{part})
				if err != nil {
					t.Fatal(err)
				}
				row = o[0].Logits
			}
			checkClose(t, "last_logits, prompt in passes of 5", row, last, tol)
			blk, err := cut.SaveKV(0, cut.Len())
			if err != nil {
				t.Fatal(err)
			}
			defer blk.Free()
			rs, err := cut.SaveRecurrent()
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Free()
			resumed, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer resumed.Close()
			if err := resumed.Restore([]*KVBlock{blk}, rs); err != nil {
				t.Fatal(err)
			}
			if got := resumed.RopeDelta(); got != delta {
				t.Fatalf("restored rope delta %d, want %d", got, delta)
			}
			greedyCheck(t, m, resumed, row, c.GreedySteps, stepLogits, tol)
		})
	}
	t.Run("text_case", func(t *testing.T) {
		tc := g.TextCase
		seq, all := prefill(t, m, tc.Prompt, 0, true)
		defer seq.Close()
		last := all[len(all)-vocab:]
		t.Logf("text_case: last_logits rel err %.3g, all_logits %.3g", relErr(last, gm.floats(t, tc.LastLogits.Tensor)), relErr(all, gm.floats(t, tc.AllLogits.Tensor)))
		checkClose(t, "last_logits", last, gm.floats(t, tc.LastLogits.Tensor), tol)
		checkClose(t, "all_logits", all, gm.floats(t, tc.AllLogits.Tensor), tol)
		// Explicit equal 3-D positions are the text positions, bit for bit.
		three, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer three.Close()
		pos := make([][3]int, len(tc.Prompt))
		for i := range pos {
			pos[i] = [3]int{i, i, i}
		}
		out, err := m.Step(context.Background(), []Input{{Seq: three, Tokens: tc.Prompt, Positions: pos, Logits: AllLogits}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[0].Logits, all) {
			t.Error("equal 3-D positions do not give the text path's logits bit for bit")
		}
		greedyCheck(t, m, seq, last, tc.GreedySteps, nil, tol)
	})
}

// TestMultimodalGoldens runs the vl-tiny goldens on the CPU backend.
func TestMultimodalGoldens(t *testing.T) { runMultimodalGoldens(t, Options{}) }

// TestMultimodalInputErrors checks the validation of embedding spans and
// positions.
func TestMultimodalInputErrors(t *testing.T) {
	m, err := Open(vlTiny, withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	h := m.Config().HiddenSize
	for name, in := range map[string]Input{
		"positions":   {Tokens: []int{1, 2}, Positions: make([][3]int, 1)},
		"ragged rows": {Tokens: []int{1, 2}, Embeds: []EmbedSpan{{Index: 0, Rows: make([]float32, h+1)}}},
		"past end":    {Tokens: []int{1, 2}, Embeds: []EmbedSpan{{Index: 1, Rows: make([]float32, 2*h)}}},
		"negative":    {Tokens: []int{1, 2}, Embeds: []EmbedSpan{{Index: -1, Rows: make([]float32, h)}}},
	} {
		in.Seq = seq
		if _, err := m.Step(context.Background(), []Input{in}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
