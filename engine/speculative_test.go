package engine

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/sample"
)

var (
	mtpOnce   sync.Once
	mtpModels = map[string]*model.Model{}
	mtpErr    error
)

// openMTPModel returns a test checkpoint with its MTP head loaded (tiny,
// vl-tiny and the mixture of experts moe-tiny carry mtp.* tensors), loaded
// once per test binary.
func openMTPModel(tb testing.TB, name string) *model.Model {
	tb.Helper()
	mtpOnce.Do(func() {
		for _, n := range []string{"tiny", "vl-tiny", "moe-tiny"} {
			m, err := model.Open("../testdata/models/"+n, model.Options{Backend: testBackend, MTP: true})
			if err != nil {
				mtpErr = err
				return
			}
			mtpModels[n] = m
		}
	})
	if mtpErr != nil {
		tb.Fatal(mtpErr)
	}
	return mtpModels[name]
}

// specGolden is vl-tiny's golden.json mtp.speculative.
type specGolden struct {
	Prompt      []int `json:"prompt"`
	Steps       int   `json:"steps"`
	PlainGreedy []int `json:"plain_greedy"`
	Runs        []struct {
		K        int   `json:"k"`
		Tokens   []int `json:"tokens"`
		Accepted int   `json:"accepted_drafts"`
		Drafted  int   `json:"drafted"`
		Rounds   int   `json:"rounds"`
	} `json:"runs"`
	Second struct {
		Prompt   []int `json:"prompt"`
		K        int   `json:"k"`
		Tokens   []int `json:"tokens"`
		Accepted int   `json:"accepted_drafts"`
		Trace    []any `json:"trace"`
	} `json:"second_prompt"`
}

