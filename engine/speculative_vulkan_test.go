//go:build cgo

package engine

import (
	"os"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/compute/vulkan"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/sample"
)

// TestSpeculativeVulkan runs the engine's MTP speculation on the Vulkan
// backend (lavapipe in CI): vl-tiny's golden prompt, k = 1 to 4, plain
// greedy, with a repetition penalty and logit bias, and sampled with a
// seed (the same tokens twice). It skips without a Vulkan device unless
// GOVINFER_REQUIRE_VULKAN=1.
func TestSpeculativeVulkan(t *testing.T) {
	be, err := vulkan.New(vulkan.Options{})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { be.Close() })
	m, err := model.Open("../testdata/models/vl-tiny", model.Options{Backend: be, MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	g := loadSpecGolden(t)
	plain := newEngine(t, m, Config{})
	penalized := Request{Prompt: g.Prompt, MaxTokens: g.Steps, Params: sample.Params{RepetitionPenalty: 1.3}, LogitBias: map[int]float32{7: 2}}
	wantPen, _, _ := generate(t, plain, penalized)
	for k := 1; k <= MaxSpeculativeTokens; k++ {
		e := newEngine(t, m, Config{Speculative: Speculative{Method: "mtp", Tokens: k}})
		got, _, s := generate(t, e, Request{Prompt: g.Prompt, MaxTokens: g.Steps})
		if d, _ := s.SpecTokens(); !slices.Equal(got, g.PlainGreedy) || d == 0 {
			t.Errorf("k=%d: %v (%d drafts), golden %v", k, got, d, g.PlainGreedy)
		}
		if got, _, _ := generate(t, e, penalized); !slices.Equal(got, wantPen) {
			t.Errorf("k=%d penalized: %v, plain %v", k, got, wantPen)
		}
		sampled := Request{Prompt: g.Prompt, MaxTokens: g.Steps, Params: sample.Params{Temperature: 0.8, Seed: 3}}
		a, _, _ := generate(t, e, sampled)
		b, _, _ := generate(t, e, sampled)
		if !slices.Equal(a, b) {
			t.Errorf("k=%d sampled: %v then %v", k, a, b)
		}
	}
}
