package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/diag/diagtest"
)

// runFake runs diag against a fresh fake server.
func runFake(t *testing.T, cfg diagtest.Config, opts Options) (*Report, error, *diagtest.Server) {
	t.Helper()
	srv := diagtest.NewServer(cfg)
	t.Cleanup(srv.Close)
	opts.BaseURL = srv.URL
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	var progress bytes.Buffer
	opts.Progress = &progress
	rep, err := Run(context.Background(), opts)
	if rep == nil {
		t.Fatalf("Run returned a nil report (err %v)", err)
	}
	t.Logf("progress:\n%s", progress.String())
	return rep, err, srv
}

// roundTrip encodes the report as the command writes it and decodes it
// generically, failing when the output is not valid JSON.
func roundTrip(t *testing.T, rep *Report) map[string]any {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.json")
	if err := rep.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("report is not valid JSON: %v\n%s", err, data)
	}
	return v
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// shapeDiff lists the differences in key sets and JSON types between got
// and want, recursively. Array elements are compared with the element of want
// at the same index (or its last element when got is longer).
func shapeDiff(path string, got, want any) []string {
	if jsonType(got) != jsonType(want) {
		return []string{fmt.Sprintf("%s: %s, seed has %s", path, jsonType(got), jsonType(want))}
	}
	var diffs []string
	switch w := want.(type) {
	case map[string]any:
		g := got.(map[string]any)
		var keys []string
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: not in the seed", path, k))
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: missing", path, k))
				continue
			}
			diffs = append(diffs, shapeDiff(path+"."+k, gv, w[k])...)
		}
	case []any:
		g := got.([]any)
		if len(w) == 0 || len(g) == 0 {
			if len(w) != len(g) {
				diffs = append(diffs, fmt.Sprintf("%s: %d elements, seed has %d", path, len(g), len(w)))
			}
			return diffs
		}
		for i, e := range g {
			diffs = append(diffs, shapeDiff(fmt.Sprintf("%s[%d]", path, i), e, w[min(i, len(w)-1)])...)
		}
	}
	return diffs
}

func TestShapeDiffCatchesDifferences(t *testing.T) {
	want := map[string]any{"a": 1.0, "b": []any{map[string]any{"c": "x"}}, "d": nil}
	for _, got := range []map[string]any{
		{"a": 1.0, "b": []any{map[string]any{"c": "x"}}},                        // missing d
		{"a": 1.0, "b": []any{map[string]any{"c": "x"}}, "d": nil, "e": true},   // extra e
		{"a": "1", "b": []any{map[string]any{"c": "x"}}, "d": nil},              // type of a
		{"a": 1.0, "b": []any{map[string]any{"c": 2.0}}, "d": nil},              // nested type
		{"a": 1.0, "b": []any{map[string]any{"c": "x", "z": 1.0}}, "d": nil},    // nested extra
		{"a": 1.0, "b": []any{map[string]any{"c": "x"}}, "d": map[string]any{}}, // null vs object
	} {
		if d := shapeDiff("$", got, want); len(d) == 0 {
			t.Errorf("%v: no difference found", got)
		}
	}
	if d := shapeDiff("$", want, want); len(d) != 0 {
		t.Errorf("identical: %v", d)
	}
}

