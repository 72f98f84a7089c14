package engine

import (
	"slices"
	"testing"
)

// TestSpeculativeBackoff runs a long greedy request of vl-tiny whose every
// window of rounds is judged not to pay: it speculates for BackoffWindow
// rounds, pauses BackoffPause plain steps, speculates again (the head
// caught up over the pause) and pauses twice as long; its tokens are plain
// greedy's throughout. Without back-off, or where rounds pay, it never
// pauses.
func TestSpeculativeBackoff(t *testing.T) {
	g := loadSpecGolden(t)
	m := openMTPModel(t, "vl-tiny")
	const n = 300
	want, _, _ := generate(t, newEngine(t, m, Config{}), Request{Prompt: g.Prompt, MaxTokens: n, IgnoreEOS: true})
	for _, k := range []int{1, 3} {
		// Rounds by generated count: the rounds of the two windows fall
		// before and after the first pause.
		var starts []int
		sp := Speculative{Method: "mtp", Tokens: k, backoffAt: 100, Rewrite: func(gen int, _ []int) { starts = append(starts, gen) }}
		got, _, s := generate(t, newEngine(t, m, Config{Speculative: sp}), Request{Prompt: g.Prompt, MaxTokens: n, IgnoreEOS: true})
		d, a := s.SpecTokens()
		if !slices.Equal(got, want) {
			t.Fatalf("k=%d: %v, plain %v", k, got, want)
		}
		if len(starts) != 2*BackoffWindow || d != 2*BackoffWindow*k {
			t.Fatalf("k=%d: %d rounds (%d drafts) at %v; want %d", k, len(starts), d, starts, 2*BackoffWindow)
		}
		// The pause: BackoffPause plain steps of one token each, after the
		// last round's 1 to k+1 tokens.
		if gap := starts[BackoffWindow] - starts[BackoffWindow-1]; gap < BackoffPause+1 || gap > BackoffPause+k+1 {
			t.Errorf("k=%d: rounds at %v: %d tokens from the window's last round to the next, want %d plus the round's", k, starts, gap, BackoffPause)
		}
		// The head drafts well after the pause (here the first window's
		// rounds, one token apart, accepted nothing): it caught up.
		if starts[BackoffWindow-1]-starts[0] == BackoffWindow-1 && a == 0 {
			t.Errorf("k=%d: no draft accepted after the pause", k)
		}
		t.Logf("k=%d: rounds at %v, %d of %d drafts accepted", k, starts, a, d)

		// No back-off, or a break-even every window passes: no pause.
		for _, sp := range []Speculative{{Method: "mtp", Tokens: k, NoBackoff: true, backoffAt: 100}, {Method: "mtp", Tokens: k, backoffAt: 0.5}} {
			got, _, s := generate(t, newEngine(t, m, Config{Speculative: sp}), Request{Prompt: g.Prompt, MaxTokens: n, IgnoreEOS: true})
			d, a := s.SpecTokens()
			rounds := d / k
			if !slices.Equal(got, want) || rounds+a < n-1 {
				t.Errorf("k=%d %+v: %d rounds, %d accepted for %d tokens (some plain)", k, sp, rounds, a, n)
			}
		}
	}
}
