package model

import (
	"context"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/randmodel"
)

// TestSpeculativeGoldens runs greedy speculative decoding with the MTP head
// for k = 1..4 and the second prompt, and checks every round's trace and
// that the output is plain greedy's.
func TestSpeculativeGoldens(t *testing.T) { runSpeculativeGoldens(t, Options{}) }

func runSpeculativeGoldens(t *testing.T, o Options, dir ...string) {
	g, gm, _ := loadMTPGolden(t, o, dir...)
	m := gm.m
	sg := g.Speculative
	// Plain greedy, one token per step, as the reference.
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Seq: seq, Tokens: sg.Prompt, Logits: LastArgmax}
	var plain []int
	for len(plain) < sg.Steps {
		out, err := m.Step(context.Background(), []Input{in})
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, out[0].Argmax)
		in = Input{Seq: seq, Tokens: []int{out[0].Argmax}, Logits: LastArgmax, Decode: true}
	}
	seq.Close()
	if !slices.Equal(plain, sg.PlainGreedy) {
		t.Fatalf("plain greedy %v, golden %v", plain, sg.PlainGreedy)
	}
	runs := slices.Clone(sg.Runs)
	second := sg.Second
	if len(second.Prompt) > 0 { // moe-tiny's goldens have none
		runs = append(runs, second)
	}
	for i, run := range runs {
		prompt, steps := sg.Prompt, sg.Steps
		name := "k=" + string(rune('0'+run.K))
		if i == len(sg.Runs) {
			prompt, steps, name = second.Prompt, len(second.Tokens), "second-prompt"
		}
		t.Run(name, func(t *testing.T) {
			checkSpecRun(t, m, prompt, steps, run)
		})
	}
}

func checkSpecRun(t *testing.T, m *Model, prompt []int, steps int, run specRun) {
	ctx := context.Background()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	sp, err := m.NewSpeculator(seq)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	next, err := sp.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{next}
	rounds, accepted := 0, 0
	for len(tokens) < steps {
		r, err := sp.Round(ctx, run.K)
		if err != nil {
			t.Fatal(err)
		}
		if rounds < len(run.Trace) {
			w := run.Trace[rounds]
			if r.Position != w.Position || !slices.Equal(r.Drafts, w.Drafts) || !slices.Equal(r.MainChoices, w.MainChoices) ||
				r.Accepted != w.Accepted || !slices.Equal(r.Committed, w.Committed) {
				t.Errorf("round %d: position %d drafts %v choices %v accepted %d committed %v; golden %d %v %v %d %v",
					rounds, r.Position, r.Drafts, r.MainChoices, r.Accepted, r.Committed,
					w.Position, w.Drafts, w.MainChoices, w.Accepted, w.Committed)
			}
		}
		rounds++
		accepted += r.Accepted
		tokens = append(tokens, r.Committed...)
		if seq.Len() != r.Position+r.Accepted+1 || sp.ds.Len() != seq.Len() {
			t.Fatalf("after round %d: main length %d, draft length %d, want both %d", rounds, seq.Len(), sp.ds.Len(), r.Position+r.Accepted+1)
		}
	}
	tokens = tokens[:steps]
	if !slices.Equal(tokens, run.Tokens) {
		t.Errorf("tokens %v, golden %v", tokens, run.Tokens)
	}
	if rounds != len(run.Trace) || accepted != run.Accepted {
		t.Errorf("%d rounds, %d accepted drafts; golden %d, %d", rounds, accepted, len(run.Trace), run.Accepted)
	}
	t.Logf("k=%d: %d tokens in %d rounds, %d drafts accepted, %d main passes", run.K, len(tokens), rounds, accepted, sp.Passes)
}

// TestSpeculativeRandomModel checks speculative decoding on a random
// checkpoint with an MTP head (make-random --mtp) and an untied lm_head:
// the output equals plain greedy for k = 1..4.
func TestSpeculativeRandomModel(t *testing.T) {
	shape, err := randmodel.LookupShape("small")
	if err != nil {
		t.Fatal(err)
	}
	shape.Layers = 4
	dir := t.TempDir()
	if err := randmodel.Write(dir, shape, randmodel.Options{Seed: 7, MTP: true}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir, withCPU(t, Options{MTP: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.HasMTP() || m.Config().TieWordEmbeddings {
		t.Fatalf("HasMTP %v, tied %v", m.HasMTP(), m.Config().TieWordEmbeddings)
	}
	ctx := context.Background()
	prompt := []int{11, 402, 93, 1207, 5, 3001, 77, 640}
	const steps = 20
	seq, _ := m.NewSequence()
	in := Input{Seq: seq, Tokens: prompt, Logits: LastArgmax}
	var plain []int
	for len(plain) < steps {
		out, err := m.Step(ctx, []Input{in})
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, out[0].Argmax)
		in = Input{Seq: seq, Tokens: []int{out[0].Argmax}, Logits: LastArgmax, Decode: true}
	}
	seq.Close()
	for k := 1; k <= 4; k++ {
		seq, _ := m.NewSequence()
		sp, err := m.NewSpeculator(seq)
		if err != nil {
			t.Fatal(err)
		}
		next, err := sp.Prefill(ctx, prompt)
		if err != nil {
			t.Fatal(err)
		}
		tokens, accepted := []int{next}, 0
		for len(tokens) < steps {
			r, err := sp.Round(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, r.Committed...)
			accepted += r.Accepted
		}
		if !slices.Equal(tokens[:steps], plain) {
			t.Errorf("k=%d: speculative %v, plain greedy %v", k, tokens[:steps], plain)
		}
		t.Logf("k=%d: %d drafts accepted, %d main passes for %d tokens", k, accepted, sp.Passes, steps)
		sp.Close()
		seq.Close()
	}
}
