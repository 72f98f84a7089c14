package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/internal/machine"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/safetensors"
)

var tinyModel = filepath.Join("..", "..", "testdata", "models", "tiny")

// benchJSON runs bench --json on the tiny model with args added and
// returns the result decoded twice: as benchResult and as a key map.
func benchJSON(t *testing.T, args ...string) (benchResult, map[string]any) {
	t.Helper()
	args = append([]string{"bench", "--model", tinyModel, "--prompt", "16", "--gen", "4", "--repeat", "2", "--mem-mib", "16", "--json"}, args...)
	code, out, errOut := run(t, "", args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatal(err)
	}
	return res, keys
}

func TestBenchJSON(t *testing.T) {
	res, keys := benchJSON(t)
	if res.PrefillTokensPerSecond <= 0 || res.DecodeTokensPerSecond <= 0 || res.DecodeGBPerSecond <= 0 ||
		res.MemoryReadGBPerSecond <= 0 || res.DecodeBytesPerToken <= 0 || res.Prompt != 16 || res.Gen != 4 {
		t.Errorf("implausible result: %+v", res)
	}
	// The machine, measured in the same run.
	for _, k := range []string{"cpu_model", "cpu_features", "kernels", "read_gb_per_second_1_thread", "read_gb_per_second",
		"fma_f32_gflops_1_thread", "fma_f32_gflops", "prefill_flops", "prefill_gflops", "prefill_peak", "prefill_peak_fraction",
		"decode_read_fraction", "batch"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no key %q in %v", k, keys)
		}
	}
	if _, ok := keys["dot_bf16_gflops"]; ok != machine.HasDotBF16() {
		t.Errorf("dot_bf16_gflops present: %v, but the CPU has VDPBF16PS: %v", ok, machine.HasDotBF16())
	}
	if res.CPUModel == "" || !strings.Contains(res.Backend, res.Kernels+" kernels") ||
		res.ReadGBPerSecond1Thread <= 0 || res.ReadGBPerSecond <= 0 || res.MemoryReadGBPerSecond != res.ReadGBPerSecond ||
		res.FMAF32GFLOPS1Thread <= 0 || res.FMAF32GFLOPS <= 0 {
		t.Errorf("implausible machine figures: %+v", res)
	}
	if res.PrefillFLOPs != prefillFLOPs(mustConfig(t), 16) || res.PrefillGFLOPS <= 0 ||
		res.PrefillPeakFraction <= 0 || res.PrefillPeakFraction > 1.5 || res.DecodeReadFraction <= 0 || res.DecodeReadFraction > 10 {
		t.Errorf("implausible fractions: %+v", res)
	}
	// On Linux, the loop over huge pages too, and decode's share of it.
	if _, ok := keys["read_gb_per_second_huge_pages"]; ok != (runtime.GOOS == "linux") {
		t.Errorf("read_gb_per_second_huge_pages present: %v on %s", ok, runtime.GOOS)
	}
	if runtime.GOOS == "linux" && (res.ReadHugePageShare < 0 || res.ReadHugePageShare > 1 ||
		res.DecodeReadFractionHugePages != res.DecodeGBPerSecond/res.ReadGBPerSecondHugePages) {
		t.Errorf("implausible huge-page figures: %+v", res)
	}
	if res.Batch != 1 || res.BatchDecodeTokensPerSecond != 0 {
		t.Errorf("batch without --batch: %+v", res)
	}
	if code, _, _ := run(t, "", "bench", "--model", tinyModel, "--prompt", "0"); code != exitUsage {
		t.Errorf("--prompt 0: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := run(t, "", "bench", "--model", tinyModel, "--batch", "0"); code != exitUsage {
		t.Errorf("--batch 0: exit %d, want %d", code, exitUsage)
	}
}

func TestBenchBatch(t *testing.T) {
	res, _ := benchJSON(t, "--batch", "2")
	if res.Batch != 2 || res.BatchDecodeTokensPerSecond <= 0 || res.BatchDecodeSpeedup <= 0 ||
		res.BatchDecodeSpeedup != res.BatchDecodeTokensPerSecond/res.DecodeTokensPerSecond {
		t.Errorf("implausible batch result: %+v", res)
	}
}

