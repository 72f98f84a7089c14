package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/safetensors"
	"github.com/govinfer/govinfer/sample"
)

// result is everything a request returns that must not change with the
// prefix cache: tokens with their logprobs and alternatives, the prompt's
// logits, the finish.
type result struct {
	toks   []Token
	logits []float32
	finish FinishReason
	cached int
}

func run1(t *testing.T, e *Engine, req Request) result {
	t.Helper()
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return collectResult(t, s)
}

func collectResult(t *testing.T, s *Stream) result {
	t.Helper()
	var res result
	for {
		out, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res.toks = append(res.toks, out.Tokens...)
		if out.PromptLogits != nil {
			res.logits = out.PromptLogits
		}
		if out.Finish != FinishNone {
			if out.Err != nil {
				t.Fatalf("request failed: %v", out.Err)
			}
			res.finish = out.Finish
			res.cached = s.CachedTokens()
			return res
		}
	}
}

// sameResult fails unless a and b are identical bit for bit.
func sameResult(t *testing.T, what string, got, want result) {
	t.Helper()
	if got.finish != want.finish || len(got.toks) != len(want.toks) {
		t.Fatalf("%s: %d tokens (%v), want %d (%v)", what, len(got.toks), got.finish, len(want.toks), want.finish)
	}
	for i, g := range got.toks {
		w := want.toks[i]
		if g.ID != w.ID || math.Float64bits(g.Logprob) != math.Float64bits(w.Logprob) || !slices.Equal(g.Top, w.Top) {
			t.Fatalf("%s: token %d is %+v, want %+v", what, i, g, w)
		}
	}
	if len(got.logits) != len(want.logits) {
		t.Fatalf("%s: %d prompt logits, want %d", what, len(got.logits), len(want.logits))
	}
	for i := range got.logits {
		if math.Float32bits(got.logits[i]) != math.Float32bits(want.logits[i]) {
			t.Fatalf("%s: prompt logit %d is %v, want %v", what, i, got.logits[i], want.logits[i])
		}
	}
}

// TestPrefixCacheConversations replays random multi-turn conversations
// through an engine with the prefix cache, each turn's prompt being the
// previous prompt (cut where a chat template would differ), the previous
// answer and new tokens, and checks every turn against the same request on
// a cold engine: tokens, logprobs, top alternatives and prompt logits bit
// for bit, with greedy and seeded sampling. Hits must cover every kept
// point the turn could use.
func TestPrefixCacheConversations(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) { checkConversations(t, openModel(t, name), 3, 4) })
	}
}

// checkConversations runs convs random conversations of turns turns on m
// (see TestPrefixCacheConversations).
func checkConversations(t *testing.T, m *model.Model, convs, turns int) {
	cold := newEngine(t, m, Config{})
	warm := newEngine(t, m, Config{PrefixCache: true, StateMemory: 64 << 20})
	r := rand.New(rand.NewPCG(9, 10))
	vocab := m.Config().VocabSize
	type kept struct {
		prompt []int
		points []int
	}
	var seen []kept
	// expect returns where a prompt should resume: the furthest
	// point an earlier request kept on a prefix of it.
	expect := func(prompt []int) int {
		best := 0
		for _, k := range seen {
			for _, p := range k.points {
				if p > best && p <= maxResume(len(prompt)) && slices.Equal(k.prompt[:p], prompt[:p]) {
					best = p
				}
			}
		}
		return best
	}
	for conv := range convs {
		var prompt, hints []int
		for turn := range turns {
			// The previous prompt minus a few trailing tokens (the
			// generation prompt a template renders differently),
			// then the answer, then a new message.
			hints = append(hints, len(prompt)) // a user message starts here
			prompt = append(prompt, randomPrompt(r, 20+r.IntN(90), vocab)...)
			req := Request{Prompt: slices.Clone(prompt), MaxTokens: 5 + r.IntN(20), IgnoreEOS: true,
				Logprobs: true, TopLogprobs: 3, PromptLogits: true, CacheHints: slices.Clone(hints)}
			if conv == 1 {
				req.Params = sample.Params{Temperature: 0.9, TopP: 0.95, Seed: uint64(turn)}
			}
			what := fmt.Sprintf("conversation %d turn %d (%d tokens)", conv, turn, len(prompt))
			want := run1(t, cold, req)
			wantHit := expect(prompt)
			got := run1(t, warm, req)
			sameResult(t, what, got, want)
			if got.cached != wantHit {
				t.Errorf("%s: resumed at %d, want %d", what, got.cached, wantHit)
			}
			seen = append(seen, kept{slices.Clone(prompt), keepPoints(len(prompt), hints, 0)})
			// The same request again resumes before its last token.
			again := run1(t, warm, req)
			sameResult(t, what+" repeated", again, want)
			if again.cached != maxResume(len(prompt)) {
				t.Errorf("%s repeated: resumed at %d, want %d", what, again.cached, maxResume(len(prompt)))
			}
			prompt = prompt[:len(prompt)-r.IntN(3)]
			hints = append(hints, len(prompt)) // the answer starts here
			for _, tok := range got.toks {
				prompt = append(prompt, tok.ID)
			}
		}
	}
	st := warm.Stats()
	if st.PrefixHitTokens == 0 || st.PrefixHitTokens >= st.PrefixQueryTokens {
		t.Errorf("prefix hits %d of %d tokens", st.PrefixHitTokens, st.PrefixQueryTokens)
	}
	if st.State.Running != 0 || st.State.Cached == 0 || st.State.Peak > st.State.Budget {
		t.Errorf("state after the conversations: %+v", st.State)
	}
}

