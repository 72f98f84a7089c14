package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/randmodel"
	"github.com/govinfer/govinfer/sample"
)

// testBackend runs every test model: a CPU backend on all cores for the
// test binary's lifetime.
var testBackend = cpu.New(cpu.Options{})

var (
	modelsOnce sync.Once
	models     = map[string]*model.Model{}
	modelsErr  error
)

// openModel returns a test checkpoint (tiny, small or the mixture of
// experts moe-tiny), loaded once per test binary.
func openModel(tb testing.TB, name string) *model.Model {
	tb.Helper()
	modelsOnce.Do(func() {
		for _, n := range []string{"tiny", "small", "moe-tiny"} {
			m, err := model.Open("../testdata/models/"+n, model.Options{Backend: testBackend})
			if err != nil {
				modelsErr = err
				return
			}
			models[n] = m
		}
	})
	if modelsErr != nil {
		tb.Fatal(modelsErr)
	}
	return models[name]
}

func newEngine(tb testing.TB, m *model.Model, cfg Config) *Engine {
	tb.Helper()
	e, err := New(m, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// collect reads a stream to its end.
func collect(ctx context.Context, s *Stream) ([]Token, Output, error) {
	var toks []Token
	for {
		out, err := s.Next(ctx)
		if err != nil {
			return toks, out, err
		}
		toks = append(toks, out.Tokens...)
		if out.Finish != FinishNone {
			return toks, out, nil
		}
	}
}

func ids(toks []Token) []int {
	out := make([]int, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

func randomPrompt(r *rand.Rand, n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = r.IntN(vocab)
	}
	return p
}

// directGreedy generates with plain model steps: the whole prompt in one
// step, then one token per step.
func directGreedy(t *testing.T, m *model.Model, prompt []int, n int) []int {
	t.Helper()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	var out []int
	in := prompt
	for len(out) < n {
		o, err := m.Step(context.Background(), []model.Input{{Seq: seq, Tokens: in}})
		if err != nil {
			t.Fatal(err)
		}
		tok := compute.Argmax(o[0].Logits)
		out = append(out, tok)
		in = []int{tok}
	}
	return out
}

func TestSoloMatchesDirectGeneration(t *testing.T) {
	m := openModel(t, "small")
	e := newEngine(t, m, Config{ChunkTokens: 16})
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 15, 16, 17, 50} {
		prompt := randomPrompt(r, n, m.Config().VocabSize)
		s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		toks, out, err := collect(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if out.Finish != FinishLength {
			t.Errorf("prompt %d: finish %v, want length", n, out.Finish)
		}
		want := directGreedy(t, m, prompt, 8)
		if !slices.Equal(ids(toks), want) {
			t.Errorf("prompt %d: engine %v, direct %v", n, ids(toks), want)
		}
	}
}

// A prompt alone fills each step with whole chunks (here the model's pass
// of 256 tokens: 300 tokens in two steps, not five of 64); beside a decoding
// sequence it goes one chunk per step. Tokens are the same either way.
func TestPrefillFillsStepWhenAlone(t *testing.T) {
	m := openModel(t, "small")
	if m.MaxStepTokens() != 256 {
		t.Fatalf("the test model's pass holds %d tokens, the test assumes 256", m.MaxStepTokens())
	}
	e := newEngine(t, m, Config{ChunkTokens: 64})
	r := rand.New(rand.NewPCG(5, 6))
	prompt := randomPrompt(r, 300, m.Config().VocabSize)
	want := directGreedy(t, m, prompt, 4)
	// generate runs prompt for 4 tokens and returns them and the steps.
	generate := func() ([]int, uint64) {
		before := e.Stats().Steps
		s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 4, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		toks, _, err := collect(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		return ids(toks), e.Stats().Steps - before
	}

	got, steps := generate()
	if !slices.Equal(got, want) {
		t.Errorf("alone: engine %v, direct %v", got, want)
	}
	// 2 prefill steps (the second gives the first token), 3 decode steps.
	if steps != 5 {
		t.Errorf("alone: %d steps for a 300-token prompt and 4 tokens, want 5", steps)
	}

	// Beside a sequence that decodes, the prompt goes 64 tokens a step.
	lctx, stop := context.WithCancel(context.Background())
	defer stop()
	long, err := e.Submit(lctx, Request{Prompt: []int{1, 2, 3}, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Next(lctx); err != nil { // decoding now
		t.Fatal(err)
	}
	got, steps = generate()
	if !slices.Equal(got, want) {
		t.Errorf("beside a decoding sequence: engine %v, direct %v", got, want)
	}
	if steps < 8 {
		t.Errorf("beside a decoding sequence: %d steps for a 300-token prompt and 4 tokens, want at least 8 (5 chunks, 3 decodes)", steps)
	}
}

// PromptLogits delivers the last prompt position's logits, those of a plain
// model step, with the first token (their argmax under greedy decoding).
func TestPromptLogits(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{ChunkTokens: 4})
	prompt := []int{280, 17, 512, 9, 33, 100}
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true, PromptLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	var first int
	for {
		out, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if out.PromptLogits != nil {
			if got != nil {
				t.Fatal("prompt logits delivered twice")
			}
			got, first = out.PromptLogits, out.Tokens[0].ID
		}
		if out.Finish != FinishNone {
			break
		}
	}
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	o, err := m.Step(context.Background(), []model.Input{{Seq: seq, Tokens: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(o[0].Logits) || compute.Argmax(got) != compute.Argmax(o[0].Logits) || first != compute.Argmax(got) {
		t.Fatalf("prompt logits: %d values, argmax %d, first token %d; a model step gives %d values, argmax %d",
			len(got), compute.Argmax(got), first, len(o[0].Logits), compute.Argmax(o[0].Logits))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - o[0].Logits[i])); d > 1e-4 {
			t.Fatalf("logit %d: %v, a model step gives %v", i, got[i], o[0].Logits[i])
		}
	}
}

func TestBatchedMatchesSolo(t *testing.T) {
	for _, name := range []string{"tiny", "small", "moe-tiny"} {
		t.Run(name, func(t *testing.T) {
			m := openModel(t, name)
			e := newEngine(t, m, Config{MaxNumSeqs: 16, ChunkTokens: 32, StepTokens: 96})
			r := rand.New(rand.NewPCG(3, 4))
			const n = 16
			reqs := make([]Request, n)
			for i := range reqs {
				reqs[i] = Request{
					Prompt:    randomPrompt(r, 1+r.IntN(120), m.Config().VocabSize),
					MaxTokens: 4 + r.IntN(20),
					IgnoreEOS: true,
				}
			}
			// Seeded sampling must be isolated too.
			reqs[3].Params = sample.Params{Temperature: 0.8, TopK: 20, TopP: 0.9, Seed: 7}
			reqs[5].Params = sample.Params{RepetitionPenalty: 1.3, PresencePenalty: 0.5}
			solo := make([][]int, n)
			for i, req := range reqs {
				s, err := e.Submit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				toks, _, err := collect(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				solo[i] = ids(toks)
				if len(solo[i]) != req.MaxTokens {
					t.Fatalf("request %d: %d tokens, want %d", i, len(solo[i]), req.MaxTokens)
				}
			}
			batched := make([][]int, n)
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i, req := range reqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := e.Submit(context.Background(), req)
					if err != nil {
						errs[i] = err
						return
					}
					toks, _, err := collect(context.Background(), s)
					batched[i], errs[i] = ids(toks), err
				}()
			}
			wg.Wait()
			for i := range reqs {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if !slices.Equal(solo[i], batched[i]) {
					t.Errorf("request %d (prompt %d): batched %v, solo %v", i, len(reqs[i].Prompt), batched[i], solo[i])
				}
			}
			if st := e.Stats(); st.OpenSequences != 0 {
				t.Errorf("%d sequences still open", st.OpenSequences)
			}
		})
	}
}

func TestCancelFreesSequence(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.Submit(ctx, Request{Prompt: []int{1, 2, 3}, MaxTokens: 1 << 20, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Next(context.Background())
	if err != nil || len(out.Tokens) == 0 {
		t.Fatalf("first output %+v, %v", out, err)
	}
	if st := e.Stats(); st.OpenSequences != 1 || st.Running != 1 || st.StateBytes <= 0 {
		t.Fatalf("while running: %+v", st)
	}
	cancel()
	_, last, err := collect(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if last.Finish != FinishCancelled {
		t.Fatalf("finish %v, want cancelled", last.Finish)
	}
	waitFor(t, func() bool { st := e.Stats(); return st.OpenSequences == 0 && st.Running == 0 })
	if st := e.Stats(); st.Finished[FinishCancelled] != 1 {
		t.Errorf("cancelled count %d, want 1", st.Finished[FinishCancelled])
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueueLimit(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{MaxNumSeqs: 1, MaxQueue: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := Request{Prompt: []int{5, 6}, MaxTokens: 1 << 20, IgnoreEOS: true}
	first, err := e.Submit(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Next(ctx); err != nil {
		t.Fatal(err)
	}
	var queued []*Stream
	for range 2 {
		s, err := e.Submit(ctx, long)
		if err != nil {
			t.Fatalf("queueing within the limit: %v", err)
		}
		queued = append(queued, s)
	}
	if _, err := e.Submit(ctx, long); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("past the limit: %v, want ErrQueueFull", err)
	}
	if st := e.Stats(); st.Waiting != 2 || st.Running != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
	cancel()
	for _, s := range append(queued, first) {
		if _, out, err := collect(context.Background(), s); err != nil || out.Finish != FinishCancelled {
			t.Errorf("after cancel: %v %v", out.Finish, err)
		}
	}
	waitFor(t, func() bool { return e.Stats().OpenSequences == 0 })
}

func TestStopTokensAndMinTokens(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	prompt := []int{10, 20, 30, 40}
	free := directGreedy(t, m, prompt, 12)
	stopID := free[4]
	first := slices.Index(free, stopID)
	run := func(req Request) ([]int, Output) {
		s, err := e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		toks, out, err := collect(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		return ids(toks), out
	}
	got, out := run(Request{Prompt: prompt, MaxTokens: 12, StopTokens: []int{stopID}})
	if out.Finish != FinishStop || out.StopToken != stopID || !slices.Equal(got, free[:first+1]) {
		t.Errorf("stop token: got %v (%v, %d), want %v ending in %d", got, out.Finish, out.StopToken, free[:first+1], stopID)
	}
	got, out = run(Request{Prompt: prompt, MaxTokens: 12, MinTokens: 12, StopTokens: []int{stopID}})
	if out.Finish != FinishLength || len(got) != 12 || slices.Contains(got, stopID) {
		t.Errorf("min tokens: got %v (%v); the stop token must be suppressed", got, out.Finish)
	}
	// EOS from the config unless ignored.
	e2 := newEngine(t, m, Config{EOS: []int{stopID}})
	s, err := e2.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	toks, out, _ := collect(context.Background(), s)
	if out.Finish != FinishStop || len(toks) != first+1 {
		t.Errorf("eos: %v %v", ids(toks), out.Finish)
	}
	s, _ = e2.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true})
	toks, out, _ = collect(context.Background(), s)
	if out.Finish != FinishLength || !slices.Equal(ids(toks), free) {
		t.Errorf("ignore_eos: %v %v, want %v", ids(toks), out.Finish, free)
	}
}

// evenOnly allows only even token ids.
type evenOnly struct{ accepted []int }

func (p *evenOnly) Process(logits []float32) {
	for i := 1; i < len(logits); i += 2 {
		logits[i] = float32(math.Inf(-1))
	}
}

func (p *evenOnly) Accept(tok int) error {
	if tok%2 != 0 {
		return fmt.Errorf("odd token %d", tok)
	}
	p.accepted = append(p.accepted, tok)
	return nil
}

func TestProcessorAndLogprobs(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	p := &evenOnly{}
	s, err := e.Submit(context.Background(), Request{Prompt: []int{1, 2, 3}, MaxTokens: 10, IgnoreEOS: true, Processor: p, Logprobs: true, TopLogprobs: 3})
	if err != nil {
		t.Fatal(err)
	}
	toks, _, err := collect(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(toks), p.accepted) {
		t.Errorf("processor saw %v, stream %v", p.accepted, ids(toks))
	}
	for i, tk := range toks {
		if tk.ID%2 != 0 {
			t.Errorf("token %d is odd: %d", i, tk.ID)
		}
		if len(tk.Top) != 3 || tk.Logprob > 0 || tk.Logprob > tk.Top[0].Logprob {
			t.Errorf("token %d logprobs: %+v", i, tk)
		}
		for j := 1; j < len(tk.Top); j++ {
			if tk.Top[j].Logprob > tk.Top[j-1].Logprob {
				t.Errorf("token %d: top not sorted: %+v", i, tk.Top)
			}
		}
	}
}

func TestTopN(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	lp := make([]float64, 500)
	for i := range lp {
		lp[i] = float64(r.IntN(50)) // many ties
	}
	got := topN(lp, 7)
	ref := make([]TokenLogprob, len(lp))
	for i, v := range lp {
		ref[i] = TokenLogprob{i, v}
	}
	slices.SortStableFunc(ref, func(a, b TokenLogprob) int {
		switch {
		case a.Logprob > b.Logprob:
			return -1
		case a.Logprob < b.Logprob:
			return 1
		}
		return 0
	})
	if !slices.Equal(got, ref[:7]) {
		t.Errorf("topN %v, want %v", got, ref[:7])
	}
}

func TestSubmitValidation(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	bad := []Request{
		{MaxTokens: 1},
		{Prompt: []int{1}},
		{Prompt: []int{1}, MaxTokens: 1, MinTokens: -1},
		{Prompt: []int{-1}, MaxTokens: 1},
		{Prompt: []int{m.Config().VocabSize}, MaxTokens: 1},
		{Prompt: []int{1}, MaxTokens: 1, Params: sample.Params{Temperature: -1}},
	}
	for i, r := range bad {
		if _, err := e.Submit(context.Background(), r); err == nil {
			t.Errorf("request %d accepted", i)
		}
	}
	e.Close()
	if _, err := e.Submit(context.Background(), Request{Prompt: []int{1}, MaxTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestHistogram(t *testing.T) {
	h := newHistogram([]float64{1, 2, 3})
	for _, v := range []float64{0.5, 1, 1.5, 3, 10} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if !slices.Equal(s.Cumulative, []uint64{2, 3, 4}) || s.Count != 5 || s.Sum != 16 {
		t.Errorf("snapshot %+v", s)
	}
}

// decodeRate runs streams concurrent greedy requests and returns the
// aggregate generated tokens per second, prefill excluded (timed from the
// moment every stream has its first token).
func decodeRate(tb testing.TB, e *Engine, streams, tokens int) float64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	allFirst := make(chan struct{})
	var startGen uint64
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Submit(context.Background(), Request{Prompt: []int{1 + i, 2, 3}, MaxTokens: tokens, IgnoreEOS: true})
			if err != nil {
				tb.Error(err)
				return
			}
			first := true
			for {
				out, err := s.Next(context.Background())
				if err != nil {
					tb.Error(err)
					return
				}
				if first && len(out.Tokens) > 0 {
					first = false
					mu.Lock()
					firsts++
					if firsts == streams {
						startGen = e.Stats().GenerationTokens
						close(allFirst)
					}
					mu.Unlock()
				}
				if out.Finish != FinishNone {
					return
				}
			}
		}()
	}
	<-allFirst
	start := time.Now()
	wg.Wait()
	el := time.Since(start)
	return float64(e.Stats().GenerationTokens-startGen) / el.Seconds()
}

// BenchmarkDecode reports aggregate decode tokens/s at 1 and 16 concurrent
// greedy streams on the small model.
func BenchmarkDecode(b *testing.B) {
	m := openModel(b, "small")
	for _, streams := range []int{1, 16} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			e := newEngine(b, m, Config{MaxNumSeqs: 16})
			var rate float64
			for b.Loop() {
				rate = decodeRate(b, e, streams, 64)
			}
			b.ReportMetric(rate, "tokens/s")
		})
	}
}

// servedSmall writes the small shape with a vocabulary the size of the Qwen3
// tokenizer's (151669 ids, untied): the model the server tests serve. Its
// 78 MB output matrix does not fit in a CPU cache, so a decode step streams
// weights from memory as a real model's does.
func servedSmall(tb testing.TB) *model.Model {
	tb.Helper()
	shape, err := randmodel.LookupShape("small")
	if err != nil {
		tb.Fatal(err)
	}
	shape.Vocab = 151669
	dir := tb.TempDir()
	if err := randmodel.Write(dir, shape, randmodel.Options{Seed: 3}); err != nil {
		tb.Fatal(err)
	}
	m, err := model.Open(dir, model.Options{Backend: testBackend})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// TestBatchingPays checks that 16 concurrent greedy streams decode at least
// 4 times faster in aggregate than one, on the small model as served (small
// widths, Qwen3-sized vocabulary). It also logs the figure for the test
// checkpoint testdata/models/small, whose 18 MB of weights stay in the L3
// cache, so that a step there is bound by arithmetic and the saving of
// reading weights once per batch does not show. Timing on a shared machine
// is noisy, so it runs only with GOVINFER_TIMING=1.
func TestBatchingPays(t *testing.T) {
	if os.Getenv("GOVINFER_TIMING") != "1" {
		t.Skip("timing test; set GOVINFER_TIMING=1 to run it")
	}
	rates := func(m *model.Model) (one, sixteen float64) {
		e := newEngine(t, m, Config{MaxNumSeqs: 16})
		decodeRate(t, e, 2, 8) // warm up
		return decodeRate(t, e, 1, 48), decodeRate(t, e, 16, 48)
	}
	one, sixteen := rates(openModel(t, "small"))
	t.Logf("testdata small (cache-resident): 1 stream %.0f tokens/s, 16 streams %.0f tokens/s (%.1fx)", one, sixteen, sixteen/one)
	one, sixteen = rates(servedSmall(t))
	t.Logf("small as served (151669 vocab): 1 stream %.0f tokens/s, 16 streams %.0f tokens/s (%.1fx)", one, sixteen, sixteen/one)
	if sixteen < 4*one {
		t.Errorf("16 streams give %.0f tokens/s, under 4x the single stream's %.0f", sixteen, one)
	}
}

// TestQueueServedWhenCapacityFrees runs the stranded-queue sequence: two
// long requests fill the batch, two queued requests are cancelled, two
// patient ones wait behind them; cancelling the running pair must start the
// patient pair at once, with no other request arriving, and the cancelled
// queued ones must give up their places immediately.
func TestQueueServedWhenCapacityFrees(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{MaxNumSeqs: 2, MaxQueue: 4})
	long := Request{Prompt: []int{5, 6, 7}, MaxTokens: 1 << 20, IgnoreEOS: true}
	runCtx, stopRunning := context.WithCancel(context.Background())
	defer stopRunning()
	var running []*Stream
	for range 2 {
		s, err := e.Submit(runCtx, long)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
		running = append(running, s)
	}
	quitCtx, quit := context.WithCancel(context.Background())
	var quitters []*Stream
	for range 2 {
		s, err := e.Submit(quitCtx, long)
		if err != nil {
			t.Fatal(err)
		}
		quitters = append(quitters, s)
	}
	short := Request{Prompt: []int{8, 9}, MaxTokens: 4, IgnoreEOS: true}
	var patient []*Stream
	for range 2 {
		s, err := e.Submit(context.Background(), short)
		if err != nil {
			t.Fatal(err)
		}
		patient = append(patient, s)
	}
	if _, err := e.Submit(context.Background(), short); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fifth waiting request: %v, want ErrQueueFull", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quit()
	for _, s := range quitters {
		if _, out, err := collect(ctx, s); err != nil || out.Finish != FinishCancelled {
			t.Fatalf("cancelled while queued: %v %v", out.Finish, err)
		}
	}
	if st := e.Stats(); st.Waiting != 2 || st.Running != 2 {
		t.Fatalf("after the queued pair hung up: %d waiting, %d running; want 2 and 2", st.Waiting, st.Running)
	}
	stopRunning()
	for _, s := range running {
		if _, out, err := collect(ctx, s); err != nil || out.Finish != FinishCancelled {
			t.Fatalf("cancelled while running: %v %v", out.Finish, err)
		}
	}
	for i, s := range patient {
		toks, out, err := collect(ctx, s)
		if err != nil {
			t.Fatalf("patient request %d never finished: %v", i, err)
		}
		if out.Finish != FinishLength || len(toks) != 4 {
			t.Fatalf("patient request %d: %v after %d tokens", i, out.Finish, len(toks))
		}
	}
	waitFor(t, func() bool { st := e.Stats(); return st.OpenSequences == 0 && st.Waiting == 0 })
}

// TestLogitBias checks that a bias of +100 makes its token the greedy
// choice, that logprobs see the bias, and that ids outside the
// vocabulary are refused.
func TestLogitBias(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	prompt := []int{10, 20, 30}
	free := directGreedy(t, m, prompt, 4)
	target := (free[0] + 7) % m.Config().VocabSize
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 4, IgnoreEOS: true, Logprobs: true,
		LogitBias: map[int]float32{target: 100}})
	if err != nil {
		t.Fatal(err)
	}
	toks, _, err := collect(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range toks {
		if tk.ID != target {
			t.Fatalf("token %d is %d, want the biased %d", i, tk.ID, target)
		}
		if tk.Logprob < -1e-3 {
			t.Errorf("token %d: logprob %v; with a +100 bias it should be about 0", i, tk.Logprob)
		}
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 1, LogitBias: map[int]float32{m.Config().VocabSize: 1}}); err == nil {
		t.Fatal("a bias outside the vocabulary was accepted")
	}
}

// TestTokenCommitTimes checks Token.At: the engine's commit time of each
// token, whatever the reader's pace. The stream is read only after the
// request has ended, so all its tokens arrive in one Output; plain
// decoding commits one token per step, so their times are distinct and
// increasing, after the submission and before the read.
func TestTokenCommitTimes(t *testing.T) {
	m := openModel(t, "tiny")
	e := newEngine(t, m, Config{})
	before := time.Now()
	s, err := e.Submit(context.Background(), Request{Prompt: []int{1, 2, 3}, MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		done := s.finish != FinishNone
		s.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request did not end within 10 s")
		}
	}
	out, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	if len(out.Tokens) != 5 || out.Finish != FinishLength {
		t.Fatalf("one read after the end: %d tokens, finish %v; want 5, length", len(out.Tokens), out.Finish)
	}
	for i, tok := range out.Tokens {
		if tok.At.Before(before) || tok.At.After(read) || (i > 0 && !tok.At.After(out.Tokens[i-1].At)) {
			t.Errorf("token %d committed at %v (submitted %v, read %v, previous %v)", i, tok.At, before, read, out.Tokens[max(i-1, 0)].At)
		}
	}
}
