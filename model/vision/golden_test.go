package vision

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/compute/vulkan"
	"github.com/govinfer/govinfer/safetensors"
)

// vlTiny is the test checkpoint with a vision tower and its goldens.
var vlTiny = filepath.Join("..", "..", "testdata", "models", "vl-tiny")

type tensorRef struct {
	Tensor string `json:"tensor"`
	Shape  []int  `json:"shape"`
}

type goldenImage struct {
	Grid        [3]int    `json:"grid_thw"`
	NPatches    int       `json:"n_patches"`
	NTokens     int       `json:"n_tokens"`
	PixelValues tensorRef `json:"pixel_values"`
	Embeds      tensorRef `json:"embeds"`
	Debug       struct {
		PatchEmbeds  tensorRef  `json:"patch_embeds"`
		PosEmbeds    tensorRef  `json:"pos_embeds"`
		LastHidden   tensorRef  `json:"last_hidden"`
		BlockOutputs *tensorRef `json:"block_outputs"`
	} `json:"debug"`
}

type goldenCase struct {
	Name        string   `json:"name"`
	Images      []string `json:"images"`
	InputIDs    []int    `json:"input_ids"`
	Unexpanded  []int    `json:"prompt_unexpanded"`
	Positions   [3][]int `json:"positions"`
	RopeDelta   int      `json:"rope_delta"`
	TokenRanges [][2]int `json:"image_token_ranges"`
}

type goldenFile struct {
	Images     map[string]goldenImage `json:"images"`
	Cases      []goldenCase           `json:"mm_cases"`
	Tolerances struct {
		EmbedsRelMax float64 `json:"image_embeds_rel_max"`
	} `json:"recommended_tolerances"`
}

type topConfig struct {
	ImageTokenID       int `json:"image_token_id"`
	VisionStartTokenID int `json:"vision_start_token_id"`
}

