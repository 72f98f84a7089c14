package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/tokenizer"
)

// run calls the dispatcher as the binary would and returns exit code and
// both outputs.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := dispatch(context.Background(), stdio{in: strings.NewReader(stdin), out: &out, err: &errOut}, args)
	return code, out.String(), errOut.String()
}

func TestGenerateJSONMatchesGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	var g struct {
		Cases []struct {
			Prompt       []int `json:"prompt"`
			GreedyTokens []int `json:"greedy_tokens"`
			LastArgmax   int   `json:"last_argmax"`
		} `json:"cases"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	c := g.Cases[1] // 5 tokens; tiny has no greedy step below the margin rule
	ids := strings.Trim(jsonString(t, c.Prompt), "[]")
	code, out, errOut := run(t, "", "generate", "--model", dir, "--ids", ids, "-n", "24", "--temperature", "0", "--json")
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
	if jsonString(t, res.PromptIDs) != jsonString(t, c.Prompt) {
		t.Errorf("prompt_ids %v, want %v", res.PromptIDs, c.Prompt)
	}
	if jsonString(t, res.IDs) != jsonString(t, c.GreedyTokens) {
		t.Errorf("ids %v, golden greedy tokens %v", res.IDs, c.GreedyTokens)
	}
	best := 0
	for i, v := range res.PromptLastLogits {
		if v > res.PromptLastLogits[best] {
			best = i
		}
	}
	if best != c.LastArgmax {
		t.Errorf("argmax of prompt_last_logits %d, golden %d", best, c.LastArgmax)
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGenerateErrors(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	cases := map[string][]string{
		"unknown flag":    {"generate", "--model", dir, "--ids", "1", "--frobnicate"},
		"no model":        {"generate", "--ids", "1"},
		"missing dir":     {"generate", "--model", filepath.Join(t.TempDir(), "nope"), "--ids", "1"},
		"empty ids":       {"generate", "--model", dir, "--ids", ""},
		"bad id":          {"generate", "--model", dir, "--ids", "1,x"},
		"out of vocab":    {"generate", "--model", dir, "--ids", "1,1024"},
		"negative id":     {"generate", "--model", dir, "--ids", "-5"},
		"not a model":     {"generate", "--model", t.TempDir(), "--ids", "1"},
		"unknown backend": {"generate", "--model", dir, "--ids", "1", "--backend", "abacus"},
	}
	for name, args := range cases {
		code, _, errOut := run(t, "", args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d", name, code, exitUsage)
		}
		if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; errOut == "" || lines != 1 {
			t.Errorf("%s: want a one-line error, got %q", name, errOut)
		}
	}
}

func TestMakeRandomLoads(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--layers", "5", "--vocab", "300", "--seed", "7", "--no-tokenizer")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, out, errOut := run(t, "", "generate", "--model", dir, "--ids", "1,2,3", "-n", "4")
	if code != exitOK {
		t.Fatalf("generate on the random model: exit %d: %s", code, errOut)
	}
	if got := strings.Count(out, ",") + 1; got != 4 {
		t.Errorf("generated %q, want 4 ids", out)
	}
	// Same seed, same bytes.
	dir2 := t.TempDir()
	if code, _, errOut := run(t, "", "make-random", "--out", dir2, "--shape", "tiny", "--layers", "5", "--vocab", "300", "--seed", "7", "--no-tokenizer"); code != exitOK {
		t.Fatal(errOut)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir2, "model.safetensors"))
	if !bytes.Equal(a, b) {
		t.Error("make-random is not deterministic for a fixed seed")
	}
}

func TestMakeRandomWithTokenizer(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join("..", "..", "testdata", "tokenizer", "qwen3")
	tmpl := filepath.Join("..", "..", "testdata", "chat", "chat_template.jinja")
	code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--layers", "1", "--tokenizer", tok, "--chat-template", tmpl)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	var gen struct {
		EOS []int `json:"eos_token_id"`
	}
	data, _ := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if err := json.Unmarshal(data, &gen); err != nil || len(gen.EOS) != 2 || gen.EOS[0] != 151645 || gen.EOS[1] != 151643 {
		t.Errorf("eos ids %v (err %v), want the tokenizer's <|im_end|> 151645 and <|endoftext|> 151643", gen.EOS, err)
	}
	// The vocabulary covers the tokenizer: its largest id is accepted.
	if code, _, errOut := run(t, "", "generate", "--model", dir, "--ids", "151668", "-n", "1"); code != exitOK {
		t.Errorf("generate with the largest tokenizer id: %s", errOut)
	}
	if code, _, _ := run(t, "", "make-random", "--out", t.TempDir(), "--tokenizer", t.TempDir()); code != exitUsage {
		t.Errorf("missing tokenizer.json: exit %d, want %d", code, exitUsage)
	}
}

// TestGeneratePrompt: --prompt tokenizes raw text, generates the ids --ids
// would (greedy) and prints their text.
func TestGeneratePrompt(t *testing.T) {
	dir := servableCheckpoint(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const text = "The capital of France is"
	code, out, errOut := run(t, "", "generate", "--model", dir, "--prompt", text, "-n", "8", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		PromptIDs []int   `json:"prompt_ids"`
		IDs       []int   `json:"ids"`
		Text      *string `json:"text"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if want := tok.Encode(text); jsonString(t, res.PromptIDs) != jsonString(t, want) {
		t.Errorf("prompt_ids %v, want the raw text's %v (no chat template)", res.PromptIDs, want)
	}
	if res.Text == nil || *res.Text != tok.Decode(res.IDs, true) || len(res.IDs) == 0 || len(res.IDs) > 8 {
		t.Errorf("ids %v, text %v: want up to 8 ids and their text", res.IDs, res.Text)
	}
	// The same ids through --ids: the same tokens (up to an end of sequence).
	ids := strings.Trim(jsonString(t, res.PromptIDs), "[]")
	code, out, errOut = run(t, "", "generate", "--model", dir, "--ids", ids, "-n", "8")
	if code != exitOK || !strings.HasPrefix(out, strings.Trim(jsonString(t, res.IDs), "[]")) {
		t.Errorf("--ids %s: exit %d, %q %s; want %v first", ids, code, out, errOut, res.IDs)
	}
	// Without --json: the text alone.
	code, out, errOut = run(t, "", "generate", "--model", dir, "--prompt", text, "-n", "8")
	if code != exitOK || out != *res.Text+"\n" {
		t.Errorf("text output: exit %d, %q (%s); want %q", code, out, errOut, *res.Text+"\n")
	}
	// --ids output keeps its shape: no text key.
	code, out, _ = run(t, "", "generate", "--model", dir, "--ids", ids, "-n", "2", "--json")
	if code != exitOK || strings.Contains(out, `"text"`) {
		t.Errorf("--ids --json: exit %d, %s", code, out)
	}
	tiny := filepath.Join("..", "..", "testdata", "models", "tiny") // no tokenizer
	for name, args := range map[string][]string{
		"both":         {"--model", dir, "--ids", "1", "--prompt", "x"},
		"neither":      {"--model", dir},
		"no tokenizer": {"--model", tiny, "--prompt", "x"},
	} {
		code, _, errOut := run(t, "", append([]string{"generate"}, args...)...)
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, %q; want a one-line usage error", name, code, errOut)
		}
	}
}

// TestGenerateBF16Inputs checks that --bf16-inputs reaches the backend:
// the prompt's last logits move off the exact ones, by about bf16's
// rounding of the products' inputs (model.TestBF16InputsSmall bounds it).
func TestGenerateBF16Inputs(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	logits := func(extra ...string) []float32 {
		args := append([]string{"generate", "--model", dir, "--ids", "1,2,3,4,5,6,7,8", "-n", "1", "--json"}, extra...)
		code, out, errOut := run(t, "", args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		var res struct {
			PromptLastLogits []float32 `json:"prompt_last_logits"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		return res.PromptLastLogits
	}
	exact, rounded := logits(), logits("--bf16-inputs")
	var diff, mag float64
	for i := range exact {
		diff = max(diff, math.Abs(float64(rounded[i]-exact[i])))
		mag = max(mag, math.Abs(float64(exact[i])))
	}
	if rel := diff / mag; rel == 0 || rel > 0.03 {
		t.Errorf("--bf16-inputs moved the logits by %.3g of their largest, want between 0 and 0.03", rel)
	}
}
