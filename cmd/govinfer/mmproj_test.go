package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
)

// llama.cpp's BF16 mmproj file of vl-tiny's tower (testdata/gguf).
var llamaMMProj = filepath.Join("..", "..", "testdata", "gguf", "vl-tiny-mmproj-bf16.gguf")

// vlGGUF writes vl-tiny with a tokenizer of its ids (testckpt.WriteVL) and
// converts it with quantize: the text model to BF16 GGUF and the tower to
// a BF16 mmproj file beside it. It returns the checkpoint directory and
// the two files.
func vlGGUF(t *testing.T) (ck, model, mmproj string) {
	t.Helper()
	ck = t.TempDir()
	if err := testckpt.WriteVL(ck, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, mmproj = filepath.Join(dir, "vl-tiny-bf16.gguf"), filepath.Join(dir, "mmproj-vl-tiny-bf16.gguf")
	code, out, errOut := run(t, "", "quantize", "--model", ck, "--out", model, "--type", "bf16", "--mmproj", mmproj, "--mmproj-type", "bf16")
	if code != exitOK {
		t.Fatalf("quantize: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"wrote " + mmproj + ": mmproj bf16 (general.file_type 32), 34 tensors",
		"read back: vision tower of 2 blocks, width 32, 2 heads, patch 8, merge 2, output 64, pixels [1024, 16384]"} {
		if !strings.Contains(out, want) {
			t.Errorf("quantize stdout %q lacks %q", out, want)
		}
	}
	return ck, model, mmproj
}

// genResult is generate --json's output.
type genResult struct {
	PromptIDs        []int     `json:"prompt_ids"`
	IDs              []int     `json:"ids"`
	PromptLastLogits []float32 `json:"prompt_last_logits"`
}

// TestGenerateImageMMProj runs generate --image on vl-tiny's golden cases
// with the tower from mmproj files: a GGUF model with the mmproj
// quantize wrote beside it (found by itself), the same named with
// --mmproj, and the checkpoint with llama.cpp's mmproj in place of its own
// tower. Each gives the checkpoint's expanded prompt and greedy ids, and
// prompt logits within 1e-5 of its.
func TestGenerateImageMMProj(t *testing.T) {
	ck, model, mmproj := vlGGUF(t)
	dir := filepath.Join("..", "..", "testdata", "models", "vl-tiny")
	var g struct {
		Images map[string]struct {
			File string `json:"file"`
		} `json:"images"`
		Cases []struct {
			Name       string   `json:"name"`
			Images     []string `json:"images"`
			Unexpanded []int    `json:"prompt_unexpanded"`
			InputIDs   []int    `json:"input_ids"`
		} `json:"mm_cases"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	gen := func(t *testing.T, args ...string) (genResult, string) {
		t.Helper()
		code, out, errOut := run(t, "", append([]string{"generate", "-n", "8", "--json"}, args...)...)
		if code != exitOK {
			t.Fatalf("generate %v: exit %d: %s", args, code, errOut)
		}
		var r genResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out)
		}
		return r, errOut
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			args := []string{"--ids", strings.Trim(jsonString(t, c.Unexpanded), "[]")}
			for _, name := range c.Images {
				args = append(args, "--image", filepath.Join(dir, g.Images[name].File))
			}
			want, _ := gen(t, append([]string{"--model", ck}, args...)...)
			if !slices.Equal(want.PromptIDs, c.InputIDs) {
				t.Fatalf("checkpoint: prompt_ids %v, golden %v", want.PromptIDs, c.InputIDs)
			}
			for _, v := range []struct {
				name string
				args []string
				note string
			}{
				{"GGUF, mmproj beside", []string{"--model", model}, "vision tower: " + mmproj + " (found beside the model"},
				{"GGUF, --mmproj", []string{"--model", model, "--mmproj", mmproj}, ""},
				{"checkpoint, llama.cpp's mmproj", []string{"--model", ck, "--mmproj", llamaMMProj}, ""},
			} {
				got, errOut := gen(t, append(v.args, args...)...)
				if !strings.Contains(errOut, v.note) || v.note == "" && strings.Contains(errOut, "vision tower:") {
					t.Errorf("%s: stderr %q, want the note %q", v.name, errOut, v.note)
				}
				if !slices.Equal(got.PromptIDs, want.PromptIDs) || !slices.Equal(got.IDs, want.IDs) {
					t.Errorf("%s: prompt_ids %v ids %v; the checkpoint's %v and %v", v.name, got.PromptIDs, got.IDs, want.PromptIDs, want.IDs)
				}
				if len(got.PromptLastLogits) != len(want.PromptLastLogits) {
					t.Fatalf("%s: %d logits, want %d", v.name, len(got.PromptLastLogits), len(want.PromptLastLogits))
				}
				var d, m float64
				for i, w := range want.PromptLastLogits {
					d = max(d, math.Abs(float64(got.PromptLastLogits[i]-w)))
					m = max(m, math.Abs(float64(w)))
				}
				t.Logf("%s: prompt logits rel err %.3g against the checkpoint's", v.name, d/m)
				if d/m > 1e-5 {
					t.Errorf("%s: prompt logits rel err %.3g > 1e-5", v.name, d/m)
				}
			}
		})
	}
}

// TestMMProjCommandErrors checks the errors of --mmproj and of quantize
// --mmproj: several mmproj files beside a model, none, a file that is not
// a projector or is missing, a projector of another width, and bad
// quantize flags; each names the fault and exits non-zero.
func TestMMProjCommandErrors(t *testing.T) {
	_, model, mmproj := vlGGUF(t)
	img := filepath.Join("..", "..", "testdata", "models", "vl-tiny", "images", "gradient_64x48.png")
	link := func(t *testing.T, dir, name, target string) {
		t.Helper()
		abs, err := filepath.Abs(target)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	several := t.TempDir()
	link(t, several, "vl.gguf", model)
	link(t, several, "mmproj-a.gguf", mmproj)
	link(t, several, "mmproj-b.gguf", llamaMMProj)
	alone := t.TempDir()
	link(t, alone, "vl.gguf", model)
	ksmall := filepath.Join("..", "..", "testdata", "gguf", "ksmall-bf16.gguf")
	ids := "993,996,994"
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"several beside", []string{"generate", "--model", filepath.Join(several, "vl.gguf"), "--ids", ids, "--image", img}, exitUsage,
			"2 mmproj files beside the model (mmproj-a.gguf, mmproj-b.gguf): choose the vision tower with --mmproj FILE"},
		{"none beside", []string{"generate", "--model", filepath.Join(alone, "vl.gguf"), "--ids", ids, "--image", img}, exitUsage,
			"a GGUF model's is in a separate mmproj file; give it with --mmproj FILE"},
		{"not a projector", []string{"generate", "--model", model, "--mmproj", model, "--ids", ids, "--image", img}, exitUsage,
			`not a Qwen3.5 mmproj file: general.architecture is "qwen35", want "clip"`},
		{"missing", []string{"generate", "--model", model, "--mmproj", filepath.Join(alone, "none.gguf"), "--ids", ids, "--image", img}, exitUsage,
			"--mmproj " + filepath.Join(alone, "none.gguf") + ": no such file or directory"},
		{"other width", []string{"generate", "--model", ksmall, "--mmproj", mmproj, "--ids", "1,2", "--image", img}, exitUsage,
			"its projection_dim 64 is not the text model's hidden size 256"},
		{"chat, none beside", []string{"chat", "--model", filepath.Join(alone, "vl.gguf"), "--image", img, "hi"}, exitError,
			"has no vision tower: a GGUF model's is in a separate mmproj file; give it with --mmproj FILE"},
		{"chat, several beside", []string{"chat", "--model", filepath.Join(several, "vl.gguf"), "hi"}, exitUsage,
			"2 mmproj files beside the model"},
		{"serve, several beside", []string{"serve", "--model", filepath.Join(several, "vl.gguf"), "--port", "0"}, exitUsage,
			"2 mmproj files beside the model"},
		{"quantize type", []string{"quantize", "--model", ksmallDir, "--mmproj", filepath.Join(alone, "m.gguf"), "--mmproj-type", "q8_0"}, exitUsage,
			`--mmproj-type "q8_0": want one of f16, bf16, f32`},
		{"quantize no tower", []string{"quantize", "--model", ksmallDir, "--mmproj", filepath.Join(alone, "m.gguf")}, exitError,
			"no vision tower: neither model.visual.patch_embed.proj.weight"},
		{"quantize type without out", []string{"quantize", "--model", ksmallDir, "--type", "bf16", "--mmproj", filepath.Join(alone, "m.gguf")}, exitUsage,
			"--model, --out and --type are required, or --model and --mmproj alone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(t, "", c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, c.code, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(alone, "m.gguf")); err == nil {
		t.Error("a failed quantize --mmproj left a file")
	}
	// quantize --mmproj alone writes the tower only.
	code, out, errOut := run(t, "", "quantize", "--model", filepath.Join("..", "..", "testdata", "models", "vl-tiny"), "--mmproj", filepath.Join(alone, "m.gguf"))
	if code != exitOK || !strings.Contains(out, "mmproj f16 (general.file_type 1), 34 tensors") {
		t.Errorf("quantize --mmproj alone: exit %d, %q, %q", code, out, errOut)
	}
}
