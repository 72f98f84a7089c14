package diag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// A Part is one section of a diagnostic run.
type Part string

// The parts of a run, in the order they run.
const (
	PartBehavior    Part = "behavior"     // the behaviour checks
	PartLongContext Part = "long_context" // the near-limit retrieval check
	PartDecode      Part = "decode"       // warm-up and counted timed decode runs
	PartIsolation   Part = "isolation"    // behaviour prompts sent concurrently vs alone
)

// AllParts returns every part in run order.
func AllParts() []Part { return []Part{PartBehavior, PartLongContext, PartDecode, PartIsolation} }

// ParseParts parses a comma-separated list of part names ("" means all).
func ParseParts(s string) ([]Part, error) {
	if strings.TrimSpace(s) == "" {
		return AllParts(), nil
	}
	var parts []Part
	for name := range strings.SplitSeq(s, ",") {
		p := Part(strings.TrimSpace(name))
		if !slices.Contains(AllParts(), p) {
			return nil, fmt.Errorf("diag: unknown part %q (want behavior, long_context, decode or isolation)", name)
		}
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

type partSet []Part

func (s partSet) has(p Part) bool { return len(s) == 0 || slices.Contains(s, p) }

// DefaultTimeout is the per-request timeout when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// Options configures Run.
type Options struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:8000" (a
	// trailing "/v1" is accepted).
	BaseURL string
	// Model is the model id to request; empty means the first model that
	// GET /v1/models lists.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Only selects the parts to run; empty means all.
	Only []Part
	// LongContextTokens overrides the long-context target length; zero
	// means the server's max_model_len minus a margin, capped at 8192.
	LongContextTokens int
	// Timeout bounds each request, a whole stream included; zero means
	// DefaultTimeout, negative means none.
	Timeout time.Duration
	// Progress receives one line per check while the run goes; nil
	// discards them.
	Progress io.Writer
	// Seed seeds the placement of the long-context fact; runs with the same
	// seed build the same prompt.
	Seed uint64
	// HTTPClient sends the requests; nil means a client of its own.
	HTTPClient *http.Client
}

// Run exercises the server at opts.BaseURL and returns the report. The
// report is never nil. The error is non-nil when the server could not be
// reached or requests broke (HTTP errors, timeouts, malformed or cut
// responses); the report then has Status StatusFailed or StatusPartial and
// says why in Error. Checks that got a well-formed but wrong answer fail
// without an error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	r := &runner{
		rep: &Report{
			Status:      StatusComplete,
			Scope:       Scope,
			BaseURL:     opts.BaseURL,
			Model:       opts.Model,
			Behavior:    []CheckResult{},
			LongContext: []LongContextResult{},
			DecodeRuns:  []DecodeRun{},
		},
		parts:    partSet(opts.Only),
		progress: opts.Progress,
	}
	if r.progress == nil {
		r.progress = io.Discard
	}
	base, err := normalizeBaseURL(opts.BaseURL)
	if err != nil {
		return r.fail(err)
	}
	r.rep.BaseURL = base
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	r.c = &client{baseURL: base, apiKey: opts.APIKey, timeout: max(timeout, 0), http: hc}

	maxLen, err := r.pickModel(ctx)
	if err != nil {
		return r.fail(err)
	}
	var solo []*chatResponse
	if r.parts.has(PartBehavior) {
		solo = r.behavior(ctx)
	}
	if r.parts.has(PartLongContext) && ctx.Err() == nil {
		target := longContextTarget(maxLen, opts.LongContextTokens)
		r.longContext(ctx, target, rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15)))
	}
	if r.parts.has(PartDecode) && ctx.Err() == nil {
		r.decode(ctx)
	}
	if r.parts.has(PartIsolation) && ctx.Err() == nil {
		r.isolation(ctx, solo)
	}
	if ctx.Err() != nil {
		r.problem(fmt.Errorf("run interrupted: %w", context.Cause(ctx)))
	}
	return r.finish()
}

