// Package diag exercises an OpenAI-compatible chat server over HTTP and
// writes a diagnostic report: behaviour checks with strict judges, a
// near-limit long-context retrieval, timed greedy streaming decode runs and a
// request-isolation check (concurrent requests must get exactly the answers
// they get alone).
//
// The report's JSON encoding has the keys and meanings of the seed report in
// testdata/seed (written by a diagnostic client against vLLM), so reports from
// different servers and engines can be compared side by side.
package diag

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Scope is the fixed statement of what a diagnostic run exercises; it is
// written verbatim into every report.
const Scope = "Exercise native serving behavior, near-limit prefill and greedy decode over HTTP.\n" +
	"Local diagnostics, not an official task benchmark or Unsloth Divergence-300.\n"

// TimingScope describes what the decode timings of a DecodeRun measure.
const TimingScope = "Client-observed first nonempty delta through finish event; excludes first output token"

// Report statuses.
const (
	StatusComplete = "complete" // every requested part ran to the end
	StatusPartial  = "partial"  // the run finished but some requests broke (see Report.Error)
	StatusFailed   = "failed"   // the server could not be reached or nothing could be measured
)

// Report is the result of one diagnostic run. Its JSON encoding matches the
// seed report's keys and types; Error is present only when Status is not
// StatusComplete.
type Report struct {
	// Status is StatusComplete, StatusPartial or StatusFailed.
	Status string `json:"status"`
	// Error says what broke when Status is not StatusComplete.
	Error string `json:"error,omitempty"`
	// Scope is the fixed statement Scope.
	Scope string `json:"scope"`
	// BaseURL is the server exercised.
	BaseURL string `json:"base_url"`
	// Model is the model id the server reported (or the one asked for).
	Model string `json:"model"`
	// Behavior holds the behaviour checks, in the order of BehaviorChecks.
	Behavior []CheckResult `json:"behavior"`
	// LongContext holds the long-context checks.
	LongContext []LongContextResult `json:"long_context"`
	// DecodeRuns holds the counted timed decode runs.
	DecodeRuns []DecodeRun `json:"decode_runs"`
	// InitialDecode is the warm-up decode run, not counted in the median;
	// nil when decode runs were not requested or the warm-up broke.
	InitialDecode *DecodeRun `json:"initial_decode"`
	// BehaviorPasses counts the passing behaviour checks.
	BehaviorPasses int `json:"behavior_passes"`
	// LongContextPasses counts the passing long-context checks.
	LongContextPasses int `json:"long_context_passes"`
	// MedianDecodeTokensPerSecond is the median of DecodeRuns'
	// DecodeTokensPerSecond (0 when there are none).
	MedianDecodeTokensPerSecond float64 `json:"median_decode_tokens_per_second"`
	// IdenticalGreedyCompletions reports that all decode runs, the warm-up
	// included, completed and produced the same text.
	IdenticalGreedyCompletions bool `json:"identical_greedy_completions"`
	// RequestIsolationPassed reports that the behaviour prompts sent
	// concurrently got exactly the answers they got when sent alone.
	RequestIsolationPassed bool `json:"request_isolation_passed"`
}

// CheckResult is one behaviour check.
type CheckResult struct {
	// ID names the check, e.g. "behavior-json".
	ID string `json:"id"`
	// Pass is the judge's verdict.
	Pass bool `json:"pass"`
	// Seconds is the client-observed duration of the request.
	Seconds float64 `json:"seconds"`
	// Response is the server's JSON response body, unmodified; null when the
	// server sent no JSON (the reason is in Report.Error).
	Response json.RawMessage `json:"response"`
}

// LongContextResult is one long-context check.
type LongContextResult struct {
	// ID names the check, e.g. "heldout-near-8k-retrieval".
	ID string `json:"id"`
	// Pass reports that the answer contains the buried code.
	Pass bool `json:"pass"`
	// Seconds is the client-observed duration of the answering request.
	Seconds float64 `json:"seconds"`
	// Response is the server's JSON response body, unmodified.
	Response json.RawMessage `json:"response"`
	// PreparedPromptTokens is the server-counted length of the prompt.
	PreparedPromptTokens int `json:"prepared_prompt_tokens"`
}

// DecodeRun is one timed, streamed greedy completion.
type DecodeRun struct {
	// Text is the concatenated content of the stream.
	Text string `json:"text"`
	// Usage is the server's usage object from the stream, unmodified.
	Usage json.RawMessage `json:"usage"`
	// TTFTMillis is the time from sending the request to the first non-empty
	// content delta, in milliseconds.
	TTFTMillis float64 `json:"ttft_ms"`
	// DecodeTokensPerSecond is (completion_tokens - 1) / DecodeSeconds.
	DecodeTokensPerSecond float64 `json:"decode_tokens_per_second"`
	// DecodeSeconds is the time from the first non-empty delta to the finish
	// event.
	DecodeSeconds float64 `json:"decode_seconds"`
	// TimingScope is the fixed statement TimingScope.
	TimingScope string `json:"timing_scope"`
}

// WriteJSON writes r as indented JSON without HTML escaping, so server text
// such as "<think>" stays readable.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("diag: encode report: %w", err)
	}
	return nil
}

// WriteFile writes r as JSON to the file at path.
func (r *Report) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("diag: write report: %w", err)
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("diag: write report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("diag: write report %s: %w", path, err)
	}
	return nil
}

// ReadFile reads a report written by WriteFile (or the seed report).
func ReadFile(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("diag: read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("diag: parse report %s: %w", path, err)
	}
	return &r, nil
}

// failedChecks lists the failed checks among the parts in ran.
func (r *Report) failedChecks(ran partSet) []string {
	var failed []string
	for _, c := range r.Behavior {
		if !c.Pass {
			failed = append(failed, c.ID)
		}
	}
	for _, c := range r.LongContext {
		if !c.Pass {
			failed = append(failed, c.ID)
		}
	}
	if ran.has(PartDecode) && !r.IdenticalGreedyCompletions {
		failed = append(failed, "identical_greedy_completions")
	}
	if ran.has(PartIsolation) && !r.RequestIsolationPassed {
		failed = append(failed, "request_isolation")
	}
	return failed
}
