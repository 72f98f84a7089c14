package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/lora"
)

// loraFixture is testdata/lora's adapter name: its directory and the
// longest golden case (prompt ids and the adapted model's greedy tokens).
type loraFixture struct {
	dir    string
	prompt []int
	greedy []int
	base   []int
}

func loadLoRAFixture(t *testing.T, name string) loraFixture {
	t.Helper()
	dir := filepath.Join("..", "testdata", "lora", name)
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Prompt []int `json:"prompt"`
			Greedy []int `json:"greedy_tokens"`
			Base   []int `json:"base_model_greedy_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	f := loraFixture{dir: dir}
	for _, c := range g.Cases {
		if len(c.Prompt) > len(f.prompt) {
			f.prompt, f.greedy, f.base = c.Prompt, c.Greedy, c.Base
		}
	}
	return f
}

// greedyIDs runs a greedy completion of prompt ids with p's adapters.
func greedyIDs(t *testing.T, m *llm.Model, prompt []int, n int, uses ...llm.LoRAUse) []int {
	t.Helper()
	ids, err := tryGreedyIDs(m, prompt, n, uses...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func tryGreedyIDs(m *llm.Model, prompt []int, n int, uses ...llm.LoRAUse) ([]int, error) {
	st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: prompt}},
		Params: llm.Params{MaxTokens: n, Temperature: llm.F64(0), IgnoreEOS: true, LoRA: uses}})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var ids []int
	for ev := range st.Events() {
		for _, tk := range ev.Tokens {
			ids = append(ids, tk.ID)
		}
		if ev.Kind == llm.KindFinish && ev.Err != nil {
			return ids, ev.Err
		}
	}
	return ids, nil
}

// copyAdapter copies an adapter directory into a temporary one, for
// tests that break its files.
func copyAdapter(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, f := range []string{lora.ConfigFile, lora.WeightsFile} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestLoRA opens the small model with one adapter, loads a second at run
// time, and checks each request's greedy tokens against the adapter's
// goldens, the listing, the bounds and every error path: the model and the
// other adapters keep working after each.
func TestLoRA(t *testing.T) {
	fa, fb := loadLoRAFixture(t, "lora-small-a"), loadLoRAFixture(t, "lora-small-b")
	m, err := llm.Open(smallDir, llm.Options{LoRA: []llm.LoRAAdapter{{Path: fa.dir}}, MaxLoRAs: 2, MaxLoRARank: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a := llm.LoRAUse{Name: "lora-small-a"}
	if got := greedyIDs(t, m, fa.prompt, len(fa.greedy), a); !slices.Equal(got, fa.greedy) {
		t.Fatalf("adapter a: %v, golden %v", got, fa.greedy)
	}
	if got := greedyIDs(t, m, fa.prompt, len(fa.base)); !slices.Equal(got, fa.base) {
		t.Fatalf("base: %v, golden %v", got, fa.base)
	}
	info, err := m.LoadLoRA(context.Background(), "b", fb.dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != 1 || info.Rank != 4 || info.Parent != m.Name() || info.Bytes <= 0 || info.Modules == 0 {
		t.Fatalf("LoadLoRA: %+v", info)
	}
	b := llm.LoRAUse{Name: "b"}
	if got := greedyIDs(t, m, fb.prompt, len(fb.greedy), b); !slices.Equal(got, fb.greedy) {
		t.Fatalf("adapter b: %v, golden %v", got, fb.greedy)
	}
	list := m.LoRAs()
	if len(list) != 2 || list[0].Name != "lora-small-a" || list[0].ID != 0 || list[0].Rank != 8 || list[1].Name != "b" {
		t.Fatalf("LoRAs: %+v", list)
	}
	// Scale 0 is the base model; both adapters at once differ from each.
	zero := llm.LoRAUse{Name: "b", Scale: llm.F64(0)}
	if got := greedyIDs(t, m, fa.prompt, len(fa.base), zero); !slices.Equal(got, fa.base) {
		t.Fatalf("adapter b at scale 0: %v, want the base model's %v", got, fa.base)
	}

	// Errors, each leaving the model and its adapters as they were.
	check := func(what string, err error, want string) {
		t.Helper()
		var le *llm.LoRAError
		if err == nil || !errors.As(err, &le) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want a *LoRAError containing %q", what, err, want)
		}
	}
	_, err = tryGreedyIDs(m, fa.prompt, 2, llm.LoRAUse{Name: "nope"})
	if !errors.Is(err, llm.ErrUnknownLoRA) {
		t.Errorf("unknown adapter: %v", err)
	}
	_, err = m.LoadLoRA(context.Background(), "c", fb.dir)
	check("a third adapter", err, "max_loras")
	_, err = m.LoadLoRA(context.Background(), "b", fb.dir)
	check("a taken name", err, "already loaded")
	if err := m.UnloadLoRA("b"); err != nil {
		t.Fatal(err)
	}
	_, err = tryGreedyIDs(m, fb.prompt, 2, b)
	if !errors.Is(err, llm.ErrUnknownLoRA) {
		t.Errorf("an unloaded adapter: %v", err)
	}
	if err := m.UnloadLoRA("b"); !errors.Is(err, llm.ErrUnknownLoRA) {
		t.Errorf("unloading twice: %v", err)
	}

	missing := copyAdapter(t, fb.dir)
	os.Remove(filepath.Join(missing, lora.WeightsFile))
	_, err = m.LoadLoRA(context.Background(), "missing", missing)
	check("a missing weights file", err, lora.WeightsFile)
	_, err = m.LoadLoRA(context.Background(), "nodir", filepath.Join(t.TempDir(), "absent"))
	check("a missing directory", err, "absent")

	truncated := copyAdapter(t, fb.dir)
	wp := filepath.Join(truncated, lora.WeightsFile)
	data, _ := os.ReadFile(wp)
	os.WriteFile(wp, data[:len(data)/2], 0o644)
	_, err = m.LoadLoRA(context.Background(), "truncated", truncated)
	check("a truncated weights file", err, "truncated")

	peft := copyAdapter(t, fb.dir)
	cp := filepath.Join(peft, lora.ConfigFile)
	data, _ = os.ReadFile(cp)
	os.WriteFile(cp, []byte(strings.Replace(string(data), `"LORA"`, `"IA3"`, 1)), 0o644)
	_, err = m.LoadLoRA(context.Background(), "ia3", peft)
	check("an unknown peft_type", err, "IA3")

	other := openModel(t) // another base: the random test checkpoint
	_, err = other.LoadLoRA(context.Background(), "a", fa.dir)
	check("an adapter for another base", err, "another base")
	if len(other.LoRAs()) != 0 {
		t.Errorf("a failed load left %+v", other.LoRAs())
	}

	if got := greedyIDs(t, m, fa.prompt, len(fa.greedy), a); !slices.Equal(got, fa.greedy) {
		t.Fatalf("adapter a after the errors: %v, golden %v", got, fa.greedy)
	}
	if got := m.LoRAs(); len(got) != 1 {
		t.Fatalf("LoRAs after the errors: %+v", got)
	}
	if _, err := m.LoadLoRA(context.Background(), "b2", fb.dir); err != nil {
		t.Fatalf("loading after the errors: %v", err)
	}
	if got := greedyIDs(t, m, fb.prompt, len(fb.greedy), llm.LoRAUse{Name: "b2"}); !slices.Equal(got, fb.greedy) {
		t.Fatalf("adapter b2: %v, golden %v", got, fb.greedy)
	}
}

// TestLoRAOpenErrors checks the bounds and bad options at Open.
func TestLoRAOpenErrors(t *testing.T) {
	fa := loadLoRAFixture(t, "lora-small-a")
	for _, c := range []struct {
		name string
		o    llm.Options
		want string
	}{
		{"rank", llm.Options{LoRA: []llm.LoRAAdapter{{Path: fa.dir}}, MaxLoRARank: 4}, "max_lora_rank"},
		{"count", llm.Options{LoRA: []llm.LoRAAdapter{{Name: "x", Path: fa.dir}, {Name: "y", Path: fa.dir}}, MaxLoRAs: 1}, "max_loras"},
		{"names", llm.Options{LoRA: []llm.LoRAAdapter{{Name: "x", Path: fa.dir}, {Name: "x", Path: fa.dir}}}, "two LoRA adapters"},
		{"merge alone", llm.Options{LoRAMerge: true}, "without an adapter"},
		{"merged rank", llm.Options{LoRA: []llm.LoRAAdapter{{Path: fa.dir}}, LoRAMerge: true, MaxLoRARank: 4}, "max_lora_rank"},
	} {
		m, err := llm.Open(smallDir, c.o)
		if err == nil {
			m.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestLoRAMerged opens the small model with an adapter merged: every
// request gets the adapted model's golden tokens, the adapter is listed as
// merged, and adapters cannot be loaded or unloaded.
func TestLoRAMerged(t *testing.T) {
	fb := loadLoRAFixture(t, "lora-small-b")
	m, err := llm.Open(smallDir, llm.Options{LoRA: []llm.LoRAAdapter{{Name: "b", Path: fb.dir}}, LoRAMerge: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, uses := range [][]llm.LoRAUse{nil, {{Name: "b"}}} {
		if got := greedyIDs(t, m, fb.prompt, len(fb.greedy), uses...); !slices.Equal(got, fb.greedy) {
			t.Fatalf("merged, %v: %v, golden %v", uses, got, fb.greedy)
		}
	}
	if l := m.LoRAs(); len(l) != 1 || !l[0].Merged || l[0].Name != "b" {
		t.Fatalf("LoRAs: %+v", l)
	}
	if _, err := tryGreedyIDs(m, fb.prompt, 2, llm.LoRAUse{Name: "b", Scale: llm.F64(0.5)}); err == nil {
		t.Error("a merged adapter ran at another scale")
	}
	if _, err := m.LoadLoRA(context.Background(), "a", fb.dir); err == nil || !strings.Contains(err.Error(), "merged") {
		t.Errorf("LoadLoRA on a merged model: %v", err)
	}
	if err := m.UnloadLoRA("b"); err == nil {
		t.Error("a merged adapter was unloaded")
	}
}