// runner holds the state of one Run.
type runner struct {
	c         *client
	rep       *Report
	parts     partSet
	progress  io.Writer
	problems  []string
	successes int // checks whose requests got well-formed answers
}

// normalizeBaseURL checks the URL and strips a trailing "/" or "/v1".
func normalizeBaseURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return s, fmt.Errorf("diag: base URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("diag: base URL %q: want http://host:port or https://host:port", s)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.Path = strings.TrimSuffix(p, "/")
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// pickModel asks GET /v1/models for the model id (when none was given) and
// its max_model_len (0 when unknown).
func (r *runner) pickModel(ctx context.Context) (int, error) {
	start := time.Now()
	list, err := r.c.models(ctx)
	var he *HTTPError
	switch {
	case err != nil && (errors.As(err, &he) || errors.Is(err, errNotJSON)) && r.rep.Model != "":
		// The server answers but lists no models: go on with the given id.
		r.line("models", r.rep.Model, "warn", time.Since(start), fmt.Sprintf("GET %v; max_model_len unknown", err))
		return 0, nil
	case err != nil && (errors.As(err, &he) || errors.Is(err, errNotJSON)):
		return 0, fmt.Errorf("diag: the server at %s does not list its models (%w); pass the model id", r.rep.BaseURL, err)
	case err != nil:
		return 0, fmt.Errorf("diag: cannot reach the server at %s: %w", r.rep.BaseURL, err)
	}
	if r.rep.Model == "" {
		if len(list) == 0 || list[0].ID == "" {
			return 0, fmt.Errorf("diag: %s/v1/models lists no model; pass a model id", r.rep.BaseURL)
		}
		r.rep.Model = list[0].ID
	}
	for _, m := range list {
		if m.ID == r.rep.Model {
			r.line("models", m.ID, "ok", time.Since(start), fmt.Sprintf("max_model_len %d", m.MaxModelLen))
			return m.MaxModelLen, nil
		}
	}
	r.line("models", r.rep.Model, "warn", time.Since(start), "not listed by /v1/models; max_model_len unknown")
	return 0, nil
}

// behavior runs the behaviour checks one at a time and returns their parsed
// responses (nil where a request broke) for the isolation check.
func (r *runner) behavior(ctx context.Context) []*chatResponse {
	checks := BehaviorChecks()
	solo := make([]*chatResponse, len(checks))
	for i, ch := range checks {
		if ctx.Err() != nil {
			break
		}
		res, err := r.c.chat(ctx, ch.request(r.rep.Model))
		cr := CheckResult{ID: ch.ID, Seconds: res.seconds, Response: res.raw}
		if cr.Response == nil {
			cr.Response = nullJSON()
		}
		if err != nil {
			r.problem(fmt.Errorf("%s: %w", ch.ID, err))
			r.line("behavior", ch.ID, "ERROR", secs(res.seconds), err.Error())
		} else {
			r.successes++
			solo[i] = &res.parsed
			why := ch.judge(&res.parsed)
			cr.Pass = why == ""
			if cr.Pass {
				r.rep.BehaviorPasses++
				r.line("behavior", ch.ID, "pass", secs(res.seconds), "")
			} else {
				r.line("behavior", ch.ID, "FAIL", secs(res.seconds), why)
			}
		}
		r.rep.Behavior = append(r.rep.Behavior, cr)
	}
	return solo
}

func (r *runner) longContext(ctx context.Context, target int, rng *rand.Rand) {
	res, err := runLongContext(ctx, r.c, r.rep.Model, target, rng)
	r.rep.LongContext = append(r.rep.LongContext, res)
	detail := fmt.Sprintf("target %d, prepared %d prompt tokens", target, res.PreparedPromptTokens)
	switch {
	case err != nil:
		r.problem(err)
		r.line("long_context", res.ID, "ERROR", secs(res.Seconds), err.Error())
	case res.Pass:
		r.successes++
		r.rep.LongContextPasses++
		r.line("long_context", res.ID, "pass", secs(res.Seconds), detail)
	default:
		r.successes++
		r.line("long_context", res.ID, "FAIL", secs(res.Seconds), detail+"; the answer lacks the code")
	}
}

func (r *runner) decode(ctx context.Context) {
	completed := 0
	for i := 0; i <= decodeCountedRuns && ctx.Err() == nil; i++ {
		name := fmt.Sprintf("decode-run-%d", i)
		if i == 0 {
			name = "decode-warmup"
		}
		start := time.Now()
		run, err := r.c.decodeRun(ctx, r.rep.Model)
		if err != nil {
			r.problem(fmt.Errorf("%s: %w", name, err))
			r.line("decode", name, "ERROR", time.Since(start), err.Error())
			continue
		}
		r.successes++
		completed++
		if i == 0 {
			r.rep.InitialDecode = run
		} else {
			r.rep.DecodeRuns = append(r.rep.DecodeRuns, *run)
		}
		r.line("decode", name, "ok", time.Since(start),
			fmt.Sprintf("ttft %.1f ms, %.2f tok/s", run.TTFTMillis, run.DecodeTokensPerSecond))
	}
	r.rep.MedianDecodeTokensPerSecond = median(r.rep.DecodeRuns)
	identical := completed == decodeCountedRuns+1
	for _, run := range r.rep.DecodeRuns {
		identical = identical && run.Text == r.rep.InitialDecode.Text
	}
	r.rep.IdenticalGreedyCompletions = identical
	verdict := "pass"
	if !identical {
		verdict = "FAIL"
	}
	r.line("decode", "identical_greedy_completions", verdict, 0, "")
}

func (r *runner) isolation(ctx context.Context, solo []*chatResponse) {
	checks := BehaviorChecks()
	if solo == nil {
		solo = make([]*chatResponse, len(checks))
	}
	start := time.Now()
	ok, mismatches, err := runIsolation(ctx, r.c, r.rep.Model, checks, solo)
	if err != nil {
		r.problem(err)
		r.line("isolation", "request_isolation", "ERROR", time.Since(start), err.Error())
		return
	}
	r.successes++
	r.rep.RequestIsolationPassed = ok
	if ok {
		r.line("isolation", "request_isolation", "pass", time.Since(start),
			fmt.Sprintf("%d concurrent requests matched their solo answers", len(checks)))
		return
	}
	r.line("isolation", "request_isolation", "FAIL", time.Since(start), strings.Join(mismatches, "; "))
}

// problem records a request that broke.
func (r *runner) problem(err error) { r.problems = append(r.problems, err.Error()) }

// fail ends a run that could not start.
func (r *runner) fail(err error) (*Report, error) {
	r.rep.Status = StatusFailed
	r.rep.Error = err.Error()
	fmt.Fprintf(r.progress, "diag: %v\n", err)
	return r.rep, err
}

// finish sets the status from the problems met.
func (r *runner) finish() (*Report, error) {
	if len(r.problems) == 0 {
		return r.rep, nil
	}
	r.rep.Status = StatusPartial
	if r.successes == 0 {
		r.rep.Status = StatusFailed
	}
	r.rep.Error = strings.Join(r.problems, "; ")
	return r.rep, fmt.Errorf("diag: run %s: %d problem(s), first: %s", r.rep.Status, len(r.problems), r.problems[0])
}

// line writes one progress line.
func (r *runner) line(part, id, verdict string, d time.Duration, detail string) {
	s := fmt.Sprintf("diag: %-12s %-30s %-5s %7.2fs", part, id, verdict, d.Seconds())
	if detail != "" {
		if len(detail) > 200 {
			detail = detail[:200] + "..."
		}
		s += "  " + detail
	}
	fmt.Fprintln(r.progress, s)
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func nullJSON() json.RawMessage { return json.RawMessage("null") }

// FailedChecks lists the checks of r that failed among the parts that ran
// (nil parts means all): behaviour and long-context ids, and
// "identical_greedy_completions" and "request_isolation" when the decode and
// isolation parts ran.
func (r *Report) FailedChecks(parts []Part) []string {
	return r.failedChecks(partSet(parts))
}