// TestPrefixCacheSiblings submits the choices of one prompt (and another
// prompt sharing its first blocks) at once: the first computes the prompt,
// the others wait for it and resume before its last token, and all of them
// match a cold run bit for bit.
func TestPrefixCacheSiblings(t *testing.T) {
	m := openModel(t, "small")
	cold := newEngine(t, m, Config{})
	warm := newEngine(t, m, Config{PrefixCache: true, StateMemory: 64 << 20})
	r := rand.New(rand.NewPCG(11, 12))
	prompt := randomPrompt(r, 300, m.Config().VocabSize)
	other := append(slices.Clone(prompt[:200]), randomPrompt(r, 40, m.Config().VocabSize)...)
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Logprobs: true,
			Params: sample.Params{Temperature: 1, Seed: uint64(i)}, CacheHints: []int{200}})
	}
	reqs = append(reqs, Request{Prompt: other, MaxTokens: 6, IgnoreEOS: true, CacheHints: []int{200}})
	streams := make([]*Stream, len(reqs))
	for i, req := range reqs {
		var err error
		if streams[i], err = warm.Submit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	results := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { results[i] = collectResult(t, s) })
	}
	wg.Wait()
	for i, req := range reqs {
		sameResult(t, fmt.Sprintf("request %d", i), results[i], run1(t, cold, req))
	}
	if results[0].cached != 0 {
		t.Errorf("first choice resumed at %d on an empty cache", results[0].cached)
	}
	for i := 1; i < 4; i++ {
		if results[i].cached != maxResume(len(prompt)) {
			t.Errorf("choice %d resumed at %d, want %d", i, results[i].cached, maxResume(len(prompt)))
		}
	}
	if results[4].cached != 192 {
		t.Errorf("the other prompt resumed at %d, want 192", results[4].cached)
	}
	if st := warm.Stats(); st.PromptTokens != 300+3*(300-256)+(240-192) || st.PrefixHitTokens != 3*256+192 {
		t.Errorf("%d prompt tokens prefilled, %d resumed; want %d and %d", st.PromptTokens, st.PrefixHitTokens, 300+3*(300-256)+(240-192), 3*256+192)
	}
}

// observer records the prefix cache's events.
// observer records the memory tier's spans (those of the tier it is
// told, TierHost when zero: the CPU backend's), and counts the bytes of
// each tier.
type observer struct {
	mu             sync.Mutex
	tier           Tier
	stored, evicts []PrefixSpan
	bytes          int64
	tiers          map[Tier]int64
}

