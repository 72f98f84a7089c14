package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestQuantizeFlag checks --quantize on generate and bench: each mix loads
// and runs with a progress line, an unknown one is a usage error.
func TestQuantizeFlag(t *testing.T) {
	for _, mix := range []string{"q8_0", "q4_k_m"} {
		code, out, errOut := run(t, "", "generate", "--model", "../../testdata/models/small", "--ids", "1,2,3", "-n", "3", "--quantize", mix)
		if code != exitOK || len(strings.Split(strings.TrimSpace(out), ",")) != 3 {
			t.Fatalf("generate --quantize %s: exit %d, stdout %q, stderr %q", mix, code, out, errOut)
		}
		if !strings.Contains(errOut, "loading and quantizing ("+mix+")") {
			t.Errorf("generate --quantize %s: no progress line in %q", mix, errOut)
		}
	}
	code, out, errOut := run(t, "", "bench", "--model", "../../testdata/models/small", "--prompt", "8", "--gen", "2", "--repeat", "1", "--quantize", "q4_k_m", "--json")
	if code != exitOK || !strings.Contains(out, "decode_bytes_per_token") {
		t.Fatalf("bench --quantize: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{{"generate", "--ids", "1"}, {"bench"}} {
		code, _, errOut := run(t, "", append(args, "--model", "../../testdata/models/small", "--quantize", "q3")...)
		if code != exitUsage || !strings.Contains(errOut, "--quantize") {
			t.Errorf("%s --quantize q3: exit %d, stderr %q", args[0], code, errOut)
		}
	}
}

// TestQuantizeMoE writes mixture-of-experts checkpoints as qwen35moe GGUF
// files: kmoe (fused experts) in q4_k_m, read back with its expert counts
// and run by bench; moe-tiny in BF16 with its MoE MTP head as the nextn
// block, whose speculative decoding of the golden prompt gives the
// checkpoint's ids, and the greedy ids of plain decoding.
func TestQuantizeMoE(t *testing.T) {
	dir := t.TempDir()
	kmoe := filepath.Join(dir, "kmoe-q4_k_m.gguf")
	code, stdout, stderr := run(t, "", "quantize", "--model", filepath.Join("..", "..", "testdata", "gguf", "kmoe"), "--out", kmoe, "--type", "q4_k_m")
	if code != exitOK {
		t.Fatalf("quantize kmoe: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "read back: 4 layers, hidden 256, vocabulary 2048, 4 experts (2 a token) of width 256, shared expert 256, 76 tensors") {
		t.Errorf("stdout %q", stdout)
	}
	code, stdout, stderr = run(t, "", "bench", "--model", kmoe, "--prompt", "8", "--gen", "2", "--repeat", "1", "--json")
	if code != exitOK || !strings.Contains(stdout, "decode_bytes_per_token") {
		t.Errorf("bench on the kmoe q4_k_m file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	tiny := filepath.Join("..", "..", "testdata", "models", "moe-tiny")
	file := filepath.Join(dir, "moe-tiny.gguf")
	if code, _, errOut := run(t, "", "quantize", "--model", tiny, "--out", file, "--type", "bf16"); code != exitOK {
		t.Fatalf("quantize moe-tiny: exit %d: %s", code, errOut)
	}
	raw, err := os.ReadFile(filepath.Join(tiny, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		MTP struct {
			Speculative struct {
				Prompt []int `json:"prompt"`
				Steps  int   `json:"steps"`
			} `json:"speculative"`
		} `json:"mtp"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	ids := strings.Trim(jsonString(t, g.MTP.Speculative.Prompt), "[]")
	n := fmt.Sprint(g.MTP.Speculative.Steps)
	plain := generateJSON(t, "--model", tiny, "--ids", ids, "-n", n)
	if got := generateJSON(t, "--model", file, "--ids", ids, "-n", n); !slices.Equal(got.IDs, plain.IDs) {
		t.Errorf("GGUF ids %v, safetensors %v", got.IDs, plain.IDs)
	}
	for k := 1; k <= 3; k++ {
		cfg := fmt.Sprintf(`{"method": "mtp", "num_speculative_tokens": %d}`, k)
		want := generateJSON(t, "--model", tiny, "--ids", ids, "-n", n, "--speculative-config", cfg)
		got := generateJSON(t, "--model", file, "--ids", ids, "-n", n, "--speculative-config", cfg)
		if !slices.Equal(got.IDs, plain.IDs) || !slices.Equal(want.IDs, plain.IDs) || got.SpecDraftTokens == nil || *got.SpecDraftTokens == 0 {
			t.Errorf("k=%d: GGUF ids %v (%v drafts), safetensors %v, plain %v", k, got.IDs, got.SpecDraftTokens, want.IDs, plain.IDs)
		} else {
			t.Logf("k=%d: GGUF %d drafts, %d accepted; safetensors %d, %d", k, *got.SpecDraftTokens, *got.SpecAcceptedTokens, *want.SpecDraftTokens, *want.SpecAcceptedTokens)
		}
	}
}
