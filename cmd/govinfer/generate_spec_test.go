package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/internal/testckpt"
)

// specOut is generate --json's output with speculation.
type specOut struct {
	IDs                []int     `json:"ids"`
	PromptLastLogits   []float32 `json:"prompt_last_logits"`
	SpecDraftTokens    *int      `json:"spec_draft_tokens"`
	SpecAcceptedTokens *int      `json:"spec_accepted_tokens"`
}

func generateJSON(t *testing.T, args ...string) specOut {
	t.Helper()
	code, out, errOut := run(t, "", append([]string{"generate", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res specOut
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	return res
}

// TestGenerateSpeculative runs vl-tiny's golden speculative prompts with
// --speculative-config for k = 1..4: the ids are plain greedy's and the
// goldens', and spec_draft_tokens / spec_accepted_tokens the goldens'
// totals over all rounds.
func TestGenerateSpeculative(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "vl-tiny")
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		K        int   `json:"k"`
		Tokens   []int `json:"tokens"`
		Accepted int   `json:"accepted_drafts"`
		Drafted  int   `json:"drafted"`
	}
	var g struct {
		MTP struct {
			Speculative struct {
				Prompt      []int `json:"prompt"`
				Steps       int   `json:"steps"`
				PlainGreedy []int `json:"plain_greedy"`
				Runs        []run `json:"runs"`
				Second      struct {
					Prompt   []int `json:"prompt"`
					K        int   `json:"k"`
					Tokens   []int `json:"tokens"`
					Accepted int   `json:"accepted_drafts"`
					Trace    []any `json:"trace"`
				} `json:"second_prompt"`
			} `json:"speculative"`
		} `json:"mtp"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	sg := g.MTP.Speculative
	if len(sg.Runs) != 4 {
		t.Fatalf("%d golden runs, want k = 1..4", len(sg.Runs))
	}
	ids := func(p []int) string { return strings.Trim(jsonString(t, p), "[]") }
	n := fmt.Sprint(sg.Steps)
	plain := generateJSON(t, "--model", dir, "--ids", ids(sg.Prompt), "-n", n)
	if !slices.Equal(plain.IDs, sg.PlainGreedy) || plain.SpecDraftTokens != nil || plain.SpecAcceptedTokens != nil {
		t.Fatalf("plain: ids %v (golden %v), spec counts %v %v", plain.IDs, sg.PlainGreedy, plain.SpecDraftTokens, plain.SpecAcceptedTokens)
	}
	sec := sg.Second
	runs := append(slices.Clone(sg.Runs), run{K: sec.K, Tokens: sec.Tokens, Accepted: sec.Accepted, Drafted: sec.K * len(sec.Trace)})
	for i, r := range runs {
		prompt, n, want := sg.Prompt, n, sg.PlainGreedy
		if i == len(runs)-1 {
			prompt, n, want = sec.Prompt, fmt.Sprint(len(sec.Tokens)), sec.Tokens
		}
		cfg := fmt.Sprintf(`{"method": "mtp", "num_speculative_tokens": %d}`, r.K)
		got := generateJSON(t, "--model", dir, "--ids", ids(prompt), "-n", n, "--speculative-config", cfg)
		if !slices.Equal(got.IDs, r.Tokens) || !slices.Equal(got.IDs, want) {
			t.Errorf("k=%d: ids %v, golden %v", r.K, got.IDs, r.Tokens)
		}
		if got.SpecDraftTokens == nil || got.SpecAcceptedTokens == nil ||
			*got.SpecDraftTokens != r.Drafted || *got.SpecAcceptedTokens != r.Accepted {
			t.Errorf("k=%d: spec_draft_tokens %v, spec_accepted_tokens %v; golden %d, %d", r.K, got.SpecDraftTokens, got.SpecAcceptedTokens, r.Drafted, r.Accepted)
		}
		if i == 0 && !slices.Equal(got.PromptLastLogits, plain.PromptLastLogits) {
			t.Errorf("k=%d: prompt_last_logits differ from the plain run's", r.K)
		}
	}
}

func TestGenerateSpeculativeErrors(t *testing.T) {
	vl := filepath.Join("..", "..", "testdata", "models", "vl-tiny")
	small := filepath.Join("..", "..", "testdata", "models", "small") // no mtp.* tensors
	// chat needs a tokenizer and template: a chat checkpoint with the
	// head, and one without it in place of small.
	vlChat, plainChat := t.TempDir(), t.TempDir()
	if err := testckpt.WriteVL(vlChat, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	if err := testckpt.Write(plainChat, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, cfg, want string
	}{
		{vl, `{"method": "mtp", "num_speculative_tokens": 0}`, "must be 1 to 4, got 0"},
		{vl, `{"method": "mtp", "num_speculative_tokens": 5}`, "must be 1 to 4, got 5"},
		{vl, `{"method": "eagle", "num_speculative_tokens": 2}`, `unknown method "eagle"`},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_max": 3}`, `are for method "ngram"`},
		{vl, `{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 3}`, "at most prompt_lookup_max"},
		{vl, `{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}`, "at least 1"},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2, "backoff": "no"}`, "not a JSON object"},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2, "draft_model": "x"}`, `unknown field "draft_model"`},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2.5}`, "not a JSON object"},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "q3_k"}`, `unknown draft_dtype "q3_k"`},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": 8}`, "not a JSON object"},
		{vl, `{"method": "ngram", "num_speculative_tokens": 2, "draft_dtype": "q8_0"}`, `draft_dtype is for method "mtp"`},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2`, "not a JSON object"},
		{vl, `{"method": "mtp", "num_speculative_tokens": 2} {}`, "trailing data"},
		{vl, `{"num_speculative_tokens": 2}`, `"method" is required`},
		{vl, `{"method": "mtp"}`, `"num_speculative_tokens" is required`},
		{vl, `mtp`, "want a JSON object"},
		{small, `{"method": "mtp", "num_speculative_tokens": 2}`, "needs the checkpoint's MTP head"},
	} {
		chatDir := vlChat
		if c.dir == small {
			chatDir = plainChat
		}
		// The same parser and errors on every command that takes the flag.
		for _, args := range [][]string{
			{"generate", "--model", c.dir, "--ids", "1,2,3", "-n", "4"},
			{"chat", "--model", chatDir, "--max-tokens", "4", "hello"},
			{"bench", "--model", c.dir, "--prompt", "8", "--gen", "2", "--repeat", "1", "--mem-mib", "16"},
		} {
			code, _, errOut := run(t, "", append(args, "--speculative-config", c.cfg)...)
			if code != exitUsage || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
				t.Errorf("%s %s %s: exit %d, stderr %q; want exit %d and %q", args[0], filepath.Base(c.dir), c.cfg, code, errOut, exitUsage, c.want)
			}
		}
	}
}

// TestChatSpeculative answers one question with and without
// --speculative-config on a chat checkpoint with an MTP head: greedy, the
// same answer.
func TestChatSpeculative(t *testing.T) {
	dir := t.TempDir()
	if err := testckpt.WriteVL(dir, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	// The random model reasons, and answers nothing: --show-thinking
	// writes the reasoning to standard error.
	args := []string{"chat", "--model", dir, "--temperature", "0", "--max-tokens", "24", "--show-thinking", "Count from one to ten."}
	code, plain, plainErr := run(t, "", args...)
	if code != exitOK || strings.TrimSpace(plain+plainErr) == "" {
		t.Fatalf("plain: exit %d, %q, %q", code, plain, plainErr)
	}
	code, spec, specErr := run(t, "", append(args, "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 3}`)...)
	if code != exitOK || spec != plain || specErr != plainErr {
		t.Errorf("speculative: exit %d, %q, %q; plain %q, %q", code, spec, specErr, plain, plainErr)
	}
}