// readGolden reads vl-tiny's golden.json and opens its tensors.
func readGolden(t testing.TB) (*goldenFile, *safetensors.File) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlTiny, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := &goldenFile{}
	if err := json.Unmarshal(raw, g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	if len(g.Images) == 0 || len(g.Cases) == 0 || g.Tolerances.EmbedsRelMax <= 0 {
		t.Fatal("golden.json lacks images, mm_cases or image_embeds_rel_max")
	}
	f, err := safetensors.Open(filepath.Join(vlTiny, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return g, f
}

// floats returns a golden tensor as float32 values, checking its shape.
func floats(t testing.TB, f *safetensors.File, ref tensorRef) []float32 {
	t.Helper()
	ts, ok := f.Tensor(ref.Tensor)
	if !ok {
		t.Fatalf("golden tensor %s missing", ref.Tensor)
	}
	if !slices.Equal(ts.Shape, ref.Shape) {
		t.Fatalf("golden tensor %s: shape %v, golden.json says %v", ref.Tensor, ts.Shape, ref.Shape)
	}
	v, err := ts.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// relErr returns max|got - want| / max|want|.
func relErr(t testing.TB, what string, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var d, m float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// openTiny opens vl-tiny's tower on a CPU backend with opts.
func openTiny(t testing.TB, o Options) *Tower {
	t.Helper()
	if o.Backend == nil {
		be := cpu.New(cpu.Options{})
		t.Cleanup(func() { be.Close() })
		o.Backend = be
	}
	tw, err := Open(vlTiny, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	return tw
}

// testBackend names a backend the goldens run on and opens it.
type testBackend struct {
	name string
	open func(t testing.TB) compute.Backend
}

// newCPU opens a CPU backend with opts, closed at the end of the test.
func newCPU(t testing.TB, o cpu.Options) compute.Backend {
	be := cpu.New(o)
	t.Cleanup(func() { be.Close() })
	return be
}

// newVulkan opens a Vulkan backend with the validation layer on, closed
// at the end of the test, or skips the test when no device is present
// (fails instead when GOVINFER_REQUIRE_VULKAN=1, as in CI).
func newVulkan(t testing.TB) compute.Backend {
	t.Helper()
	be, err := vulkan.New(vulkan.Options{Validation: true, Log: func(msg string) { t.Log(msg) }})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { be.Close() })
	t.Log(be.Describe())
	return be
}

// testBackends lists the backends every golden check runs on: the CPU
// with the machine's kernels, the CPU on the kernels' pure-Go twins, and
// Vulkan (skipped without a device).
var testBackends = []testBackend{
	{"cpu", func(t testing.TB) compute.Backend { return newCPU(t, cpu.Options{}) }},
	{"cpu-generic", func(t testing.TB) compute.Backend { return newCPU(t, cpu.Options{Kernels: asm.Generic()}) }},
	{"vulkan", newVulkan},
}

func TestGoldenImages(t *testing.T) {
	for _, tb := range testBackends {
		t.Run(tb.name, func(t *testing.T) {
			// A chunk of 16 rows cuts every product of the larger images
			// into several backend calls; the default takes them in one.
			for _, chunk := range []int{0, 16} {
				checkGoldenImages(t, Options{Backend: tb.open(t), ChunkRows: chunk}, chunk == 0)
			}
		})
	}
}

// checkGoldenImages encodes every golden image with a tower opened with o
// and compares each stage with the float64 reference's, logging the
// errors when verbose.
func checkGoldenImages(t *testing.T, o Options, verbose bool) {
	g, f := readGolden(t)
	tw := openTiny(t, o)
	c := tw.Config()
	tol := g.Tolerances.EmbedsRelMax
	names := make([]string, 0, len(g.Images))
	for name := range g.Images {
		names = append(names, name)
	}
	sort.Strings(names)
	sawBlocks := false
	for _, name := range names {
		im := g.Images[name]
		if n, tok, err := c.CheckGrid(im.Grid); err != nil || n != im.NPatches || tok != im.NTokens {
			t.Fatalf("%s: CheckGrid(%v) = %d, %d, %v; golden %d patches, %d tokens", name, im.Grid, n, tok, err, im.NPatches, im.NTokens)
		}
		pv := floats(t, f, im.PixelValues)
		tr, err := tw.EncodeTrace(context.Background(), pv, im.Grid)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		stages := []struct {
			what      string
			got, want []float32
		}{
			{"patch_embeds", tr.PatchEmbeds, floats(t, f, im.Debug.PatchEmbeds)},
			{"pos_embeds", tr.PosEmbeds, floats(t, f, im.Debug.PosEmbeds)},
			{"last_hidden", tr.LastHidden, floats(t, f, im.Debug.LastHidden)},
			{"embeds", tr.Embeds, floats(t, f, im.Embeds)},
		}
		if ref := im.Debug.BlockOutputs; ref != nil {
			sawBlocks = true
			all := floats(t, f, *ref)
			if len(tr.BlockOutputs) != c.Depth {
				t.Fatalf("%s: %d block outputs, want %d", name, len(tr.BlockOutputs), c.Depth)
			}
			per := len(all) / c.Depth
			for i, got := range tr.BlockOutputs {
				stages = append(stages, struct {
					what      string
					got, want []float32
				}{fmt.Sprintf("block_outputs[%d]", i), got, all[i*per : (i+1)*per]})
			}
		}
		for _, s := range stages {
			e := relErr(t, name+" "+s.what, s.got, s.want)
			if verbose {
				t.Logf("%-15s %-16s rel err %.2e", name, s.what, e)
			}
			if e > tol {
				t.Errorf("chunk %d: %s %s: rel err %.3g > %g", o.ChunkRows, name, s.what, e, tol)
			}
		}
		out, err := tw.Encode(context.Background(), pv, im.Grid)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, tr.Embeds) {
			t.Errorf("%s: Encode differs from EncodeTrace", name)
		}
	}
	if !sawBlocks {
		t.Error("no image has debug.block_outputs")
	}
}

func TestRopeIndexGolden(t *testing.T) {
	g, _ := readGolden(t)
	raw, err := os.ReadFile(filepath.Join(vlTiny, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top topConfig
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	cfg, ok, err := LoadConfig(vlTiny)
	if err != nil || !ok {
		t.Fatalf("LoadConfig: %v, %v", ok, err)
	}
	for _, cs := range g.Cases {
		var grids [][3]int
		for _, name := range cs.Images {
			grids = append(grids, g.Images[name].Grid)
		}
		pos, delta, err := RopeIndex(cs.InputIDs, top.ImageTokenID, top.VisionStartTokenID, grids, cfg.SpatialMergeSize)
		if err != nil {
			t.Fatalf("%s: %v", cs.Name, err)
		}
		for r := range pos {
			if !slices.Equal(pos[r], cs.Positions[r]) {
				t.Errorf("%s: row %d = %v\nwant %v", cs.Name, r, pos[r], cs.Positions[r])
			}
		}
		if delta != cs.RopeDelta {
			t.Errorf("%s: rope delta %d, want %d", cs.Name, delta, cs.RopeDelta)
		}
		// ExpandPads from the prompt as rendered, one pad per image.
		ids, starts, p3, delta, err := ExpandPads(cs.Unexpanded, top.ImageTokenID, top.VisionStartTokenID, grids, cfg.SpatialMergeSize)
		if err != nil || !slices.Equal(ids, cs.InputIDs) || delta != cs.RopeDelta || len(p3) != len(ids) {
			t.Errorf("%s: ExpandPads: %d ids, delta %d, %v; want the %d input_ids, delta %d", cs.Name, len(ids), delta, err, len(cs.InputIDs), cs.RopeDelta)
		}
		for i, rg := range cs.TokenRanges {
			if i >= len(starts) || starts[i] != rg[0] {
				t.Errorf("%s: ExpandPads starts %v, image ranges %v", cs.Name, starts, cs.TokenRanges)
			}
		}
		for i := range p3 {
			if p3[i] != [3]int{cs.Positions[0][i], cs.Positions[1][i], cs.Positions[2][i]} {
				t.Fatalf("%s: ExpandPads position %d = %v", cs.Name, i, p3[i])
			}
		}
		if _, _, _, _, err := ExpandPads(cs.Unexpanded, top.ImageTokenID, top.VisionStartTokenID, grids[1:], cfg.SpatialMergeSize); err == nil {
			t.Errorf("%s: ExpandPads with one grid short: no error", cs.Name)
		}
		for i, rg := range cs.TokenRanges {
			if n := rg[1] - rg[0]; n != cfg.Tokens(grids[i]) {
				t.Errorf("%s: image %d has %d pads, Tokens says %d", cs.Name, i, n, cfg.Tokens(grids[i]))
			}
		}
	}
	// Without images: 0..T-1 in every row, delta 0.
	ids := []int{5, 6, 7}
	pos, delta, err := RopeIndex(ids, top.ImageTokenID, top.VisionStartTokenID, nil, 2)
	if err != nil || delta != 0 {
		t.Fatalf("text only: delta %d, %v", delta, err)
	}
	for r := range pos {
		if !slices.Equal(pos[r], []int{0, 1, 2}) {
			t.Errorf("text only: row %d = %v", r, pos[r])
		}
	}
}