func loadSeed(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../testdata/seed/report.pretty.json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRunRightServer(t *testing.T) {
	cfg := diagtest.Config{Mode: diagtest.Right, Tokenize: true, MaxModelLen: 4096}
	rep, err, _ := runFake(t, cfg, Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Status != StatusComplete || rep.Error != "" {
		t.Errorf("status %q error %q", rep.Status, rep.Error)
	}
	if rep.Model != "diagtest/fake" || rep.Scope != Scope {
		t.Errorf("model %q scope %q", rep.Model, rep.Scope)
	}
	if rep.BehaviorPasses != 11 || len(rep.Behavior) != 11 {
		t.Errorf("behaviour %d/%d", rep.BehaviorPasses, len(rep.Behavior))
	}
	if rep.LongContextPasses != 1 || len(rep.LongContext) != 1 || rep.LongContext[0].ID != LongContextID {
		t.Errorf("long context %+v", rep.LongContext)
	}
	// Target: 4096 - 256 margin; the prompt sits just under it.
	if p := rep.LongContext[0].PreparedPromptTokens; p > 3840 || p < 3800 {
		t.Errorf("prepared prompt tokens %d, want just under 3840", p)
	}
	var resp chatResponse
	if err := json.Unmarshal(rep.LongContext[0].Response, &resp); err != nil || resp.Usage == nil ||
		resp.Usage.PromptTokens != rep.LongContext[0].PreparedPromptTokens {
		t.Errorf("long-context usage %+v (err %v), want prompt_tokens = prepared", resp.Usage, err)
	}
	if rep.InitialDecode == nil || len(rep.DecodeRuns) != 3 {
		t.Fatalf("decode: initial %v, %d runs", rep.InitialDecode, len(rep.DecodeRuns))
	}
	for i, d := range append([]DecodeRun{*rep.InitialDecode}, rep.DecodeRuns...) {
		if d.TTFTMillis <= 0 || d.DecodeSeconds <= 0 || d.DecodeTokensPerSecond <= 0 {
			t.Errorf("decode run %d: %+v", i, d)
		}
		if got := 127 / d.DecodeSeconds; d.DecodeTokensPerSecond != got {
			t.Errorf("decode run %d: %v tok/s, want 127/decode_seconds = %v", i, d.DecodeTokensPerSecond, got)
		}
	}
	if rep.MedianDecodeTokensPerSecond != median(rep.DecodeRuns) || rep.MedianDecodeTokensPerSecond <= 0 {
		t.Errorf("median %v", rep.MedianDecodeTokensPerSecond)
	}
	if !rep.IdenticalGreedyCompletions || !rep.RequestIsolationPassed {
		t.Errorf("identical %v isolation %v", rep.IdenticalGreedyCompletions, rep.RequestIsolationPassed)
	}
	if f := rep.FailedChecks(nil); len(f) != 0 {
		t.Errorf("failed checks %v", f)
	}
}

// TestReportShapeMatchesSeed: the written report has exactly the seed's keys
// and JSON types, recursively (server responses included, since the fake
// answers in vLLM's shape).
func TestReportShapeMatchesSeed(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{Mode: diagtest.Right, Tokenize: true}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range shapeDiff("$", roundTrip(t, rep), loadSeed(t)) {
		t.Error(d)
	}
}

// TestSeedRoundTrip: reading the seed into a Report and writing it back
// loses nothing.
func TestSeedRoundTrip(t *testing.T) {
	seed, err := ReadFile("../testdata/seed/report.pretty.json")
	if err != nil {
		t.Fatal(err)
	}
	got := roundTrip(t, seed)
	want := loadSeed(t)
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Errorf("seed changed in a round trip:\n%s\n%s", a, b)
	}
}

func TestRunProbesWithoutTokenize(t *testing.T) {
	cfg := diagtest.Config{Mode: diagtest.Right, Tokenize: false, MaxModelLen: 2048}
	rep, err, _ := runFake(t, cfg, Options{Only: []Part{PartLongContext}})
	if err != nil {
		t.Fatal(err)
	}
	lc := rep.LongContext[0]
	if !lc.Pass || lc.PreparedPromptTokens > 2048-256 || lc.PreparedPromptTokens < 2048-256-40 {
		t.Errorf("long context %+v", lc)
	}
	if len(rep.Behavior) != 0 || len(rep.DecodeRuns) != 0 || rep.InitialDecode != nil {
		t.Errorf("parts that were not asked for ran: %+v", rep)
	}
}

func TestLongContextOverride(t *testing.T) {
	for _, tokenize := range []bool{true, false} {
		cfg := diagtest.Config{Mode: diagtest.Right, Tokenize: tokenize, MaxModelLen: 100000}
		rep, err, _ := runFake(t, cfg, Options{Only: []Part{PartLongContext}, LongContextTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.LongContext[0].PreparedPromptTokens; p > 1000 || p < 960 {
			t.Errorf("tokenize %v: prepared %d, want just under 1000", tokenize, p)
		}
	}
	// The default target is capped at 8192 on a long-context server.
	rep, err, _ := runFake(t, diagtest.Config{Tokenize: true, MaxModelLen: 100000}, Options{Only: []Part{PartLongContext}})
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.LongContext[0].PreparedPromptTokens; p > 8192 || p < 8150 {
		t.Errorf("prepared %d, want just under 8192", p)
	}
	// A target below the bare question is an error, not a hang.
	rep, err, _ = runFake(t, diagtest.Config{Tokenize: true}, Options{Only: []Part{PartLongContext}, LongContextTokens: 10})
	if err == nil || rep.Status != StatusFailed || !strings.Contains(rep.Error, "below") {
		t.Errorf("tiny target: err %v, status %q, error %q", err, rep.Status, rep.Error)
	}
}

func TestLongContextPromptsDiffer(t *testing.T) {
	// Same seed, same prompt; the fact sits at the drawn depth.
	a, b := haystack{code: "4321", depth: 0.25}, haystack{code: "4321", depth: 0.75}
	pa, pb := a.prompt(100), b.prompt(100)
	ia, ib := strings.Index(pa, "4321"), strings.Index(pb, "4321")
	if ia < 0 || ib < 0 || float64(ia)/float64(len(pa)) > 0.4 || float64(ib)/float64(len(pb)) < 0.6 {
		t.Errorf("fact at %d/%d and %d/%d", ia, len(pa), ib, len(pb))
	}
	if strings.Count(pa, "4321") != 1 || strings.ContainsAny(strings.ReplaceAll(pa, "4321", ""), "0123456789") {
		t.Error("the prompt must hold the code once and no other digits")
	}
}

func TestRunWrongServer(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{Mode: diagtest.Wrong, Tokenize: true}, Options{})
	if err != nil {
		t.Fatalf("wrong answers are failed checks, not a broken run: %v", err)
	}
	if rep.Status != StatusComplete || rep.BehaviorPasses != 0 || rep.LongContextPasses != 0 {
		t.Errorf("status %q, passes %d/%d", rep.Status, rep.BehaviorPasses, rep.LongContextPasses)
	}
	for _, c := range rep.Behavior {
		if c.Pass || !json.Valid(c.Response) || string(c.Response) == "null" {
			t.Errorf("%s: pass %v response %s", c.ID, c.Pass, c.Response)
		}
	}
	// Wrong but consistent: determinism and isolation still hold.
	if !rep.IdenticalGreedyCompletions || !rep.RequestIsolationPassed {
		t.Errorf("identical %v isolation %v", rep.IdenticalGreedyCompletions, rep.RequestIsolationPassed)
	}
	if f := rep.FailedChecks(nil); len(f) != 12 {
		t.Errorf("failed checks %v, want the 11 behaviour checks and the long-context check", f)
	}
}

func TestRunMalformedServer(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{Mode: diagtest.Malformed, Tokenize: true}, Options{})
	if err == nil {
		t.Fatal("no error from a server that answers garbage")
	}
	if rep.Status != StatusFailed || !strings.Contains(rep.Error, "not valid JSON") {
		t.Errorf("status %q error %q", rep.Status, rep.Error)
	}
	if len(rep.Behavior) != 11 {
		t.Fatalf("%d behaviour results, want all 11 recorded", len(rep.Behavior))
	}
	for _, c := range rep.Behavior {
		if c.Pass || string(c.Response) != "null" {
			t.Errorf("%s: pass %v response %s", c.ID, c.Pass, c.Response)
		}
	}
	roundTrip(t, rep)
}

func TestRunServerErrors(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{Mode: diagtest.ServerError, Tokenize: true}, Options{})
	if err == nil || rep.Status != StatusFailed || !strings.Contains(rep.Error, "HTTP 500") {
		t.Fatalf("err %v status %q error %q", err, rep.Status, rep.Error)
	}
	// The server's error body is kept verbatim.
	var body struct {
		Error struct{ Code int } `json:"error"`
	}
	if err := json.Unmarshal(rep.Behavior[0].Response, &body); err != nil || body.Error.Code != 500 {
		t.Errorf("response %s", rep.Behavior[0].Response)
	}
	v := roundTrip(t, rep)
	if v["error"] == nil || v["status"] != "failed" {
		t.Errorf("written status %v error %v", v["status"], v["error"])
	}
}

