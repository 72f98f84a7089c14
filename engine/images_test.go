package engine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/safetensors"
)

// vlCase is a vl-tiny golden prompt with one image, as an engine request.
type vlCase struct {
	m          *model.Model
	req        Request
	lastLogits []float32
	greedy     []int
}

// loadVLCase opens vl-tiny and builds the request of its large_no_think
// golden case (one image of 54 tokens at prompt [31, 85) of 113 tokens,
// so the first 64-token chunk ends inside the image) from the golden
// embeddings and positions.
func loadVLCase(t *testing.T) vlCase {
	t.Helper()
	dir := filepath.Join("..", "testdata", "models", "vl-tiny")
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Images map[string]struct {
			Embeds struct {
				Tensor string `json:"tensor"`
			} `json:"embeds"`
		} `json:"images"`
		Cases []struct {
			Name       string   `json:"name"`
			Images     []string `json:"images"`
			InputIDs   []int    `json:"input_ids"`
			Positions  [3][]int `json:"positions"`
			RopeDelta  int      `json:"rope_delta"`
			Ranges     [][2]int `json:"image_token_ranges"`
			Greedy     []int    `json:"greedy_tokens"`
			LastLogits struct {
				Tensor string `json:"tensor"`
			} `json:"last_logits"`
		} `json:"mm_cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	floats := func(name string) []float32 {
		ts, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("golden tensor %s missing", name)
		}
		v, err := ts.ToFloat32()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	m, err := model.Open(dir, model.Options{Backend: testBackend, MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for _, c := range g.Cases {
		if c.Name != "large_no_think" {
			continue
		}
		req := Request{Prompt: c.InputIDs, MaxTokens: 8, PromptLogits: true, RopeDelta: c.RopeDelta, IgnoreEOS: true}
		for i := range c.InputIDs {
			req.Positions = append(req.Positions, [3]int{c.Positions[0][i], c.Positions[1][i], c.Positions[2][i]})
		}
		req.Images = []Image{{Index: c.Ranges[0][0], Embeds: floats(g.Images[c.Images[0]].Embeds.Tensor), Hash: [32]byte{1}}}
		return vlCase{m: m, req: req, lastLogits: floats(c.LastLogits.Tensor), greedy: c.Greedy}
	}
	t.Fatal("golden.json has no large_no_think case")
	return vlCase{}
}

// withTextPrefix returns req with n text tokens put before its prompt and
// a cache hint at its first image.
func withTextPrefix(req Request, n int) Request {
	out := req
	out.CacheHints = []int{n + req.Images[0].Index}
	out.Prompt = nil
	out.Positions = nil
	for i := range n {
		out.Prompt = append(out.Prompt, (7*i+3)%256)
		out.Positions = append(out.Positions, [3]int{i, i, i})
	}
	out.Prompt = append(out.Prompt, req.Prompt...)
	for _, p := range req.Positions {
		out.Positions = append(out.Positions, [3]int{p[0] + n, p[1] + n, p[2] + n})
	}
	out.Images = nil
	for _, im := range req.Images {
		im.Index += n
		out.Images = append(out.Images, im)
	}
	return out
}

// withImage returns req with its image's embeddings scaled by s and its
// hash set to h: another image at the same tokens.
func withImage(req Request, s float32, h byte) Request {
	out := req
	im := req.Images[0]
	im.Embeds = slices.Clone(im.Embeds)
	for i := range im.Embeds {
		im.Embeds[i] *= s
	}
	im.Hash = [32]byte{h}
	out.Images = []Image{im}
	return out
}

// TestImageRequest runs a golden prompt with an image through the engine:
// its prompt logits and greedy tokens match the goldens whether the
// prompt is cut at the chunk inside the image or into chunks of 16.
func TestImageRequest(t *testing.T) {
	c := loadVLCase(t)
	for _, chunk := range []int{0, 16} {
		e := newEngine(t, c.m, Config{ChunkTokens: chunk})
		res := run1(t, e, c.req)
		var diff, ref float64
		for i, v := range c.lastLogits {
			diff = max(diff, math.Abs(float64(res.logits[i])-float64(v)))
			ref = max(ref, math.Abs(float64(v)))
		}
		t.Logf("chunk %d: prompt logits rel err %.3g", chunk, diff/ref)
		if diff/ref > 1e-4 {
			t.Errorf("chunk %d: prompt logits rel err %.3g > 1e-4", chunk, diff/ref)
		}
		var ids []int
		for _, tok := range res.toks {
			ids = append(ids, tok.ID)
		}
		if !slices.Equal(ids, c.greedy) {
			t.Errorf("chunk %d: greedy %v, golden %v", chunk, ids, c.greedy)
		}
	}
}

// TestImageRequestSpeculative checks that speculative decoding with the
// MTP head, which drafts from the image prompt's hidden states at its
// M-RoPE positions, gives the golden greedy tokens after an image.
func TestImageRequestSpeculative(t *testing.T) {
	c := loadVLCase(t)
	for k := 1; k <= 3; k++ {
		e := newEngine(t, c.m, Config{Speculative: Speculative{Method: "mtp", Tokens: k}})
		s, err := e.Submit(context.Background(), c.req)
		if err != nil {
			t.Fatal(err)
		}
		res := collectResult(t, s)
		var ids []int
		for _, tok := range res.toks {
			ids = append(ids, tok.ID)
		}
		if !slices.Equal(ids, c.greedy) {
			t.Errorf("k %d: greedy %v, golden %v", k, ids, c.greedy)
		}
		drafted, accepted := s.SpecTokens()
		t.Logf("k %d: %d drafted, %d accepted", k, drafted, accepted)
		if drafted == 0 {
			t.Errorf("k %d: nothing drafted", k)
		}
	}
}

// TestPrefixCacheImages checks that the prefix cache keys image tokens by
// the image: a prompt with another image at the same tokens shares only
// the cached text before the image, the same image resumes inside it, and
// every result equals a cold run's bit for bit.
func TestPrefixCacheImages(t *testing.T) {
	c := loadVLCase(t)
	a := withTextPrefix(c.req, 64) // 177 tokens, image at [95, 149)
	b := withImage(a, 0.5, 2)
	same := withImage(a, 1, 1) // a's image, its embeddings copied
	cold := newEngine(t, c.m, Config{})
	warm := newEngine(t, c.m, Config{PrefixCache: true})
	for _, step := range []struct {
		name   string
		req    Request
		cached int
	}{
		{"a", a, 0},
		{"a again", a, 128},
		{"another image", b, 64},
		{"another image again", b, 128},
		{"the first image, copied", same, 128},
		{"image only", c.req, 0},
	} {
		got := run1(t, warm, step.req)
		if got.cached != step.cached {
			t.Errorf("%s: resumed at %d, want %d", step.name, got.cached, step.cached)
		}
		want := run1(t, cold, step.req)
		sameResult(t, step.name, got, want)
	}
	if ra, rb := run1(t, cold, a), run1(t, cold, b); slices.Equal(ra.logits, rb.logits) {
		t.Error("two images give the same prompt logits")
	}
	// Text-only prompts keep their keys.
	if k := cacheKey(a.Prompt, nil, 64); !slices.Equal(BlockHashes(k), BlockHashes(a.Prompt)) {
		t.Error("a prompt without images is not its own key")
	}
}

// TestImageRequestErrors checks Submit's validation of images and
// positions.
func TestImageRequestErrors(t *testing.T) {
	c := loadVLCase(t)
	e := newEngine(t, c.m, Config{})
	h := c.m.Config().HiddenSize
	bad := map[string]func(r *Request){
		"positions": func(r *Request) { r.Positions = r.Positions[1:] },
		"past end":  func(r *Request) { r.Images[0].Index = len(r.Prompt) - 1 },
		"ragged":    func(r *Request) { r.Images[0].Embeds = r.Images[0].Embeds[1:] },
		"overlap": func(r *Request) {
			r.Images = append(r.Images, Image{Index: r.Images[0].Index + 1, Embeds: make([]float32, h)})
		},
	}
	for name, edit := range bad {
		r := c.req
		r.Images = slices.Clone(r.Images)
		edit(&r)
		if _, err := e.Submit(t.Context(), r); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
