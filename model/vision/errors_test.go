package vision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/safetensors"
)

// memSource is an in-memory tensorSource.
type memSource map[string]safetensors.Tensor

func (m memSource) Has(name string) bool { _, ok := m[name]; return ok }

func (m memSource) Info(name string) (safetensors.TensorInfo, error) {
	t, ok := m[name]
	if !ok {
		return safetensors.TensorInfo{}, errors.New("safetensors: tensor " + name + ": " + safetensors.ErrNotFound.Error())
	}
	return t.Info(), nil
}

func (m memSource) Tensor(name string) (safetensors.Tensor, error) {
	t, ok := m[name]
	if !ok {
		return t, errors.New("safetensors: tensor " + name + ": " + safetensors.ErrNotFound.Error())
	}
	return t, nil
}

// tinySource returns vl-tiny's config and its tower's tensors in memory.
func tinySource(t *testing.T) (*Config, memSource) {
	t.Helper()
	cfg, ok, err := LoadConfig(vlTiny)
	if err != nil || !ok {
		t.Fatalf("LoadConfig: %v, %v", ok, err)
	}
	ck, err := safetensors.OpenCheckpoint(vlTiny)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	src := memSource{}
	for _, name := range ck.Names() {
		if strings.HasPrefix(name, "model.visual.") {
			ts, err := ck.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			ts.Data = append([]byte(nil), ts.Data...)
			src[name] = ts
		}
	}
	return cfg, src
}

