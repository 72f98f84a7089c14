package grammar

import (
	"testing"
)

// BenchmarkMaskFresh measures one mask computed from scratch (no cached
// mask) over the Qwen3 vocabulary.
func BenchmarkMaskFresh(b *testing.B) {
	q := qwen3(b)
	for _, c := range []struct{ name, pattern, prefix string }{
		{"free_text", `[^\n]*\n`, "Some words"},
		{"phone", `\(\d{3}\) \d{3}-\d{4}`, "(555) 1"},
		{"words", `[a-z]+( [a-z]+)*\.`, "hello wor"},
	} {
		g := mustRegex(b, c.pattern)
		m := g.NewMatcher(q.vocab)
		if !m.AcceptBytes([]byte(c.prefix)) {
			b.Fatalf("%q rejects %q", c.pattern, c.prefix)
		}
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				g.masks = nil
				n = m.Allowed()
			}
			b.ReportMetric(float64(n), "allowed")
		})
	}
}

// BenchmarkApplyMask measures setting the disallowed logits of a row to
// -Inf for masks of a few, many and most tokens.
func BenchmarkApplyMask(b *testing.B) {
	q := qwen3(b)
	logits := make([]float32, q.vocab.Size())
	for _, c := range []struct{ name, pattern, prefix string }{
		{"few", `\(\d{3}\) \d{3}-\d{4}`, "(555) 1"},
		{"words", `[a-z]+( [a-z]+)*\.`, "hello wor"},
		{"most", `[^\n]*\n`, "Some words"},
	} {
		g := mustRegex(b, c.pattern)
		m := g.NewMatcher(q.vocab)
		m.AcceptBytes([]byte(c.prefix))
		m.AllowedBits()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				m.ApplyMask(logits)
			}
		})
	}
}

// BenchmarkTerminalInfo measures the first-time work of a terminal state
// (the tokens it reads whole, and where tokens leave it) over the Qwen3
// vocabulary, for a state that reads almost everything and one that reads
// little.
func BenchmarkTerminalInfo(b *testing.B) {
	q := qwen3(b)
	for _, c := range []struct{ name, pattern string }{
		{"line", `[^\n]*\n`},
		{"digits", `[0-9]+`},
	} {
		g := mustRegex(b, c.pattern)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g.infos = nil
				g.info(q.vocab, 0, g.terms[0].Start())
			}
		})
	}
}
