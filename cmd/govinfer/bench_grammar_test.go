package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestBenchGrammar runs bench with each kind of constraint on a random
// checkpoint with the Qwen3 tokenizer, and checks the report: the mask
// time's median and p99 over the walks, applying it, and the decode
// tokens/s with and without it and their ratio, in the same run.
func TestBenchGrammar(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny")
	if code, _, errOut := run(t, "", "make-random", "--out", model, "--shape", "tiny", "--seed", "3"); code != exitOK {
		t.Fatalf("make-random: exit %d: %s", code, errOut)
	}
	for name, args := range map[string][]string{
		"regex":  {"--regex", `[a-z]+( [a-z]+)*\.`},
		"gbnf":   {"--grammar", filepath.Join("..", "..", "grammar", "gbnf", "testdata", "json.gbnf")},
		"lark":   {"--grammar", filepath.Join("..", "..", "grammar", "lark", "testdata", "patch.lark")},
		"schema": {"--json-schema", filepath.Join("..", "..", "jsonconstraint", "testdata", "contact.schema.json")},
	} {
		args = append([]string{"bench", "--model", model, "--gen", "12", "--repeat", "2", "--json"}, args...)
		code, out, errOut := run(t, "", args...)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		var res grammarBenchResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, out)
		}
		if res.MaskSteps == 0 || res.MaskMedianMicros <= 0 || res.MaskP99Micros < res.MaskMedianMicros || res.MaskMaxMicros < res.MaskP99Micros ||
			res.ApplyMedianMicros <= 0 || res.UnconstrainedTokensPerSec <= 0 || res.ConstrainedTokensPerSec <= 0 || res.ConstrainedTokens == 0 ||
			res.DecodeRatio != res.ConstrainedTokensPerSec/res.UnconstrainedTokensPerSec {
			t.Errorf("%s: implausible report %+v", name, res)
		}
	}
	bad := writeFile(t, filepath.Join(dir, "bad.json"), []byte(`{"type":`))
	if code, _, _ := run(t, "", "bench", "--model", model, "--json-schema", bad); code == exitOK {
		t.Error("a schema that is not JSON: exit 0")
	}
}
