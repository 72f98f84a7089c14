package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestDiagInProcess runs the whole diagnostic against govinfer's own server
// on a random checkpoint with the bundled tokenizer and the real Qwen3.5
// chat template: the plumbing checks must pass (random weights fail the
// behaviour checks, as they should).
func TestDiagInProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	tok := filepath.Join("..", "..", "testdata", "tokenizer", "qwen3")
	tmpl := filepath.Join("..", "..", "testdata", "chat", "chat_template.jinja")
	if code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--layers", "2",
		"--tokenizer", tok, "--chat-template", tmpl); code != exitOK {
		t.Fatalf("make-random: %s", errOut)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := run(t, "", "diag", "--model-dir", dir, "--report", report, "--long-context-tokens", "600")
	if code != exitOK {
		t.Fatalf("diag exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Status       string  `json:"status"`
		Identical    bool    `json:"identical_greedy_completions"`
		Isolation    bool    `json:"request_isolation_passed"`
		MedianDecode float64 `json:"median_decode_tokens_per_second"`
		DecodeRuns   []struct {
			TTFT float64 `json:"ttft_ms"`
			TPS  float64 `json:"decode_tokens_per_second"`
		} `json:"decode_runs"`
		LongContext []struct {
			Prepared int `json:"prepared_prompt_tokens"`
		} `json:"long_context"`
		Behavior []json.RawMessage `json:"behavior"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != "complete" || !rep.Identical || !rep.Isolation || rep.MedianDecode <= 0 {
		t.Errorf("status %q, identical %v, isolation %v, median decode %v", rep.Status, rep.Identical, rep.Isolation, rep.MedianDecode)
	}
	if len(rep.DecodeRuns) != 3 || len(rep.Behavior) != 11 || len(rep.LongContext) != 1 {
		t.Fatalf("%d decode runs, %d behaviour checks, %d long-context checks", len(rep.DecodeRuns), len(rep.Behavior), len(rep.LongContext))
	}
	for i, r := range rep.DecodeRuns {
		if r.TTFT <= 0 || r.TPS <= 0 {
			t.Errorf("decode run %d: ttft %v ms, %v tokens/s", i, r.TTFT, r.TPS)
		}
	}
	if p := rep.LongContext[0].Prepared; p < 500 || p > 600 {
		t.Errorf("long-context prompt of %d tokens, want just under 600", p)
	}
}