func (o *observer) memory(sp PrefixSpan) bool {
	if o.tiers == nil {
		o.tiers = map[Tier]int64{}
	}
	return sp.Tier == cmp.Or(o.tier, TierHost)
}

func (o *observer) PrefixStored(sp PrefixSpan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.memory(sp) {
		o.stored = append(o.stored, sp)
		o.bytes += sp.Bytes
	}
	o.tiers[sp.Tier] += sp.Bytes
}

func (o *observer) PrefixRemoved(sp PrefixSpan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.memory(sp) {
		o.evicts = append(o.evicts, sp)
		o.bytes -= sp.Bytes
	}
	o.tiers[sp.Tier] -= sp.Bytes
}

// TestStateBudget runs many requests with long prompts under a budget that
// holds a few of them: they all finish intact (as on a cold engine without
// a budget), the budget is never exceeded, cached prefixes are evicted to
// make room, and everything is released afterwards. A request that could
// never fit is refused at once.
func TestStateBudget(t *testing.T) {
	m := openModel(t, "small")
	cold := newEngine(t, m, Config{})
	const maxTokens = 8
	perSeq := m.SequenceBytes(400 + maxTokens - 1)
	obs := &observer{}
	limit := 3*perSeq + perSeq/2
	warm := newEngine(t, m, Config{PrefixCache: true, StateMemory: limit, MaxNumSeqs: 16, PrefixObserver: obs})
	r := rand.New(rand.NewPCG(13, 14))
	var reqs []Request
	shared := randomPrompt(r, 150, m.Config().VocabSize)
	for i := range 12 {
		p := randomPrompt(r, 300+r.IntN(101), m.Config().VocabSize)
		if i%3 == 0 {
			copy(p, shared)
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: maxTokens, IgnoreEOS: true, CacheHints: []int{150}})
	}
	streams := make([]*Stream, len(reqs))
	for i, req := range reqs {
		var err error
		if streams[i], err = warm.Submit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range streams {
		sameResult(t, fmt.Sprintf("request %d", i), collectResult(t, s), run1(t, cold, reqs[i]))
	}
	st := warm.StateUsage()
	if st.Peak > limit || st.Peak < 2*perSeq {
		t.Errorf("peak state %d with a budget of %d (a sequence takes %d)", st.Peak, limit, perSeq)
	}
	if st.Running != 0 || st.Cached > limit {
		t.Errorf("after the requests: %+v", st)
	}
	obs.mu.Lock()
	if len(obs.evicts) == 0 || obs.bytes != st.Cached {
		t.Errorf("observer: %d stores, %d evictions, %d bytes; the cache holds %d", len(obs.stored), len(obs.evicts), obs.bytes, st.Cached)
	}
	obs.mu.Unlock()

	huge := Request{Prompt: []int{1, 2, 3}, MaxTokens: int(limit / m.KVBytesPerToken())}
	var be *StateBudgetError
	if _, err := warm.Submit(context.Background(), huge); !errors.As(err, &be) {
		t.Errorf("a request larger than the budget: %v", err)
	}
}

// TestPrefixCacheEviction checks least-recently-used eviction: with room
// for the state of about two prompts, a prompt used again keeps its state
// while the older one is evicted.
func TestPrefixCacheEviction(t *testing.T) {
	m := openModel(t, "tiny")
	seq := m.SequenceBytes(200)
	point := m.RecurrentBytes() + 128*m.KVBytesPerToken()
	e := newEngine(t, m, Config{PrefixCache: true, StateMemory: seq + 2*point + point/2, MaxNumSeqs: 1})
	r := rand.New(rand.NewPCG(15, 16))
	v := m.Config().VocabSize
	a, b, c := randomPrompt(r, 150, v), randomPrompt(r, 150, v), randomPrompt(r, 150, v)
	run := func(p []int) int { return run1(t, e, Request{Prompt: p, MaxTokens: 2, IgnoreEOS: true}).cached }
	run(a)
	run(b)
	if got := run(a); got != 128 {
		t.Fatalf("a again resumed at %d, want 128", got)
	}
	run(c) // evicts b, the least recently used
	if got := run(a); got != 128 {
		t.Errorf("a after c resumed at %d, want 128", got)
	}
	if got := run(b); got != 0 {
		t.Errorf("b after c resumed at %d, want 0 (evicted)", got)
	}
}

