package randmodel

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model/vision"
)

// TestTowerWidths checks that the qwen3.5-9b shape's tower config is
// Qwen3.5-9B's, as package vision knows it.
func TestTowerWidths(t *testing.T) {
	s, err := LookupShape("qwen3.5-9b")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{
		"vision_config": s.Tower().config(s.Hidden),
		"text_config":   map[string]any{"hidden_size": s.Hidden},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := vision.ParseConfig(raw)
	if err != nil || !ok {
		t.Fatalf("ParseConfig: ok %v, %v", ok, err)
	}
	want := vision.DefaultConfig()
	if *got != *want {
		t.Errorf("tower config\n got %+v\nwant %+v", *got, *want)
	}
	if ids := s.VisionTokens(); ids != realIDs {
		t.Errorf("vision ids %+v, want Qwen3.5's %+v", ids, realIDs)
	}
}

// TestWriteVision writes a tiny checkpoint with a tower and encodes an
// image with it; without Vision the config has no vision_config.
func TestWriteVision(t *testing.T) {
	s, err := LookupShape("tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Write(dir, s, Options{Seed: 3, Vision: true}); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if id := int(cfg["image_token_id"].(float64)); id >= s.Vocab {
		t.Errorf("image_token_id %d outside the vocabulary of %d", id, s.Vocab)
	}
	if _, err := os.Stat(filepath.Join(dir, "preprocessor_config.json")); err != nil {
		t.Error(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	tw, err := vision.Open(dir, vision.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	c := tw.Config()
	grid := [3]int{1, 4, 6}
	pv := make([]float32, grid[1]*grid[2]*c.PatchDim())
	for i := range pv {
		pv[i] = float32(math.Sin(float64(i)))
	}
	out, err := tw.Encode(context.Background(), pv, grid)
	if err != nil {
		t.Fatal(err)
	}
	var sq float64
	for _, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite embedding")
		}
		sq += float64(v) * float64(v)
	}
	if rms := math.Sqrt(sq / float64(len(out))); rms < 0.05 || rms > 20 {
		t.Errorf("embedding RMS %g: the random tower's scale is off", rms)
	}

	plain := t.TempDir()
	if err := Write(plain, s, Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := vision.LoadConfig(plain); err != nil || ok {
		t.Errorf("without Vision: vision_config present %v (%v)", ok, err)
	}
}