func TestRunSlowServerTimesOut(t *testing.T) {
	cfg := diagtest.Config{Mode: diagtest.Slow, Delay: 5 * time.Second, Tokenize: true}
	start := time.Now()
	rep, err, _ := runFake(t, cfg, Options{Timeout: 100 * time.Millisecond, Only: []Part{PartBehavior}})
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("run took %v with a 100ms timeout", took)
	}
	if err == nil || rep.Status != StatusFailed || !strings.Contains(rep.Error, "timed out") {
		t.Errorf("err %v status %q error %q", err, rep.Status, rep.Error)
	}
}

func TestRunSlowServerWithinTimeout(t *testing.T) {
	cfg := diagtest.Config{Mode: diagtest.Slow, Delay: 20 * time.Millisecond}
	rep, err, _ := runFake(t, cfg, Options{Timeout: 2 * time.Second, Only: []Part{PartBehavior}})
	if err != nil || rep.BehaviorPasses != 11 {
		t.Errorf("err %v passes %d", err, rep.BehaviorPasses)
	}
}

func TestRunDroppedStreams(t *testing.T) {
	cfg := diagtest.Config{Mode: diagtest.DropStream}
	rep, err, _ := runFake(t, cfg, Options{Only: []Part{PartBehavior, PartDecode}})
	if err == nil || rep.Status != StatusPartial {
		t.Fatalf("err %v status %q", err, rep.Status)
	}
	if rep.BehaviorPasses != 11 || len(rep.DecodeRuns) != 0 || rep.InitialDecode != nil {
		t.Errorf("passes %d, decode runs %d, initial %v", rep.BehaviorPasses, len(rep.DecodeRuns), rep.InitialDecode)
	}
	if rep.IdenticalGreedyCompletions || rep.MedianDecodeTokensPerSecond != 0 {
		t.Errorf("identical %v median %v from broken streams", rep.IdenticalGreedyCompletions, rep.MedianDecodeTokensPerSecond)
	}
	if strings.Count(rep.Error, "decode-") != 4 {
		t.Errorf("error %q, want the four decode runs named", rep.Error)
	}
	roundTrip(t, rep)
}