// TestBenchProfileCPU checks --profile on the CPU backend: one embed, one
// argmax and one product with the output matrix per decoded token, a
// product per projection of every layer under its weight's name, and the
// table in the text output.
func TestBenchProfileCPU(t *testing.T) {
	res, _ := benchJSON(t, "--profile")
	cfg := mustConfig(t)
	ops := map[string]profileRow{}
	for _, r := range res.DecodeProfile {
		ops[r.Op] = r
	}
	if ops["embed"].Count != 1 || ops["argmax"].Count != 1 || ops["matmul lm_head"].Count != 1 ||
		ops["matmul gate_proj"].Count != float64(cfg.NumLayers) || ops["delta_rule"].Count != 3 || ops["attention"].Count != 1 {
		t.Errorf("implausible decode profile: %+v", res.DecodeProfile)
	}
	var total float64
	for _, r := range res.PrefillProfile {
		total += r.MS
	}
	if total <= 0 {
		t.Errorf("empty prefill profile: %+v", res.PrefillProfile)
	}
	code, out, errOut := run(t, "", "bench", "--model", tinyModel, "--prompt", "8", "--gen", "2", "--repeat", "1", "--mem-mib", "16", "--profile")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"cpu  ", "kernels", "read loop", "f32 fma", "GFLOP/s", "decode profile (per token)", "matmul lm_head", "wall time"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestBenchHelp checks that --help lists the JSON keys.
func TestBenchHelp(t *testing.T) {
	code, out, _ := run(t, "", "bench", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, k := range []string{"--batch", "cpu_model", "read_gb_per_second_1_thread", "fma_f32_gflops", "dot_bf16_gflops",
		"prefill_peak_fraction", "decode_read_fraction", "batch_decode_speedup", "prefill_profile"} {
		if !strings.Contains(out, k) {
			t.Errorf("--help does not mention %s", k)
		}
	}
}

// TestPrefillFLOPs checks the per-token part of prefillFLOPs against the
// matrix weights of the tiny checkpoint's text layers, less those of its
// last layer that only the last position takes (after the mixer's state
// updates), and its attention and output-matrix terms by their growth
// with the prompt.
func TestPrefillFLOPs(t *testing.T) {
	cfg := mustConfig(t)
	ck, err := safetensors.OpenCheckpoint(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var elems, lastOnly float64
	last := fmt.Sprintf("model.language_model.layers.%d.", len(cfg.LayerTypes)-1)
	for _, name := range ck.Names() {
		info, err := ck.Info(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "model.language_model.layers.") && len(info.Shape) == 2 && strings.Contains(name, "proj") {
			elems += float64(info.Shape[0] * info.Shape[1])
			if strings.HasPrefix(name, last) && (strings.Contains(name, ".mlp.") || strings.Contains(name, "o_proj") || strings.Contains(name, "out_proj") || strings.Contains(name, "in_proj_z")) {
				lastOnly += float64(info.Shape[0] * info.Shape[1])
			}
		}
	}
	if lastOnly == 0 {
		t.Fatal("no last-layer weights found")
	}
	if elems == 0 {
		t.Fatal("no matrix weights found")
	}
	lmHead := 2 * float64(cfg.HiddenSize*cfg.VocabSize)
	full := 0
	for _, k := range cfg.LayerTypes {
		if k == model.FullAttention {
			full++
		}
	}
	attn := func(n int) float64 {
		return float64(4*full*cfg.NumHeads*cfg.HeadDim) * float64(n*(n+1)/2)
	}
	for _, n := range []int{1, 16, 100} {
		if got, want := prefillFLOPs(cfg, n), 2*elems*float64(n)-2*lastOnly*float64(n-1)+attn(n)+lmHead; got != want {
			t.Errorf("prefillFLOPs(%d) = %g, want %g", n, got, want)
		}
	}
}

func mustConfig(t *testing.T) *model.Config {
	t.Helper()
	cfg, err := model.LoadConfig(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestBenchBF16Inputs checks the peak prefill is measured against: the
// AMX tile rate over the inputs' parts where the CPU has AMX tiles (the
// default), else the f32 FMA rate for the exact products and the
// VDPBF16PS rate with --bf16-inputs where the CPU has it; that the kernel
// set says whether the tiles run, the backend whether the FMA tiles do;
// and that --bf16-inputs refuses the
// Vulkan backend.
func TestBenchBF16Inputs(t *testing.T) {
	amx := asm.Detect().TilesBF16()
	tiles := amx && machine.HasTileBF16()
	dot := machine.HasDotBF16() && asm.Detect().Features().AVX512BF16
	fmaTiles := asm.Detect().TilesFMA()
	for _, args := range [][]string{nil, {"--amx-tiles=false"}, {"--bf16-inputs"}, {"--bf16-inputs", "--amx-tiles=false"},
		{"--amx-tiles=false", "--fma-tiles=false"}} {
		noTiles := slices.Contains(args, "--amx-tiles=false")
		want := "fma_f32"
		switch {
		case tiles && !noTiles:
			want = "amx_bf16"
		case dot && slices.Contains(args, "--bf16-inputs"):
			want = "dot_bf16"
		}
		res, _ := benchJSON(t, args...)
		if res.PrefillPeak != want || res.PrefillPeakFraction <= 0 {
			t.Errorf("%v: prefill_peak %q (fraction %v), want %q", args, res.PrefillPeak, res.PrefillPeakFraction, want)
		}
		if on := strings.HasSuffix(res.Kernels, "-amx"); on != (amx && !noTiles) {
			t.Errorf("%v: kernels %q on a CPU with AMX tiles %v", args, res.Kernels, amx)
		}
		wantFMA := fmaTiles && (!amx || noTiles) && !slices.Contains(args, "--bf16-inputs") && !slices.Contains(args, "--fma-tiles=false")
		if on := strings.Contains(res.Backend, "FMA tiles"); on != wantFMA {
			t.Errorf("%v: backend %q, want FMA tiles %v", args, res.Backend, wantFMA)
		}
	}
	code, _, errOut := run(t, "", "bench", "--model", tinyModel, "--backend", "vulkan", "--bf16-inputs")
	if code != exitUsage || !strings.Contains(errOut, "--bf16-inputs applies to --backend cpu only") {
		t.Errorf("--backend vulkan --bf16-inputs: exit %d, %q", code, errOut)
	}
}

// TestBenchBatchProfile checks that --profile with --batch reports where a
// batch step spends its time.
func TestBenchBatchProfile(t *testing.T) {
	res, keys := benchJSON(t, "--batch", "2", "--profile")
	if _, ok := keys["batch_decode_profile"]; !ok || len(res.BatchDecodeProfile) == 0 {
		t.Fatalf("no batch_decode_profile: %v", keys)
	}
	var matmul bool
	for _, r := range res.BatchDecodeProfile {
		matmul = matmul || strings.HasPrefix(r.Op, "matmul ")
	}
	if !matmul {
		t.Errorf("batch_decode_profile has no matmul rows: %+v", res.BatchDecodeProfile)
	}
}

// TestBenchMoE checks bench's mixture-of-experts figures on moe-tiny: a
// decoded token runs k experts in every layer, a batch step runs each
// chosen expert once (so no more than the batch's tokens would alone, and
// no more than every expert), and the step's bytes count those experts
// beside the dense weights.
func TestBenchMoE(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "moe-tiny")
	code, out, errOut := run(t, "", "bench", "--model", dir, "--prompt", "16", "--gen", "4", "--repeat", "1", "--batch", "8",
		"--threads", "2", "--mem-mib", "16", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, layers := float64(cfg.NumExpertsPerTok), float64(cfg.NumLayers)
	if res.DecodeExpertsPerToken != k*layers {
		t.Errorf("decode_experts_per_token %v, want %v", res.DecodeExpertsPerToken, k*layers)
	}
	if res.BatchExpertsPerStep < k*layers || res.BatchExpertsPerStep > float64(cfg.NumExperts)*layers {
		t.Errorf("batch_experts_per_step %v, want from %v to %v", res.BatchExpertsPerStep, k*layers, float64(cfg.NumExperts)*layers)
	}
	if !(res.BatchDecodeBytesStep > float64(res.DecodeBytesPerToken)) || !(res.DecodeMoEFraction > 0 && res.DecodeMoEFraction < 1) {
		t.Errorf("batch_decode_bytes_per_step %v (one token %d), decode_moe_fraction %v", res.BatchDecodeBytesStep, res.DecodeBytesPerToken, res.DecodeMoEFraction)
	}
	// moe-tiny's experts are BF16: 3 matrices of width × hidden, 2 bytes each.
	if want := k * layers * float64(3*cfg.MoEIntermediateSize*cfg.HiddenSize*2); res.DecodeExpertBytesPerToken != want {
		t.Errorf("decode_expert_bytes_per_token %v, want %v", res.DecodeExpertBytesPerToken, want)
	}
}