func TestKeepPoints(t *testing.T) {
	for _, c := range []struct {
		n, hit int
		hints  []int
		want   []int
	}{
		{n: 65, want: []int{64}},
		{n: 64, want: nil},
		{n: 300, hints: []int{10, 70, 200, 1000}, want: []int{64, 192, 256}},
		{n: 300, hit: 192, hints: []int{10, 70, 200}, want: []int{256}},
	} {
		if got := keepPoints(c.n, c.hints, c.hit); !slices.Equal(got, c.want) {
			t.Errorf("keepPoints(%d, %v, %d) = %v, want %v", c.n, c.hints, c.hit, got, c.want)
		}
	}
}

func TestBlockHashes(t *testing.T) {
	a := make([]int, 200)
	b := make([]int, 200)
	b[100] = 1
	ha, hb := BlockHashes(a), BlockHashes(b)
	if len(ha) != 3 || ha[0] != hb[0] || ha[1] == hb[1] || ha[2] == hb[2] || ha[0] == ha[1] {
		t.Errorf("hashes %x and %x", ha, hb)
	}
}

// The engine refuses a prefix cache that could not cut prefill at its
// blocks.
func TestPrefixCacheConfig(t *testing.T) {
	m := openModel(t, "tiny")
	if _, err := New(m, Config{PrefixCache: true, ChunkTokens: 48}); err == nil {
		t.Error("chunk of 48 tokens accepted with the prefix cache")
	}
	if _, err := New(m, Config{MaxNumSeqs: 250}); err == nil {
		t.Error("250 sequences accepted in passes of 256 tokens")
	}
}

// TestPrefixCacheGoldens runs each golden prompt twice on an engine with
// the prefix cache: the second run resumes before the prompt's last token
// (at 64, 128 and 256 for the prompts of 65, 130 and 300 tokens), its
// prompt logits are those of a cold engine bit for bit, and both are within
// the golden tolerance of the float64 reference.
func TestPrefixCacheGoldens(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			m := openModel(t, name)
			dir := filepath.Join("..", "testdata", "models", name)
			data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g struct {
				Cases []struct {
					Name       string `json:"name"`
					Prompt     []int  `json:"prompt"`
					LastLogits struct {
						Tensor string `json:"tensor"`
					} `json:"last_logits"`
				} `json:"cases"`
				Tolerances struct {
					LogitsRelMax float64 `json:"logits_rel_max"`
				} `json:"recommended_tolerances"`
			}
			if err := json.Unmarshal(data, &g); err != nil {
				t.Fatal(err)
			}
			tensors, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer tensors.Close()
			cold := newEngine(t, m, Config{})
			warm := newEngine(t, m, Config{PrefixCache: true, StateMemory: 64 << 20})
			for _, c := range g.Cases {
				req := Request{Prompt: c.Prompt, MaxTokens: 3, IgnoreEOS: true, PromptLogits: true, Logprobs: true}
				want := run1(t, cold, req)
				run1(t, warm, req)
				got := run1(t, warm, req)
				sameResult(t, c.Name, got, want)
				if got.cached != maxResume(len(c.Prompt)) {
					t.Errorf("%s: resumed at %d, want %d", c.Name, got.cached, maxResume(len(c.Prompt)))
				}
				ten, ok := tensors.Tensor(c.LastLogits.Tensor)
				if !ok {
					t.Fatalf("golden tensor %s missing", c.LastLogits.Tensor)
				}
				golden, err := ten.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				var maxDiff, maxRef float64
				for i, v := range golden {
					maxDiff = max(maxDiff, math.Abs(float64(got.logits[i])-float64(v)))
					maxRef = max(maxRef, math.Abs(float64(v)))
				}
				if maxDiff > g.Tolerances.LogitsRelMax*maxRef {
					t.Errorf("%s: resumed prompt logits differ from the golden by %.3g of its largest", c.Name, maxDiff/maxRef)
				}
			}
		})
	}
}
