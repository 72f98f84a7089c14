package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

func TestExpandMultiValue(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"--lora-modules", "a=x", "b=y", "--port", "1"}, []string{"--lora-modules", "a=x", "--lora-modules", "b=y", "--port", "1"}},
		{[]string{"--lora-modules=a=x", "b=y"}, []string{"--lora-modules", "a=x", "--lora-modules", "b=y"}},
		{[]string{"-lora-modules", `{"name": "a", "path": "x"}`}, []string{"-lora-modules", `{"name": "a", "path": "x"}`}},
		{[]string{"--lora-modules", "--port", "1"}, []string{"--lora-modules", "--port", "1"}},
		{[]string{"--model", "m", "--lora-modules", "a=x"}, []string{"--model", "m", "--lora-modules", "a=x"}},
	} {
		if got := expandMultiValue(c.in, "lora-modules"); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseLoRAModule(t *testing.T) {
	for in, want := range map[string]llm.LoRAAdapter{
		"sql=/a/b": {Name: "sql", Path: "/a/b"},
		"x=/p=q":   {Name: "x", Path: "/p=q"},
		`{"name": "sql", "path": "/a", "base_model_name": "qwen"}`: {Name: "sql", Path: "/a"},
	} {
		got, err := parseLoRAModule(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"sql", "=x", "x=", `{"name": "a"}`, `{"name": "a", "path": "b", "scale": 2}`} {
		if _, err := parseLoRAModule(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	var l loraPaths
	for _, v := range []string{"/a/sql:0.5", "/b/sql", "c:d"} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if l[0] != (llm.LoRAAdapter{Name: "sql", Path: "/a/sql", Scale: 0.5}) || l[1].Name == "sql" || l[1].Scale != 1 || l[2].Path != "c:d" {
		t.Errorf("--lora: %+v", l)
	}
}

// TestServeLoRAFlags checks serve's refusals of bad LoRA flags before
// anything loads.
func TestServeLoRAFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--model", "x", "--lora-modules", "sql"}, "name=path"},
		{[]string{"serve", "--model", "x", "--max-loras", "0"}, "--max-loras"},
		{[]string{"serve", "--model", "x", "--lora-merge", "--lora-modules", "a=x", "b=y"}, "merges one adapter"},
	} {
		code, _, stderr := run(t, "", c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, %s", c.args, code, stderr)
		}
	}
}

// TestGenerateLoRA runs generate with testdata/lora's adapter b, unmerged
// and merged: the golden greedy tokens. A make-random --lora-for adapter
// changes the base's tokens, and bench --lora reports its fields.
func TestGenerateLoRA(t *testing.T) {
	data, err := os.ReadFile("../../testdata/lora/lora-small-b/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Prompt []int `json:"prompt"`
			Greedy []int `json:"greedy_tokens"`
		} `json:"cases"`
	}
	json.Unmarshal(data, &g)
	c := g.Cases[0]
	ids := func(v []int) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, ",")
	}
	want := ids(c.Greedy[:8])
	for _, extra := range [][]string{{"--lora", "../../testdata/lora/lora-small-b"}, {"--lora", "../../testdata/lora/lora-small-b:1", "--lora-merge"}} {
		args := append([]string{"generate", "--model", "../../testdata/models/small", "--ids", ids(c.Prompt), "-n", "8"}, extra...)
		code, out, stderr := run(t, "", args...)
		if code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("%v: exit %d, %q (%s), want %s", extra, code, out, stderr, want)
		}
	}
	dir := filepath.Join(t.TempDir(), "r16")
	if code, _, stderr := run(t, "", "make-random", "--lora-for", "../../testdata/models/small", "--rank", "16", "--out", dir); code != 0 {
		t.Fatalf("make-random --lora-for: %s", stderr)
	}
	_, base, _ := run(t, "", "generate", "--model", "../../testdata/models/small", "--ids", "1,2,3", "-n", "6")
	code, adapted, stderr := run(t, "", "generate", "--model", "../../testdata/models/small", "--ids", "1,2,3", "-n", "6", "--lora", dir)
	if code != 0 || adapted == base {
		t.Errorf("the random adapter: exit %d, %q against the base's %q (%s)", code, adapted, base, stderr)
	}
	code, out, stderr := run(t, "", "bench", "--model", "../../testdata/models/small", "--lora", dir, "--prompt", "64", "--gen", "4", "--repeat", "1", "--batch", "4", "--json")
	if code != 0 {
		t.Fatalf("bench --lora: %s", stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --lora: %v: %s", err, out)
	}
	for _, k := range []string{"rank", "modules", "load_seconds", "prefill_ratio", "decode_ratio", "batch_many_ratio", "decode_tok_s_merged", "merged_ratio"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Errorf("bench --lora: %s = %v", k, res[k])
		}
	}
	if res["rank"] != 16.0 || res["batch_seqs"] != 4.0 || res["batch_adapters"] != 4.0 {
		t.Errorf("bench --lora: %s", out)
	}
}
