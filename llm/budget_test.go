package llm

import "testing"

// A thinking budget is lowered with the answer it belongs to.
func TestLowerBudget(t *testing.T) {
	for _, c := range []struct{ budget, asked, max, want int }{
		{0, 0, 100, 0},           // no budget stays none
		{50, 100, 100, 50},       // nothing lowered
		{50, 200, 100, 25},       // max_tokens halved: the budget too
		{3, 1000, 10, 1},         // never below one token
		{64, 0, 48, 24},          // no max_tokens asked, the budget would take the answer: half of it
		{32, 0, 48, 32},          // fits
		{200, 100, 100, 200},     // the request's own choice, not lowered
		{8000, 65536, 48, 5},     // an agent's budget under --max-tokens 48
		{1 << 30, 1 << 31, 4, 2}, // no overflow
	} {
		if got := lowerBudget(c.budget, c.asked, c.max); got != c.want {
			t.Errorf("lowerBudget(%d, %d, %d) = %d, want %d", c.budget, c.asked, c.max, got, c.want)
		}
	}
}