// TestBenchSpeculative runs bench with --speculative-config: the engine's
// speculative and plain rates and the drafts of the run.
func TestBenchSpeculative(t *testing.T) {
	res, keys := benchJSON(t, "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 2}`)
	for _, k := range []string{"spec_method", "spec_num_tokens", "spec_decode_tokens_per_second", "spec_plain_decode_tokens_per_second", "spec_speedup", "spec_draft_tokens"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no key %q", k)
		}
	}
	if res.SpecMethod != "mtp" || res.SpecK != 2 || res.SpecDraftTokens <= 0 || res.SpecDraftTokens%2 != 0 ||
		res.SpecAcceptedTokens > res.SpecDraftTokens || res.SpecDecodeTokensPerSecond <= 0 || res.SpecPlainTokensPerSecond <= 0 {
		t.Errorf("implausible speculative result: %+v", res.specResult)
	}
	// bench's default draft_dtype; a Q8_0 draft head reads fewer bytes
	// than the exact one.
	if res.SpecDraftDType != defaultDraftDType {
		t.Errorf("draft dtype %q by default, want %q", res.SpecDraftDType, defaultDraftDType)
	}
	exact, _ := benchJSON(t, "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "exact"}`)
	q8, _ := benchJSON(t, "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "q8_0"}`)
	if exact.SpecDraftDType != "exact" || exact.SpecDraftFormat != "keep" || q8.SpecDraftDType != "q8_0" || q8.SpecDraftFormat != "Q8_0" ||
		!(q8.SpecDraftBytesFraction < 0.6*exact.SpecDraftBytesFraction) || !(q8.SpecProjected9BDraftFraction < exact.SpecProjected9BDraftFraction) {
		t.Errorf("draft dtypes %q (%q) and %q (%q): draft bytes fractions %v and %v, 9B %v and %v", exact.SpecDraftDType, exact.SpecDraftFormat,
			q8.SpecDraftDType, q8.SpecDraftFormat, exact.SpecDraftBytesFraction, q8.SpecDraftBytesFraction, exact.SpecProjected9BDraftFraction, q8.SpecProjected9BDraftFraction)
	}
	if _, keys := benchJSON(t); keys["spec_method"] != nil {
		t.Errorf("spec keys without --speculative-config: %v", keys["spec_method"])
	}
}

// TestGenerateNgram runs generate with n-gram speculation on a checkpoint
// without an MTP head: the ids are plain greedy's, and the counts are
// there.
func TestGenerateNgram(t *testing.T) {
	small := filepath.Join("..", "..", "testdata", "models", "small")
	plain := generateJSON(t, "--model", small, "--ids", "5,6,7,8,5,6,7,8,5,6", "-n", "20")
	got := generateJSON(t, "--model", small, "--ids", "5,6,7,8,5,6,7,8,5,6", "-n", "20",
		"--speculative-config", `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}`)
	// The random model does not repeat the prompt: drafts may be few or
	// none (the engine's tests check n-gram drafts that are accepted).
	if !slices.Equal(got.IDs, plain.IDs) || got.SpecDraftTokens == nil || got.SpecAcceptedTokens == nil || *got.SpecAcceptedTokens > *got.SpecDraftTokens {
		t.Errorf("ngram: ids %v, counts %v %v; plain %v", got.IDs, got.SpecDraftTokens, got.SpecAcceptedTokens, plain.IDs)
	}
}

func TestParseSpeculativeConfig(t *testing.T) {
	for _, c := range []struct {
		cfg     string
		backoff bool
		want    engine.Speculative
	}{
		{`{"method": "mtp", "num_speculative_tokens": 2}`, true, engine.Speculative{Method: "mtp", Tokens: 2, DraftQuantize: draftQuantizeOf(defaultDraftDType)}},
		{`{"method": "mtp", "num_speculative_tokens": 2}`, false, engine.Speculative{Method: "mtp", Tokens: 2, NoBackoff: true}},
		{`{"method": "mtp", "num_speculative_tokens": 2, "backoff": true}`, false, engine.Speculative{Method: "mtp", Tokens: 2}},
		{`{"method": "mtp", "num_speculative_tokens": 2, "backoff": false}`, true, engine.Speculative{Method: "mtp", Tokens: 2, NoBackoff: true, DraftQuantize: draftQuantizeOf(defaultDraftDType)}},
		{`{"method": "ngram", "num_speculative_tokens": 3}`, true, engine.Speculative{Method: "ngram", Tokens: 3, LookupMin: 5, LookupMax: 5}},
		{`{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}`, true, engine.Speculative{Method: "ngram", Tokens: 3, LookupMin: 4, LookupMax: 4}},
		{`{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}`, true, engine.Speculative{Method: "ngram", Tokens: 3, LookupMin: 2, LookupMax: 2}},
		{`{"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_min": 2, "prompt_lookup_max": 6}`, true, engine.Speculative{Method: "ngram", Tokens: 1, LookupMin: 2, LookupMax: 6}},
		// draft_dtype: exact by default in generate, defaultDraftDType in
		// serve, chat and bench.
		{`{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "q8_0"}`, false, engine.Speculative{Method: "mtp", Tokens: 2, NoBackoff: true, DraftQuantize: "q8_0"}},
		{`{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "q4_k"}`, true, engine.Speculative{Method: "mtp", Tokens: 2, DraftQuantize: "q4_k"}},
		{`{"method": "mtp", "num_speculative_tokens": 2, "draft_dtype": "exact"}`, true, engine.Speculative{Method: "mtp", Tokens: 2}},
		{`{"method": "mtp", "num_speculative_tokens": 3}`, true, engine.Speculative{Method: "mtp", Tokens: 3, DraftQuantize: draftQuantizeOf(defaultDraftDType)}},
	} {
		got, err := parseSpeculativeConfig(c.cfg, c.backoff)
		if err != nil || got.Method != c.want.Method || got.Tokens != c.want.Tokens || got.LookupMin != c.want.LookupMin ||
			got.LookupMax != c.want.LookupMax || got.NoBackoff != c.want.NoBackoff || got.DraftQuantize != c.want.DraftQuantize {
			t.Errorf("%s (backoff %v): %+v %v, want %+v", c.cfg, c.backoff, got, err, c.want)
		}
	}
}

// TestGenerateSpeculativeGGUF writes vl-tiny as BF16 GGUF files with
// quantize, its MTP head as the nextn block, and runs the golden
// speculative prompt from the file: the ids and the draft counts are the
// safetensors checkpoint's. A file without the head (small's) is a clear
// error.
func TestGenerateSpeculativeGGUF(t *testing.T) {
	vl := filepath.Join("..", "..", "testdata", "models", "vl-tiny")
	small := filepath.Join("..", "..", "testdata", "models", "small")
	dir := t.TempDir()
	for _, c := range []struct{ src, out string }{{vl, "vl.gguf"}, {small, "small.gguf"}} {
		if code, _, errOut := run(t, "", "quantize", "--model", c.src, "--out", filepath.Join(dir, c.out), "--type", "bf16"); code != exitOK {
			t.Fatalf("quantize %s: exit %d: %s", c.src, code, errOut)
		}
	}
	raw, err := os.ReadFile(filepath.Join(vl, "golden.json"))
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
	for k := 1; k <= 4; k++ {
		cfg := fmt.Sprintf(`{"method": "mtp", "num_speculative_tokens": %d}`, k)
		want := generateJSON(t, "--model", vl, "--ids", ids, "-n", n, "--speculative-config", cfg)
		got := generateJSON(t, "--model", filepath.Join(dir, "vl.gguf"), "--ids", ids, "-n", n, "--speculative-config", cfg)
		if !slices.Equal(got.IDs, want.IDs) || got.SpecDraftTokens == nil || got.SpecAcceptedTokens == nil ||
			*got.SpecDraftTokens != *want.SpecDraftTokens || *got.SpecAcceptedTokens != *want.SpecAcceptedTokens {
			t.Errorf("k=%d: GGUF ids %v, %v drafts, %v accepted; safetensors %v, %d, %d", k, got.IDs, got.SpecDraftTokens, got.SpecAcceptedTokens,
				want.IDs, *want.SpecDraftTokens, *want.SpecAcceptedTokens)
		}
	}
	code, _, errOut := run(t, "", "generate", "--model", filepath.Join(dir, "small.gguf"), "--ids", "1,2,3", "-n", "4",
		"--speculative-config", `{"method": "mtp", "num_speculative_tokens": 2}`)
	if code != exitUsage || !strings.Contains(errOut, "nextn_predict_layers") {
		t.Errorf("small.gguf: exit %d, %q; want exit %d naming nextn_predict_layers", code, errOut, exitUsage)
	}
}
