package jsonconstraint

import (
	"testing"
)

// BenchmarkApplyMask measures one mask over the Qwen3 vocabulary (151,669
// ids) at typical points of a document. "fresh" runs on a new clone each
// time, so no cached mask helps; "cached" repeats the same state, as inside
// a long string.
func BenchmarkApplyMask(b *testing.B) {
	q := loadQwen3()
	if q.err != nil {
		b.Fatal(q.err)
	}
	person := mustCompile(b, testSchemas["person"])
	cases := []struct {
		name   string
		g      *Grammar
		prefix string
	}{
		{"object_start", AnyObject(), ``},
		{"schema_key", person, `{"name":"Ada",`},
		{"string_value", person, `{"name":"Ad`},
		{"any_string_value", AnyObject(), `{"text":"Some words`},
		{"after_value", person, `{"name":"Ada"`},
		{"number", person, `{"age":3`},
	}
	logits := make([]float32, len(q.tokens))
	for _, tc := range cases {
		c := NewConstraint(tc.g, q.vocab)
		if tc.prefix != "" {
			a := NewAcceptor(tc.g)
			if !a.Push([]byte(tc.prefix)) {
				b.Fatalf("prefix %q rejected", tc.prefix)
			}
			c.s = a.s
		}
		b.Run(tc.name+"/fresh", func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = c.Clone().ApplyMask(logits)
			}
			b.ReportMetric(float64(n), "allowed")
		})
		b.Run(tc.name+"/budget", func(b *testing.B) {
			// A budget a few tokens above the completion: every token
			// that could break it is checked.
			b.ReportAllocs()
			n := 0
			left := len(c.Completion()) + 4
			for b.Loop() {
				d := c.Clone()
				d.Budget(left, nil)
				n = d.ApplyMask(logits)
			}
			b.ReportMetric(float64(n), "allowed")
		})
		b.Run(tc.name+"/cached", func(b *testing.B) {
			b.ReportAllocs()
			c.ApplyMask(logits)
			for b.Loop() {
				c.ApplyMask(logits)
			}
		})
	}
}

// BenchmarkAccept measures advancing by one typical token.
func BenchmarkAccept(b *testing.B) {
	q := loadQwen3()
	if q.err != nil {
		b.Fatal(q.err)
	}
	c := NewConstraint(AnyObject(), q.vocab)
	for _, id := range []int{90, 1} { // '{' '"'
		if err := c.Accept(id - 0); err != nil {
			b.Skip("token ids differ from the expected '{' and '\"'")
		}
	}
	tok := -1
	for id, t := range q.tokens {
		if string(t) == "hello" {
			tok = id
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		d := *c
		if err := d.Accept(tok); err != nil {
			b.Fatal(err)
		}
	}
}
