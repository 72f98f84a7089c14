package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// TestGenerateImagesMatchGolden runs generate --image on vl-tiny with each
// golden case's unexpanded prompt and images: the expanded prompt is the
// goldens' input_ids, the prompt's last logits are within 1e-4 and the
// greedy ids are the golden tokens up to the first step whose margin is
// below 1e-3.
func TestGenerateImagesMatchGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "vl-tiny")
	var g struct {
		Images map[string]struct {
			File string `json:"file"`
		} `json:"images"`
		Cases []struct {
			Name        string   `json:"name"`
			Images      []string `json:"images"`
			Unexpanded  []int    `json:"prompt_unexpanded"`
			InputIDs    []int    `json:"input_ids"`
			GreedySteps []struct {
				Token     int     `json:"token"`
				MarginRel float64 `json:"margin_rel"`
			} `json:"greedy_steps"`
			LastLogits struct {
				Tensor string `json:"tensor"`
			} `json:"last_logits"`
		} `json:"mm_cases"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			args := []string{"generate", "--model", dir, "--ids", strings.Trim(jsonString(t, c.Unexpanded), "[]"), "-n", "8", "--json"}
			for _, name := range c.Images {
				args = append(args, "--image", filepath.Join(dir, g.Images[name].File))
			}
			code, out, errOut := run(t, "", args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var res struct {
				PromptIDs        []int     `json:"prompt_ids"`
				IDs              []int     `json:"ids"`
				PromptLastLogits []float32 `json:"prompt_last_logits"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out)
			}
			if !slices.Equal(res.PromptIDs, c.InputIDs) {
				t.Errorf("prompt_ids %v, want input_ids %v", res.PromptIDs, c.InputIDs)
			}
			ts, ok := f.Tensor(c.LastLogits.Tensor)
			if !ok {
				t.Fatalf("golden tensor %s missing", c.LastLogits.Tensor)
			}
			want, err := ts.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			if len(res.PromptLastLogits) != len(want) {
				t.Fatalf("%d prompt logits, want %d", len(res.PromptLastLogits), len(want))
			}
			var diff, ref float64
			for i, v := range want {
				diff = max(diff, math.Abs(float64(res.PromptLastLogits[i])-float64(v)))
				ref = max(ref, math.Abs(float64(v)))
			}
			t.Logf("prompt_last_logits rel err %.3g", diff/ref)
			if diff/ref > 1e-4 {
				t.Errorf("prompt_last_logits rel err %.3g > 1e-4", diff/ref)
			}
			if len(res.IDs) != len(c.GreedySteps) {
				t.Fatalf("%d ids, want %d", len(res.IDs), len(c.GreedySteps))
			}
			for i, step := range c.GreedySteps {
				if res.IDs[i] != step.Token {
					t.Errorf("ids[%d] = %d, golden %d (ids %v)", i, res.IDs[i], step.Token, res.IDs)
					break
				}
				if step.MarginRel < 1e-3 {
					break // a legitimate flip here changes the rest
				}
			}
		})
	}
}

// TestGenerateImageErrors checks that a pad count other than the number
// of images, and an image for a model without a vision tower, fail with a
// message and a non-zero exit.
func TestGenerateImageErrors(t *testing.T) {
	models := filepath.Join("..", "..", "testdata", "models")
	img := filepath.Join(models, "vl-tiny", "images", "gradient_64x48.png")
	textOnly := textOnlyCopy(t, filepath.Join(models, "tiny"))
	for _, tc := range []struct {
		name, model, ids string
		images           []string
		want             string
	}{
		{"no pad", "vl-tiny", "985,993,994,198", []string{img}, "0 image pad tokens"},
		{"two pads, one image", "vl-tiny", "993,996,994,993,996,994", []string{img}, "2 image pad tokens"},
		{"one pad, two images", "vl-tiny", "993,996,994", []string{img, img}, "for 2 --image files"},
		{"no tower", textOnly, "1,2,3", []string{img}, "no vision tower"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.model
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(models, dir)
			}
			args := []string{"generate", "--model", dir, "--ids", tc.ids, "-n", "2"}
			for _, f := range tc.images {
				args = append(args, "--image", f)
			}
			code, _, errOut := run(t, "", args...)
			if code == exitOK {
				t.Fatal("exit 0")
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not say %q", errOut, tc.want)
			}
		})
	}
}

// textOnlyCopy returns a directory with the checkpoint of dir whose
// config.json has no vision_config (a text-only export).
func textOnlyCopy(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "vision_config")
	out := t.TempDir()
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(out, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return out
}