func TestConfig(t *testing.T) {
	cfg, ok, err := LoadConfig(vlTiny)
	if err != nil || !ok {
		t.Fatalf("LoadConfig: %v, %v", ok, err)
	}
	want := Config{Depth: 2, HiddenSize: 32, NumHeads: 2, IntermediateSize: 120, PatchSize: 8,
		TemporalPatchSize: 2, SpatialMergeSize: 2, NumPositionEmbeddings: 16, OutHiddenSize: 64,
		InChannels: 3, HiddenAct: GELUTanh, LayerNormEps: 1e-6, RopeTheta: 10000}
	if *cfg != want {
		t.Errorf("config %+v\nwant %+v", *cfg, want)
	}
	if cfg.HeadDim() != 16 || cfg.PatchDim() != 384 || cfg.PositionSide() != 4 {
		t.Errorf("head_dim %d, patch dim %d, side %d", cfg.HeadDim(), cfg.PatchDim(), cfg.PositionSide())
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}

	// Defaults for missing keys; out_hidden_size from the text model.
	c, ok, err := ParseConfig([]byte(`{"text_config": {"hidden_size": 4096}, "vision_config": {"model_type": "qwen3_5"}}`))
	if err != nil || !ok || *c != *DefaultConfig() {
		t.Errorf("defaults: %+v, %v, %v", c, ok, err)
	}
	if _, ok, err := ParseConfig([]byte(`{"hidden_size": 64}`)); ok || err != nil {
		t.Errorf("text-only config: ok %v, err %v", ok, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"hidden_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := LoadConfig(dir); ok || err != nil {
		t.Errorf("text-only dir: ok %v, err %v", ok, err)
	}
	if _, err := Open(dir, Options{Backend: cpu.New(cpu.Options{Threads: 1})}); err == nil || !strings.Contains(err.Error(), "no vision_config") {
		t.Errorf("Open of a text-only checkpoint: %v", err)
	}
	if _, _, err := LoadConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadConfig of a missing directory succeeded")
	}

	for _, bad := range []struct{ json, want string }{
		{`{"vision_config": {"hidden_size": 30, "num_heads": 4, "out_hidden_size": 8}}`, "multiple of num_heads"},
		{`{"vision_config": {"hidden_size": 40, "num_heads": 4, "out_hidden_size": 8}}`, "multiple of 4"},
		{`{"vision_config": {"num_position_embeddings": 15, "out_hidden_size": 8}}`, "not a square"},
		{`{"vision_config": {"hidden_act": "relu", "out_hidden_size": 8}}`, "hidden_act"},
		{`{"vision_config": {"depth": -1, "out_hidden_size": 8}}`, "depth"},
		{`{"vision_config": {}}`, "out_hidden_size"},
		{`{"vision_config": {"out_hidden_size": 8, "layer_norm_eps": -1}}`, "layer_norm_eps"},
		{`{"vision_config": {"out_hidden_size": 8, "rope_parameters": {"rope_theta": 0}}}`, "rope_theta"},
		{`{"vision_config": [1]}`, "vision_config"},
		{`{`, "config.json"},
	} {
		if _, _, err := ParseConfig([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseConfig(%s) = %v, want an error about %q", bad.json, err, bad.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	o := Options{Backend: be}
	cfg, src := tinySource(t)
	if tw, err := newTower(cfg, src, o); err != nil {
		t.Fatalf("complete source: %v", err)
	} else {
		tw.Close()
	}
	if _, err := newTower(cfg, src, Options{}); err == nil || !strings.Contains(err.Error(), "no backend") {
		t.Errorf("no backend: %v", err)
	}
	if _, err := newTower(nil, src, o); err == nil {
		t.Error("nil config accepted")
	}

	without := func(name string) memSource {
		m := memSource{}
		for k, v := range src {
			if k != name {
				m[k] = v
			}
		}
		return m
	}
	for _, name := range []string{
		"model.visual.blocks.1.attn.qkv.weight",
		"model.visual.blocks.0.norm2.bias",
		"model.visual.merger.linear_fc2.bias",
		"model.visual.pos_embed.weight",
	} {
		_, err := newTower(cfg, without(name), o)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.HasPrefix(err.Error(), "vision: ") {
			t.Errorf("without %s: %v", name, err)
		}
	}
	if _, err := newTower(cfg, without("model.visual.patch_embed.proj.weight"), o); err == nil || !strings.Contains(err.Error(), "no vision tower") {
		t.Errorf("without the patch embedding: %v", err)
	}

	// A config that disagrees with the tensors' shapes.
	c2 := *cfg
	c2.IntermediateSize = 64
	if _, err := newTower(&c2, src, o); err == nil || !strings.Contains(err.Error(), "mlp.linear_fc1.weight has shape [120 32]") {
		t.Errorf("wrong intermediate size: %v", err)
	}
	c3 := *cfg
	c3.OutHiddenSize = 32
	if _, err := newTower(&c3, src, o); err == nil || !strings.Contains(err.Error(), "merger.linear_fc2.weight") {
		t.Errorf("wrong out_hidden_size: %v", err)
	}

	// A tensor of an unsupported dtype.
	bad := without("")
	ts := bad["model.visual.blocks.0.attn.proj.bias"]
	ts.DType = safetensors.I16
	bad["model.visual.blocks.0.attn.proj.bias"] = ts
	if _, err := newTower(cfg, bad, o); err == nil || !strings.Contains(err.Error(), "dtype I16") {
		t.Errorf("I16 tensor: %v", err)
	}

	// A checkpoint that is not there.
	if _, err := Open(t.TempDir(), o); err == nil {
		t.Error("Open of an empty directory succeeded")
	}
}

func TestEncodeErrors(t *testing.T) {
	tw := openTiny(t, Options{})
	c := tw.Config()
	ctx := context.Background()
	pd := c.PatchDim()
	for _, g := range [][3]int{{0, 2, 2}, {1, 0, 2}, {1, 2, -2}, {1, 3, 2}, {1, 2, 5}, {1, 1 << 30, 1 << 30}, {1 << 40, 2, 2}} {
		_, err := tw.Encode(ctx, make([]float32, pd*4), g)
		if !errors.Is(err, ErrBadGrid) {
			t.Errorf("grid %v: %v, want ErrBadGrid", g, err)
		}
	}
	if _, err := tw.Encode(ctx, make([]float32, pd*4-1), [3]int{1, 2, 2}); err == nil || !strings.Contains(err.Error(), "pixel values") {
		t.Errorf("short pixel values: %v", err)
	}
	if _, err := tw.Encode(ctx, nil, [3]int{1, 2, 4}); err == nil {
		t.Error("nil pixel values accepted")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tw.Encode(cancelled, make([]float32, pd*4), [3]int{1, 2, 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	// Video: two frames attend apart, with the same positions: identical
	// frames give identical tokens, and each frame's tokens equal those of
	// the frame alone.
	one := make([]float32, pd*16)
	for i := range one {
		one[i] = float32(i%23)/11 - 1
	}
	alone, err := tw.Encode(ctx, one, [3]int{1, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	two, err := tw.Encode(ctx, append(append([]float32(nil), one...), one...), [3]int{2, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(two) != 2*len(alone) {
		t.Fatalf("two frames: %d values, want %d", len(two), 2*len(alone))
	}
	for i := range two {
		if two[i] != alone[i%len(alone)] {
			t.Fatalf("two frames: value %d = %v, alone %v", i, two[i], alone[i%len(alone)])
		}
	}

	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := tw.Encode(ctx, one, [3]int{1, 4, 4}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestRopeIndexErrors(t *testing.T) {
	const pad, start, end = 9, 8, 7
	img := func(n int) []int {
		s := []int{start}
		for range n {
			s = append(s, pad)
		}
		return append(s, end)
	}
	ok := append(append([]int{1, 2}, img(4)...), 3)
	if _, d, err := RopeIndex(ok, pad, start, [][3]int{{1, 4, 4}}, 2); err != nil || d != -2 {
		t.Fatalf("valid prompt: delta %d, %v", d, err)
	}
	for _, c := range []struct {
		ids   []int
		grids [][3]int
		merge int
		want  string
	}{
		{ok, [][3]int{{1, 4, 4}}, 0, "merge size"},
		{ok, nil, 2, "beyond"},
		{ok, [][3]int{{1, 4, 4}, {1, 2, 2}}, 2, "2 grids for 1 images"},
		{ok, [][3]int{{1, 4, 2}}, 2, "beyond"},    // 2 pads, then 2 more with no grid
		{ok, [][3]int{{1, 4, 6}}, 2, "needs"},     // 6 pads wanted, 4 there
		{ok, [][3]int{{1, 3, 4}}, 2, "bad image"}, // not a multiple of merge
		{ok, [][3]int{{1, 1 << 40, 1 << 40}}, 2, "needs"},
		{[]int{1, pad, pad, pad, pad}, [][3]int{{1, 4, 4}}, 2, "vision start"},
	} {
		_, _, err := RopeIndex(c.ids, pad, start, c.grids, c.merge)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RopeIndex(%v, %v, merge %d) = %v, want an error about %q", c.ids, c.grids, c.merge, err, c.want)
		}
	}
	// Touching pads split by the grids; no start check with a negative id.
	touch := append(append([]int{start}, img(4)[1:5]...), pad, end)
	pos, d, err := RopeIndex(touch, pad, start, [][3]int{{1, 4, 4}, {1, 2, 2}}, 2)
	if err != nil {
		t.Fatalf("touching pads: %v", err)
	}
	if want := []int{0, 1, 1, 2, 2, 3, 4}; !equalInts(pos[1], want) || d != 5-7 {
		t.Errorf("touching pads: h row %v delta %d, want %v and -2", pos[1], d, want)
	}
	if _, _, err := RopeIndex([]int{pad, pad, pad, pad}, pad, -1, [][3]int{{1, 4, 4}}, 2); err != nil {
		t.Errorf("no start check: %v", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestConcurrentEncode(t *testing.T) {
	tw := openTiny(t, Options{})
	pd := tw.Config().PatchDim()
	pv := make([]float32, pd*24)
	for i := range pv {
		pv[i] = float32(i%31)/15 - 1
	}
	grid := [3]int{1, 4, 6}
	want, err := tw.Encode(context.Background(), pv, grid)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			got, err := tw.Encode(context.Background(), pv, grid)
			if err == nil && !equalFloats(got, want) {
				err = errors.New("concurrent Encode gave other values")
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
