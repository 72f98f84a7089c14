package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/model"
)

// loraCase is the longest case of a testdata/lora adapter's goldens: its
// prompt, and the adapted and the base model's greedy tokens.
type loraCase struct {
	Prompt []int `json:"prompt"`
	Greedy []int `json:"greedy_tokens"`
	Base   []int `json:"base_model_greedy_tokens"`
}

func loadLoRACase(t *testing.T, name string) loraCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "lora", name, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []loraCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	var best loraCase
	for _, c := range g.Cases {
		if len(c.Prompt) > len(best.Prompt) {
			best = c
		}
	}
	return best
}

// attachLoRA attaches testdata/lora's adapter name to m until the test
// ends, as a request's LoRA with its id.
func attachLoRA(t *testing.T, m *model.Model, name string, id int) LoRA {
	t.Helper()
	ad, err := lora.Load(filepath.Join("..", "testdata", "lora", name))
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.AttachAdapter(name, ad)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	var digest [32]byte
	copy(digest[:], name)
	return LoRA{Adapter: a, Scale: 1, Digest: digest, Name: name, ID: id}
}

// TestLoRARequests runs requests with testdata/lora's adapters through an
// engine with the prefix cache: each gets its adapter's golden greedy
// tokens, never resumes from state computed with other adapters (or
// another scale), resumes from its own, and gets the same tokens, bit for
// bit, alone and in a batch mixing adapters. Stored spans name their
// adapters, and LoRAStats counts the running ones.
func TestLoRARequests(t *testing.T) {
	m := openModel(t, "small")
	a := attachLoRA(t, m, "lora-small-a", 1)
	b := attachLoRA(t, m, "lora-small-b", 2)
	ca, cb := loadLoRACase(t, "lora-small-a"), loadLoRACase(t, "lora-small-b")
	obs := &observer{}
	e := newEngine(t, m, Config{PrefixCache: true, PrefixObserver: obs})
	cold := newEngine(t, m, Config{})
	prompt := ca.Prompt
	req := func(uses ...LoRA) Request {
		return Request{Prompt: prompt, MaxTokens: len(ca.Greedy), IgnoreEOS: true, Logprobs: true, LoRA: uses}
	}
	goldB := run1(t, cold, Request{Prompt: cb.Prompt, MaxTokens: len(cb.Greedy), IgnoreEOS: true, LoRA: []LoRA{b}})
	if got := ids(goldB.toks); !slices.Equal(got, cb.Greedy) {
		t.Fatalf("adapter b tokens %v, golden %v", got, cb.Greedy)
	}
	half := a
	half.Scale = 0.5

	base := run1(t, e, req())
	if got := ids(base.toks); !slices.Equal(got, ca.Base) {
		t.Fatalf("base tokens %v, golden %v", got, ca.Base)
	}
	runA := run1(t, e, req(a))
	if runA.cached != 0 {
		t.Fatalf("adapter a resumed %d tokens of the base model's state", runA.cached)
	}
	if got := ids(runA.toks); !slices.Equal(got, ca.Greedy) {
		t.Fatalf("adapter a tokens %v, golden %v", got, ca.Greedy)
	}
	again := run1(t, e, req(a))
	if again.cached == 0 {
		t.Fatal("adapter a did not resume from its own cached state")
	}
	sameResult(t, "adapter a from the cache", again, runA)
	if r := run1(t, e, req(half)); r.cached != 0 {
		t.Fatalf("adapter a at scale 0.5 resumed %d tokens of scale 1's state", r.cached)
	}
	runB := run1(t, e, req(b))
	if runB.cached != 0 {
		t.Fatalf("adapter b resumed %d tokens of another adapter's state", runB.cached)
	}
	coldB := run1(t, cold, req(b))
	coldB.cached = runB.cached
	sameResult(t, "adapter b", runB, coldB)
	if slices.Equal(ids(runB.toks), ids(runA.toks)) || slices.Equal(ids(runB.toks), ids(base.toks)) {
		t.Fatalf("adapter b's tokens %v are adapter a's or the base model's", ids(runB.toks))
	}

	obs.mu.Lock()
	names := map[string]bool{}
	for _, sp := range obs.stored {
		if len(sp.BlockHashes) > 0 {
			names[LoRAName(sp.LoRA)] = true
		}
	}
	obs.mu.Unlock()
	for _, want := range []string{"", "lora-small-a", "lora-small-a*0.5", "lora-small-b"} {
		if !names[want] {
			t.Errorf("no stored span named %q; got %v", want, names)
		}
	}

	// One batch mixing adapters, on a cold engine: each request gets what
	// it got alone.
	reqs := []Request{req(a), req(), req(b), req(a, b), req(b)}
	want := []result{runA, base, runB, run1(t, cold, req(a, b)), runB}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		s, err := cold.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	var wg sync.WaitGroup
	got := make([]result, len(reqs))
	var sawRunning sync.Once
	running := false
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st := cold.LoRAStats(); len(st.Running)+len(st.Waiting) > 0 {
				sawRunning.Do(func() { running = true })
			}
			got[i] = collectResult(t, s)
		}()
	}
	wg.Wait()
	for i := range got {
		got[i].cached = want[i].cached
		sameResult(t, "mixed batch request "+string(rune('0'+i)), got[i], want[i])
	}
	if !running {
		t.Error("LoRAStats never showed the adapters of the batch")
	}
	if st := cold.LoRAStats(); len(st.Running)+len(st.Waiting) != 0 {
		t.Errorf("LoRAStats %+v after every request ended", st)
	}
}

