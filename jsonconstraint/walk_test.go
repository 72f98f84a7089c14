package jsonconstraint

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/grammar/regex"
)

// TestSplitDFABruteForce checks SplitDFA's two sets against each token run
// through the DFA byte by byte, from every state of a few DFAs, with and
// without refused bytes, on a random vocabulary and the Qwen3 one.
func TestSplitDFABruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	tokens, eos := randomVocab(rng, 3000)
	small, err := NewVocab(tokens, eos)
	if err != nil {
		t.Fatal(err)
	}
	vocabs := []*Vocab{small}
	if q := loadQwen3(); q.err == nil {
		vocabs = append(vocabs, q.vocab)
	}
	var walkers []*regex.DFA
	for _, p := range []string{`[^\n]*`, `[ -~]*`, `[^x]*x?`} {
		walkers = append(walkers, mustDFA(t, p))
	}
	patterns := []string{`[^\n]*\n`, `[a-e]+x?`, `é|\p{Greek}{2}`, `(ab|a)*c`, `"[^"\\]*"`, `[0-9]{1,3}(\.[0-9]+)?`, `\w+`}
	for _, v := range vocabs {
		for _, p := range patterns {
			d := mustDFA(t, p)
			for _, refuse := range []*[4]uint64{nil, &stringRefused} {
				for s := range int32(d.States()) {
					checkSplit(t, v, d, s, refuse, p, walkers)
				}
			}
		}
	}
}

func mustDFA(t *testing.T, pattern string) *regex.DFA {
	t.Helper()
	n, err := regex.Parse(pattern, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := regex.Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkSplit checks SplitDFA from one state against the reference, and
// WalkExits over its exits with a few walker DFAs: taking subtrees whole
// by the walker's loops must not change the tokens it sets.
func checkSplit(t *testing.T, v *Vocab, d *regex.DFA, start int32, refuse *[4]uint64, pattern string, walkers []*regex.DFA) {
	t.Helper()
	stay := make([]uint64, v.Words())
	e := SplitDFA(v.All(), d, start, refuse, stay)
	walked := make([]uint64, v.Words())
	WalkExits(e, 0, func(*int, byte) bool { return true }, nil, walked)
	for k, w := range walkers {
		step := func(s *int32, b byte) bool {
			*s = w.Step(*s, b)
			return *s >= 0
		}
		plain, whole := make([]uint64, v.Words()), make([]uint64, v.Words())
		WalkExits(e, w.Start(), step, nil, plain)
		WalkExits(e, w.Start(), step, func(s *int32) (*[4]uint64, bool) { return w.Loops(*s), w.CharLoop(*s) }, whole)
		if !slices.Equal(plain, whole) {
			t.Fatalf("%s from state %d: walker %d sets other tokens when it takes subtrees whole", pattern, start, k)
		}
	}
	for id := range v.Size() {
		tok := v.TokenBytes(id)
		if len(tok) == 0 {
			continue
		}
		// The reference: read whole, or left after an accepting prefix.
		s, read, saw, exit := start, true, false, false
		for _, b := range tok {
			if refuse != nil && refuse[b>>6]&(1<<(b&63)) != 0 {
				read = false
				break
			}
			next := d.Step(s, b)
			if next < 0 {
				read, exit = false, saw
				break
			}
			s, saw = next, saw || d.Accept(next)
		}
		inStay := stay[id>>6]&(1<<(id&63)) != 0
		inWalk := walked[id>>6]&(1<<(id&63)) != 0
		if inStay != read {
			t.Fatalf("%s from state %d (refuse %v): token %q: in stay %v, read whole %v", pattern, start, refuse != nil, tok, inStay, read)
		}
		if exit && !inWalk || inWalk && !exit && !read {
			t.Fatalf("%s from state %d (refuse %v): token %q: in exits %v, leaves after a match %v", pattern, start, refuse != nil, tok, inWalk, exit)
		}
	}
}

// TestPatternMaskBruteForce checks every mask of random walks through
// schemas with patterns (whose in-string masks come from the patterns'
// DFAs and a walk of the tokens with a quote or backslash) against each
// token run through the automaton, on the Qwen3 vocabulary.
func TestPatternMaskBruteForce(t *testing.T) {
	q := loadQwen3()
	if q.err != nil {
		t.Skip(q.err)
	}
	rng := rand.New(rand.NewPCG(43, 44))
	for _, schema := range []string{
		testSchemas["patterns"],
		`{"type":"object","properties":{"email":{"type":"string","pattern":"^[a-z0-9._]+@[a-z0-9]+\\.[a-z]{2,4}$"},
			"name":{"type":"string","pattern":"^[A-Z][a-zé]+( [A-Z][a-zé]+)*$","maxLength":30}},"required":["email","name"]}`,
	} {
		g := mustCompile(t, schema)
		for range 2 {
			out := walk(t, rng, g, q.vocab, q.tokens, q.eos, 10+rng.IntN(20), func(int) bool { return true })
			checkDoc(t, schema, out)
		}
	}
}
