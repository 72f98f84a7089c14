package diag

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// WriteSummary writes a readable summary of r: one row per check (pass,
// seconds), the decode runs' figures and the run-level verdicts.
func WriteSummary(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "diag report: status %s, model %s at %s\n", r.Status, r.Model, r.BaseURL)
	if r.Error != "" {
		fmt.Fprintf(tw, "error: %s\n", r.Error)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "check\tpass\tseconds")
	for _, c := range r.Behavior {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\n", c.ID, yesNo(c.Pass), c.Seconds)
	}
	for _, c := range r.LongContext {
		fmt.Fprintf(tw, "%s (%d prompt tokens)\t%s\t%.3f\n", c.ID, c.PreparedPromptTokens, yesNo(c.Pass), c.Seconds)
	}
	fmt.Fprintf(tw, "behavior passes\t%d/%d\n", r.BehaviorPasses, len(r.Behavior))
	fmt.Fprintf(tw, "long-context passes\t%d/%d\n", r.LongContextPasses, len(r.LongContext))
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "decode run\tttft ms\tdecode tok/s\tdecode s\ttokens")
	if r.InitialDecode != nil {
		writeDecodeRow(tw, "warm-up (not counted)", r.InitialDecode)
	}
	for i := range r.DecodeRuns {
		writeDecodeRow(tw, fmt.Sprintf("run %d", i+1), &r.DecodeRuns[i])
	}
	fmt.Fprintf(tw, "median decode tok/s\t\t%.2f\n", r.MedianDecodeTokensPerSecond)
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "identical greedy completions\t%s\n", yesNo(r.IdenticalGreedyCompletions))
	fmt.Fprintf(tw, "request isolation\t%s\n", yesNo(r.RequestIsolationPassed))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("diag: write summary: %w", err)
	}
	return nil
}

func writeDecodeRow(w io.Writer, name string, d *DecodeRun) {
	tokens := "?"
	if u, ok := parseUsage(d.Usage); ok {
		tokens = fmt.Sprint(u.CompletionTokens)
	}
	fmt.Fprintf(w, "%s\t%.1f\t%.2f\t%.3f\t%s\n", name, d.TTFTMillis, d.DecodeTokensPerSecond, d.DecodeSeconds, tokens)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

// WriteCompare prints two reports side by side: status, model, pass/fail per
// check, pass counts, the determinism and isolation verdicts, and the median
// TTFT and decode tokens/s of the counted runs with the ratio b/a.
func WriteCompare(w io.Writer, nameA string, a *Report, nameB string, b *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%s\t%s\tb/a\n", nameA, nameB)
	fmt.Fprintf(tw, "status\t%s\t%s\n", a.Status, b.Status)
	fmt.Fprintf(tw, "model\t%s\t%s\n", a.Model, b.Model)
	fmt.Fprintf(tw, "base_url\t%s\t%s\n", a.BaseURL, b.BaseURL)
	for _, id := range checkIDs(a, b) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", id, verdictOf(a, id), verdictOf(b, id))
	}
	fmt.Fprintf(tw, "behavior passes\t%d/%d\t%d/%d\n", a.BehaviorPasses, len(a.Behavior), b.BehaviorPasses, len(b.Behavior))
	fmt.Fprintf(tw, "long-context passes\t%d/%d\t%d/%d\n", a.LongContextPasses, len(a.LongContext), b.LongContextPasses, len(b.LongContext))
	fmt.Fprintf(tw, "identical greedy completions\t%s\t%s\n", yesNo(a.IdenticalGreedyCompletions), yesNo(b.IdenticalGreedyCompletions))
	fmt.Fprintf(tw, "request isolation\t%s\t%s\n", yesNo(a.RequestIsolationPassed), yesNo(b.RequestIsolationPassed))
	ta, tb := medianTTFT(a.DecodeRuns), medianTTFT(b.DecodeRuns)
	fmt.Fprintf(tw, "median TTFT ms\t%.1f\t%.1f\t%s\n", ta, tb, ratio(tb, ta))
	da, db := a.MedianDecodeTokensPerSecond, b.MedianDecodeTokensPerSecond
	fmt.Fprintf(tw, "median decode tok/s\t%.2f\t%.2f\t%s\n", da, db, ratio(db, da))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("diag: write comparison: %w", err)
	}
	return nil
}

// checkIDs lists the check ids of a, then those only b has.
func checkIDs(a, b *Report) []string {
	var ids []string
	for _, r := range []*Report{a, b} {
		for _, c := range r.Behavior {
			if !slices.Contains(ids, c.ID) {
				ids = append(ids, c.ID)
			}
		}
		for _, c := range r.LongContext {
			if !slices.Contains(ids, c.ID) {
				ids = append(ids, c.ID)
			}
		}
	}
	return ids
}

func verdictOf(r *Report, id string) string {
	for _, c := range r.Behavior {
		if c.ID == id {
			return passFail(c.Pass)
		}
	}
	for _, c := range r.LongContext {
		if c.ID == id {
			return passFail(c.Pass)
		}
	}
	return "-"
}

func passFail(b bool) string {
	if b {
		return "pass"
	}
	return "FAIL"
}

func medianTTFT(runs []DecodeRun) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = r.TTFTMillis
	}
	return medianOf(v)
}

func ratio(num, den float64) string {
	if den == 0 || num == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", num/den)
}
