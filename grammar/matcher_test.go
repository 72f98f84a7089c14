package grammar

import (
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/grammar/regex"
)

// TestMaskBruteForce checks the trie walk's mask against every token of
// the vocabulary run through the matcher one by one, on random states of
// random walks through the grammars.
func TestMaskBruteForce(t *testing.T) {
	q := qwen3(t)
	grammars := map[string]*Grammar{
		"regex":  mustRegex(t, `(\d{3}-)?[a-z ]{2,8}(, [A-Z]\w*)*\.`),
		"choice": mustChoice(t, []string{"yes", "no", "maybe so"}),
		"nested": mustRules(t, []Rule{
			{"root", regex.Concat(regex.Lit("<"), ref("item"), regex.Repeat(regex.Concat(regex.Lit(","), ref("item")), 0, -1), regex.Lit(">"))},
			{"item", regex.Alt(mustParse(t, `[a-z]+`), regex.Concat(regex.Lit("("), ref("root"), regex.Lit(")")))},
		}),
	}
	rng := rand.New(rand.NewPCG(7, 8))
	size := q.vocab.Size()
	for name, g := range grammars {
		for trial := 0; trial < 3; trial++ {
			m := g.NewMatcher(q.vocab)
			for step := 0; step < 10; step++ {
				bits := m.AllowedBits()
				var allowed []int
				for id := 0; id < size; id++ {
					want := m.Clone().Accept(id) == nil
					got := bits[id>>6]&(1<<(id&63)) != 0
					if got != want {
						t.Fatalf("%s, trial %d step %d: token %d (%q): mask %v, Accept %v", name, trial, step, id, q.vocab.TokenBytes(id), got, want)
					}
					if want {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					t.Fatalf("%s: dead end at step %d", name, step)
				}
				id := allowed[rng.IntN(len(allowed))]
				if err := m.Accept(id); err != nil {
					t.Fatal(err)
				}
				if m.Finished() {
					break
				}
			}
		}
	}
}

func ref(name string) *regex.Node { return &regex.Node{Op: regex.OpRef, Name: name} }

func mustParse(t testing.TB, pattern string) *regex.Node {
	n, err := regex.Parse(pattern, false)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustRules(t testing.TB, rules []Rule) *Grammar {
	g, err := Build(rules, "root")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustChoice(t testing.TB, choices []string) *Grammar {
	g, err := Choice(choices)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