func TestRunInterferingServerFailsIsolation(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{Mode: diagtest.Interfering}, Options{Only: []Part{PartBehavior, PartIsolation}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.BehaviorPasses != 11 || rep.RequestIsolationPassed {
		t.Errorf("passes %d isolation %v", rep.BehaviorPasses, rep.RequestIsolationPassed)
	}
	if f := rep.FailedChecks([]Part{PartBehavior, PartIsolation}); !slices.Equal(f, []string{"request_isolation"}) {
		t.Errorf("failed checks %v", f)
	}
}

func TestRunIsolationAloneDoesItsOwnSoloRuns(t *testing.T) {
	rep, err, srv := runFake(t, diagtest.Config{}, Options{Only: []Part{PartIsolation}})
	if err != nil || !rep.RequestIsolationPassed {
		t.Fatalf("err %v isolation %v", err, rep.RequestIsolationPassed)
	}
	if n := srv.Requests(); n != 22 {
		t.Errorf("%d requests, want 11 solo + 11 concurrent", n)
	}
}

func TestRunVaryingDecodeIsNotIdentical(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{VaryDecode: true}, Options{Only: []Part{PartDecode}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.DecodeRuns) != 3 || rep.IdenticalGreedyCompletions {
		t.Errorf("%d runs, identical %v", len(rep.DecodeRuns), rep.IdenticalGreedyCompletions)
	}
	if f := rep.FailedChecks([]Part{PartDecode}); !slices.Equal(f, []string{"identical_greedy_completions"}) {
		t.Errorf("failed checks %v", f)
	}
}

func TestRunUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rep, err := Run(context.Background(), Options{BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err == nil || rep.Status != StatusFailed || !strings.Contains(rep.Error, "cannot reach") {
		t.Fatalf("err %v status %q error %q", err, rep.Status, rep.Error)
	}
	if v := roundTrip(t, rep); v["error"] == nil {
		t.Error("written report has no error")
	}
}

func TestRunBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8000", "ftp://x", "http://"} {
		rep, err := Run(context.Background(), Options{BaseURL: u})
		if err == nil || rep.Status != StatusFailed || rep.Error == "" {
			t.Errorf("%q: err %v status %q", u, err, rep.Status)
		}
	}
}

func TestNormalizeBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":      "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/":     "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1":   "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1/":  "http://127.0.0.1:8000",
		"https://host/prefix/v1":     "https://host/prefix",
		" http://127.0.0.1:8000/v1 ": "http://127.0.0.1:8000",
	} {
		if got, err := normalizeBaseURL(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestRunAPIKey(t *testing.T) {
	cfg := diagtest.Config{APIKey: "sekret"}
	rep, err, _ := runFake(t, cfg, Options{Only: []Part{PartBehavior}})
	if err == nil || rep.Status != StatusFailed || !strings.Contains(rep.Error, "401") {
		t.Errorf("without key: err %v status %q error %q", err, rep.Status, rep.Error)
	}
	rep, err, _ = runFake(t, cfg, Options{Only: []Part{PartBehavior}, APIKey: "sekret"})
	if err != nil || rep.BehaviorPasses != 11 {
		t.Errorf("with key: err %v passes %d", err, rep.BehaviorPasses)
	}
}

func TestRunExplicitModel(t *testing.T) {
	rep, err, _ := runFake(t, diagtest.Config{}, Options{Only: []Part{PartBehavior}, Model: "other/model"})
	// The fake rejects an unknown model with 404 on every request.
	if err == nil || rep.Model != "other/model" || !strings.Contains(rep.Error, "404") {
		t.Errorf("err %v model %q error %q", err, rep.Model, rep.Error)
	}
}

func TestRunCancelled(t *testing.T) {
	srv := diagtest.NewServer(diagtest.Config{Mode: diagtest.Slow, Delay: 5 * time.Second})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, Options{BaseURL: srv.URL})
	if time.Since(start) > 3*time.Second {
		t.Errorf("cancelled run took %v", time.Since(start))
	}
	if err == nil || rep.Status == StatusComplete || !strings.Contains(rep.Error, "interrupted") {
		t.Errorf("err %v status %q error %q", err, rep.Status, rep.Error)
	}
}

func TestParseParts(t *testing.T) {
	got, err := ParseParts("decode, behavior,decode")
	if err != nil || !slices.Equal(got, []Part{PartDecode, PartBehavior}) {
		t.Errorf("%v %v", got, err)
	}
	if got, err := ParseParts(""); err != nil || !slices.Equal(got, AllParts()) {
		t.Errorf("%v %v", got, err)
	}
	if _, err := ParseParts("behaviour"); err == nil {
		t.Error("unknown part accepted")
	}
}

// TestFitFillerFindsLargestFit: with a counter that is not linear in the
// filler, the search still returns the largest filler that fits.
func TestFitFillerFindsLargestFit(t *testing.T) {
	h := haystack{code: "1234", depth: 0.5}
	for _, tc := range []struct {
		name  string
		count func(n int) int
	}{
		{"linear", func(n int) int { return 40 + 13*n }},
		{"convex", func(n int) int { return 40 + 5*n + n*n/300 }},
		{"concave", func(n int) int { return 40 + 20*n - n*n/1000 }},
		{"steps", func(n int) int { return 40 + 11*n + 3*(n/17) }},
	} {
		for _, target := range []int{41, 100, 1000, 7936} {
			var probes int
			count := func(_ context.Context, prompt string) (int, error) {
				probes++
				// Recover n from the prompt: count filler sentences.
				n := 0
				for _, s := range fillerSentences {
					n += strings.Count(prompt, s)
				}
				return tc.count(n), nil
			}
			n, tokens, err := fitFiller(context.Background(), h, target, count)
			if err != nil {
				t.Errorf("%s target %d: %v", tc.name, target, err)
				continue
			}
			if tokens != tc.count(n) || tokens > target || tc.count(n+1) <= target {
				t.Errorf("%s target %d: n %d (%d tokens), n+1 gives %d", tc.name, target, n, tokens, tc.count(n+1))
			}
			if probes > 25 {
				t.Errorf("%s target %d: %d probes", tc.name, target, probes)
			}
		}
	}
}