// TestLoRAClosedAdapter checks that a request whose adapter was closed
// before it started fails with an error, and one running when it closes
// finishes.
func TestLoRAClosedAdapter(t *testing.T) {
	m := openModel(t, "small")
	a := attachLoRA(t, m, "lora-small-b", 1)
	e := newEngine(t, m, Config{})
	prompt := loadLoRACase(t, "lora-small-b").Prompt
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true, LoRA: []LoRA{a}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		out, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Tokens) > 0 || out.Finish != FinishNone {
			break
		}
	}
	if a.Adapter.Close() {
		t.Fatal("the adapter's memory was released under a running request")
	}
	_, out, err := collect(context.Background(), s)
	if err != nil || out.Finish != FinishLength || out.Err != nil {
		t.Fatalf("the running request ended with %v, %v, %v", out.Finish, out.Err, err)
	}
	s, err = e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, LoRA: []LoRA{a}})
	if err != nil {
		t.Fatal(err)
	}
	if _, out, _ := collect(context.Background(), s); out.Finish != FinishError || out.Err == nil {
		t.Fatalf("a request with a closed adapter ended with %v, %v", out.Finish, out.Err)
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, LoRA: []LoRA{{Name: "x", Scale: 1}}}); err == nil {
		t.Fatal("a request with a nil adapter was accepted")
	}
}

func TestLoRASetKey(t *testing.T) {
	var d1, d2 [32]byte
	d2[0] = 1
	sets := map[loraSet]string{}
	for name, uses := range map[string][]LoRA{
		"base":       nil,
		"a":          {{Digest: d1, Scale: 1}},
		"a half":     {{Digest: d1, Scale: 0.5}},
		"b":          {{Digest: d2, Scale: 1}},
		"a b":        {{Digest: d1, Scale: 1}, {Digest: d2, Scale: 1}},
		"b a":        {{Digest: d2, Scale: 1}, {Digest: d1, Scale: 1}},
		"a, b at 0":  {{Digest: d1, Scale: 1}, {Digest: d2, Scale: 0}},
		"only b at0": {{Digest: d2, Scale: 0}},
	} {
		set := loraSetOf(uses)
		if other, dup := sets[set]; dup && !(name == "a, b at 0" && other == "a" || name == "a" && other == "a, b at 0" ||
			name == "only b at0" && other == "base" || name == "base" && other == "only b at0") {
			t.Errorf("%s and %s have the same key", name, other)
		}
		sets[set] = name
	}
	if loraSetOf(nil).seed() != 0 || !slices.Equal(blockHashesFrom(0, make([]int, 128)), BlockHashes(make([]int, 128))) {
		t.Error("the base model's hashes changed")
	}
	if loraSetOf([]LoRA{{Digest: d1, Scale: 1}}).seed() == 0 {
		t.Error("an adapter set seeds with 0")
	}
}
