package main

import (
	"encoding/json"
	"github.com/govinfer/govinfer/asm"
	"path/filepath"
	"strings"
	"testing"
)

var vlTinyModel = filepath.Join("..", "..", "testdata", "models", "vl-tiny")

// TestBenchImage runs bench --image-tokens on vl-tiny: one image of 12
// tokens, 3x4 merged, encoded and prefilled beside a text prompt of the
// same length.
func TestBenchImage(t *testing.T) {
	code, out, errOut := run(t, "", "bench", "--model", vlTinyModel, "--image-tokens", "12", "--repeat", "2", "--threads", "1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res imageBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.ImageTokens != 12 || res.ImageGrid != [3]int{1, 6, 8} || res.ImagePixels != [2]int{48, 64} || res.PromptTokens != 14 {
		t.Errorf("image %d tokens, grid %v, %v pixels, prompt %d: want 12, [1 6 8], [48 64], 14",
			res.ImageTokens, res.ImageGrid, res.ImagePixels, res.PromptTokens)
	}
	if res.VisionEncodeSeconds <= 0 || res.VisionEncodeTokensPerSecond <= 0 || res.ImagePrefillTokensPerSecond <= 0 ||
		res.TextPrefillTokensPerSecond <= 0 || res.ImagePrefillRatio <= 0 {
		t.Errorf("implausible result: %+v", res)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if !strings.Contains(imageBenchKeys, k) {
			t.Errorf("key %q not listed in --help", k)
		}
	}

	dir := t.TempDir()
	if code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny"); code != exitOK {
		t.Fatalf("make-random: exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, "", "bench", "--model", dir, "--image-tokens", "4", "--repeat", "1")
	if code == exitOK || !strings.Contains(errOut, "vision_config") {
		t.Errorf("a model without a tower: exit %d, %q", code, errOut)
	}
}

func TestImageGrid(t *testing.T) {
	for _, c := range []struct {
		n    int
		want [3]int
	}{{1024, [3]int{1, 64, 64}}, {12, [3]int{1, 6, 8}}, {7, [3]int{1, 2, 14}}, {1, [3]int{1, 2, 2}}} {
		if got := imageGrid(c.n, 2); got != c.want {
			t.Errorf("imageGrid(%d, 2) = %v, want %v", c.n, got, c.want)
		}
	}
}

// TestBenchCPUKernels forces the AVX2 set where the CPU runs it: the
// kernels and the machine's peaks are then AVX2's.
func TestBenchCPUKernels(t *testing.T) {
	if code, _, errOut := run(t, "", "bench", "--model", tinyModel, "--cpu-kernels", "avx9"); code != exitUsage || !strings.Contains(errOut, "unknown set") {
		t.Errorf("--cpu-kernels avx9: exit %d, %q", code, errOut)
	}
	if !asm.Detect().Features().AVX2 {
		t.Skip("no AVX2")
	}
	res, _ := benchJSON(t, "--cpu-kernels", "avx2")
	if res.Kernels != "avx2" || !strings.HasPrefix(res.FMAProbe, "avx2 ") || !strings.HasPrefix(res.ReadProbe, "avx2 ") ||
		res.DotBF16GFLOPS != 0 || res.AMXBF16GFLOPS != 0 {
		t.Errorf("forced avx2: kernels %q, probes %q and %q, bf16 %g, amx %g", res.Kernels, res.FMAProbe, res.ReadProbe, res.DotBF16GFLOPS, res.AMXBF16GFLOPS)
	}
}