func loadSpecGolden(t *testing.T) specGolden {
	t.Helper()
	raw, err := os.ReadFile("../testdata/models/vl-tiny/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		MTP struct {
			Speculative specGolden `json:"speculative"`
		} `json:"mtp"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.MTP.Speculative.Runs) != 4 {
		t.Fatalf("golden.json has %d speculative runs, want k = 1..4", len(g.MTP.Speculative.Runs))
	}
	return g.MTP.Speculative
}

// generate runs one request to its end.
func generate(t *testing.T, e *Engine, req Request) ([]int, Output, *Stream) {
	t.Helper()
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	toks, out, err := collect(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Finish == FinishError {
		t.Fatal(out.Err)
	}
	return ids(toks), out, s
}

// TestSpeculativeGoldens runs vl-tiny's golden prompts through the engine
// with MTP speculation, k = 1..4: the tokens are plain greedy's and the
// golden runs', and the draft and accepted counts the goldens' totals
// (every round, the last too, counted in full).
func TestSpeculativeGoldens(t *testing.T) {
	g := loadSpecGolden(t)
	m := openMTPModel(t, "vl-tiny")
	plain := newEngine(t, m, Config{})
	got, _, s := generate(t, plain, Request{Prompt: g.Prompt, MaxTokens: g.Steps})
	if !slices.Equal(got, g.PlainGreedy) {
		t.Fatalf("plain engine %v, golden %v", got, g.PlainGreedy)
	}
	if d, a := s.SpecTokens(); d != 0 || a != 0 {
		t.Errorf("plain engine counts %d drafts, %d accepted", d, a)
	}
	for _, run := range g.Runs {
		e := newEngine(t, m, Config{Speculative: Speculative{Method: "mtp", Tokens: run.K, NoBackoff: true}})
		got, out, s := generate(t, e, Request{Prompt: g.Prompt, MaxTokens: g.Steps, PromptLogits: true})
		if out.Finish != FinishLength || !slices.Equal(got, run.Tokens) || !slices.Equal(got, g.PlainGreedy) {
			t.Errorf("k=%d: %v (%v), golden %v", run.K, got, out.Finish, run.Tokens)
		}
		d, a := s.SpecTokens()
		if d != run.Drafted || a != run.Accepted || d != run.K*run.Rounds {
			t.Errorf("k=%d: %d drafts, %d accepted; golden %d, %d", run.K, d, a, run.Drafted, run.Accepted)
		}
		st := e.Stats()
		if st.SpecDraftTokens != uint64(d) || st.SpecAcceptedTokens != uint64(a) || st.OpenSequences != 0 {
			t.Errorf("k=%d: stats %d drafts, %d accepted, %d open sequences", run.K, st.SpecDraftTokens, st.SpecAcceptedTokens, st.OpenSequences)
		}
		t.Logf("k=%d: %d tokens in %d rounds, %d drafts, %d accepted", run.K, len(got), d/run.K, d, a)
	}
	sec := g.Second
	e := newEngine(t, m, Config{Speculative: Speculative{Method: "mtp", Tokens: sec.K, NoBackoff: true}})
	got, _, s = generate(t, e, Request{Prompt: sec.Prompt, MaxTokens: len(sec.Tokens)})
	d, a := s.SpecTokens()
	if !slices.Equal(got, sec.Tokens) || d != sec.K*len(sec.Trace) || a != sec.Accepted {
		t.Errorf("second prompt: %v, %d drafts, %d accepted; golden %v, %d, %d", got, d, a, sec.Tokens, sec.K*len(sec.Trace), sec.Accepted)
	}
}

// TestSpeculativeVerifyLogitsExact checks the verify step's rows against
// plain decoding's, bit for bit: the engine's verify input (decode kernels,
// every position's logits) over tokens plain greedy chose gives the
// logits plain decoding gave at each of them.
func TestSpeculativeVerifyLogitsExact(t *testing.T) {
	// 600 positions: the attention of one decode row splits its context
	// over the workers there.
	for _, c := range []struct {
		name   string
		prompt int
	}{{"tiny", 21}, {"vl-tiny", 21}, {"tiny", 600}} {
		name := c.name
		m := openMTPModel(t, name)
		ctx := context.Background()
		prompt := randomPrompt(rand.New(rand.NewPCG(3, 4)), c.prompt, m.Config().VocabSize)
		const steps = 16 // the verify steps below cover 5 + 4 + 2 + 5 rows
		v := m.Config().VocabSize
		// Plain: the prompt, then one decode row per step.
		seq, _ := m.NewSequence()
		out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: prompt}})
		if err != nil {
			t.Fatal(err)
		}
		toks := []int{argmax(out[0].Logits)}
		var rows [][]float32
		for len(rows) < steps {
			out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: toks[len(toks)-1:], Decode: true}})
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, out[0].Logits)
			toks = append(toks, argmax(out[0].Logits))
		}
		seq.Close()
		// Verify steps of 1 + k rows over the same tokens, k = 4, 3, 1,
		// with logits, then with the argmaxes a greedy request takes.
		for _, argmaxOnly := range []bool{false, true} {
			seq, _ = m.NewSequence()
			if _, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: prompt, Hidden: true}}); err != nil {
				t.Fatal(err)
			}
			i := 0
			// The last step feeds two committed tokens ahead of the last
			// (running.unfed, after a rollback).
			for _, c := range []struct{ unfed, k int }{{0, 4}, {0, 3}, {0, 1}, {2, 2}} {
				k := c.unfed + c.k
				in := verifyInput(seq, toks[i:i+c.unfed], toks[i+c.unfed], toks[i+c.unfed+1:i+1+k], argmaxOnly)
				out, err := m.Step(ctx, []model.Input{in})
				if err != nil {
					t.Fatal(err)
				}
				if argmaxOnly {
					if out[0].Logits != nil || len(out[0].Argmaxes) != k+1 {
						t.Fatalf("%s: argmax verify of k=%d: %d logits, %d argmaxes", name, k, len(out[0].Logits), len(out[0].Argmaxes))
					}
					for j, id := range out[0].Argmaxes {
						if id != toks[i+j+1] {
							t.Fatalf("%s: verify row %d of k=%d (token %d): argmax %d, plain decoding's %d", name, j, k, i+j, id, toks[i+j+1])
						}
					}
					i += k + 1
					continue
				}
				for j := range k + 1 {
					got, want := out[0].Logits[j*v:(j+1)*v], rows[i+j]
					for x := range got {
						if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
							t.Fatalf("%s: verify row %d of k=%d (token %d): logit %d is %v, plain decoding's %v", name, j, k, i+j, x, got[x], want[x])
						}
					}
				}
				i += k + 1
			}
			seq.Close()
		}
	}
}

func argmax(row []float32) int {
	best := 0
	for i, x := range row {
		if x > row[best] {
			best = i
		}
	}
	return best
}

// TestSpeculativeBatchedMatchesPlain runs speculating greedy requests
// alongside each other and alongside sampled ones, with prompts cut into
// chunks and resumed from the prefix cache, and checks every greedy
// request's tokens against a plain engine's, and every sampled one's
// against its own seed's run alone (speculative sampling draws other
// numbers than plain sampling, so its tokens differ from plain's; the
// distribution is the same: TestSpeculativeSamplingDistribution).
func TestSpeculativeBatchedMatchesPlain(t *testing.T) {
	for _, name := range []string{"tiny", "vl-tiny", "moe-tiny"} {
		m := openMTPModel(t, name)
		r := rand.New(rand.NewPCG(11, 12))
		vocab := m.Config().VocabSize
		shared := randomPrompt(r, 80, vocab)
		var reqs []Request
		for i, n := range []int{5, 17, 100, 150, 33, 9} {
			p := randomPrompt(r, n, vocab)
			if i >= 4 {
				p = append(slices.Clone(shared), p...) // a prefix the cache holds
			}
			req := Request{Prompt: p, MaxTokens: 10 + 3*i}
			if i == 2 || i == 3 {
				req.Params = sample.Params{Temperature: 0.8, Seed: uint64(i)}
			}
			reqs = append(reqs, req)
		}
		cfg := Config{MaxNumSeqs: 4, PrefixCache: true, StateMemory: 64 << 20}
		plain := newEngine(t, m, cfg)
		var want [][]int
		for _, req := range reqs {
			got, _, _ := generate(t, plain, req)
			want = append(want, got)
		}
		for k := 1; k <= 4; k++ {
			cfg.Speculative = Speculative{Method: "mtp", Tokens: k}
			e := newEngine(t, m, cfg)
			want := slices.Clone(want)
			for i, req := range reqs {
				if req.Params.Temperature > 0 {
					want[i], _, _ = generate(t, newEngine(t, m, Config{Speculative: cfg.Speculative}), req)
				}
			}
			streams := make([]*Stream, len(reqs))
			for i, req := range reqs {
				s, err := e.Submit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				streams[i] = s
			}
			var drafted int
			resumed := false
			for i, s := range streams {
				toks, out, err := collect(context.Background(), s)
				if err != nil || out.Finish != FinishLength {
					t.Fatalf("%s k=%d request %d: %v %v %v", name, k, i, err, out.Finish, out.Err)
				}
				if got := ids(toks); !slices.Equal(got, want[i]) {
					t.Errorf("%s k=%d request %d: %v, plain %v", name, k, i, got, want[i])
				}
				d, a := s.SpecTokens()
				if d == 0 || a > d || d%k != 0 {
					t.Errorf("%s k=%d request %d: %d drafts, %d accepted", name, k, i, d, a)
				}
				drafted += d
				if d > 0 && s.CachedTokens() > 0 {
					resumed = true
				}
			}
			if !resumed {
				t.Errorf("%s k=%d: no speculating request resumed from the prefix cache", name, k)
			}
			waitFor(t, func() bool { return e.Stats().OpenSequences == 0 })
			st := e.Stats()
			if st.SpecDraftTokens != uint64(drafted) || st.State.Running != 0 {
				t.Errorf("%s k=%d: stats %d drafts (streams %d), %d running state bytes", name, k, st.SpecDraftTokens, drafted, st.State.Running)
			}
			if st.PrefixHitTokens == 0 {
				t.Errorf("%s k=%d: no prefix cache hits", name, k)
			}
		}
	}
}

// TestSpeculativeStops checks that a round's tokens after a stop token, or
// past MaxTokens, are dropped, while its drafts count in full.
func TestSpeculativeStops(t *testing.T) {
	g := loadSpecGolden(t)
	m := openMTPModel(t, "vl-tiny")
	e := newEngine(t, m, Config{Speculative: Speculative{Method: "mtp", Tokens: 4}})
	free := g.PlainGreedy
	for _, stop := range []int{19, 633} {
		first := slices.Index(free, stop)
		got, out, _ := generate(t, e, Request{Prompt: g.Prompt, MaxTokens: 24, StopTokens: []int{stop}})
		if out.Finish != FinishStop || out.StopToken != stop || !slices.Equal(got, free[:first+1]) {
			t.Errorf("stop %d: %v (%v %d), want %v", stop, got, out.Finish, out.StopToken, free[:first+1])
		}
	}
	for n := 1; n <= 12; n++ {
		got, out, s := generate(t, e, Request{Prompt: g.Prompt, MaxTokens: n})
		d, _ := s.SpecTokens()
		if out.Finish != FinishLength || !slices.Equal(got, free[:n]) || (n == 1) != (d == 0) || d%4 != 0 {
			t.Errorf("max tokens %d: %v (%v), %d drafts; want %v", n, got, out.Finish, d, free[:n])
		}
	}
	// min_tokens holds a stop token back while it speculates.
	stop := free[3]
	got, out, s := generate(t, e, Request{Prompt: g.Prompt, MaxTokens: 24, MinTokens: 5, StopTokens: []int{stop}})
	want, wantOut, _ := generate(t, newEngine(t, m, Config{}), Request{Prompt: g.Prompt, MaxTokens: 24, MinTokens: 5, StopTokens: []int{stop}})
	if d, _ := s.SpecTokens(); d == 0 || out.Finish != wantOut.Finish || out.StopToken != wantOut.StopToken || !slices.Equal(got, want) {
		t.Errorf("min tokens: %v (%v %d), %d drafts; plain %v (%v %d)", got, out.Finish, out.StopToken, d, want, wantOut.Finish, wantOut.StopToken)
	}
	waitFor(t, func() bool { return e.Stats().OpenSequences == 0 })
}

func TestSpeculativeConfigErrors(t *testing.T) {
	m := openMTPModel(t, "tiny")
	for _, c := range []struct {
		sc   Speculative
		want string
	}{
		{Speculative{Method: "eagle", Tokens: 2}, "unknown speculative method"},
		{Speculative{Method: "ngram", Tokens: 2, LookupMin: 3, LookupMax: 2}, "1 <= min <= max"},
		{Speculative{Method: "ngram", Tokens: 5}, "1 to 4"},
		{Speculative{Method: "mtp", Tokens: 0}, "1 to 4"},
		{Speculative{Method: "mtp", Tokens: 5}, "1 to 4"},
		{Speculative{Tokens: 2}, "without a speculative method"},
		{Speculative{Method: "mtp", Tokens: 2, DraftQuantize: "q2_k"}, "unknown draft quantization"},
		{Speculative{Method: "ngram", Tokens: 2, DraftQuantize: "q8_0"}, "for method mtp"},
	} {
		if _, err := New(m, Config{Speculative: c.sc}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.sc, err, c.want)
		}
	}
	// A model opened without its head.
	if _, err := New(openModel(t, "tiny"), Config{Speculative: Speculative{Method: "mtp", Tokens: 2}}); err == nil || !strings.Contains(err.Error(), "MTP head") {
		t.Errorf("no head: %v", err)
	}
}
