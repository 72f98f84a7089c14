package model

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// mtpGolden is the mtp part of vl-tiny's golden.json.
type mtpGolden struct {
	TeacherForced struct {
		Sequence   []int     `json:"sequence"`
		NextToken  int       `json:"next_token_after_sequence"`
		MTPTokens  []int     `json:"mtp_tokens"`
		MainHidden tensorRef `json:"main_hidden"`
		FCOut      tensorRef `json:"fc_out"`
		LayerOut   tensorRef `json:"layer_out"`
		G          tensorRef `json:"g"`
		Logits     tensorRef `json:"draft_logits"`
		Argmax     []int     `json:"draft_argmax"`
		MarginRel  []float64 `json:"draft_margin_rel"`
	} `json:"teacher_forced"`
	DraftChain struct {
		Prompt    []int     `json:"prompt"`
		MainNext  int       `json:"main_next_token"`
		Drafts    []int     `json:"drafts"`
		Logits    tensorRef `json:"draft_logits"`
		MarginRel []float64 `json:"draft_margin_rel"`
	} `json:"draft_chain"`
	Speculative struct {
		Prompt      []int     `json:"prompt"`
		Steps       int       `json:"steps"`
		PlainGreedy []int     `json:"plain_greedy"`
		Runs        []specRun `json:"runs"`
		Second      specRun   `json:"second_prompt"`
	} `json:"speculative"`
}

type specRun struct {
	Prompt []int `json:"prompt"` // second_prompt only
	K      int   `json:"k"`
	Tokens []int `json:"tokens"`
	Rounds int   `json:"rounds"`
	// Accepted is the number of accepted drafts over all rounds.
	Accepted int `json:"accepted_drafts"`
	Trace    []struct {
		Position    int       `json:"position"`
		Drafts      []int     `json:"drafts"`
		Margins     []float64 `json:"draft_top2_margin"`
		MainChoices []int     `json:"main_choices"`
		Accepted    int       `json:"accepted"`
		Committed   []int     `json:"committed"`
	} `json:"trace"`
}

// loadMTPGolden opens vl-tiny (or the checkpoint in dir, when given) with
// its MTP head and reads the mtp goldens.
func loadMTPGolden(t *testing.T, o Options, dir ...string) (*mtpGolden, *goldenModel, float64) {
	t.Helper()
	path := vlTiny
	if len(dir) > 0 {
		path = dir[0]
	}
	raw, err := os.ReadFile(filepath.Join(path, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		MTP        mtpGolden `json:"mtp"`
		Tolerances struct {
			MTP float64 `json:"mtp_logits_rel_max"`
		} `json:"recommended_tolerances"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	if top.Tolerances.MTP <= 0 || len(top.MTP.TeacherForced.Sequence) == 0 {
		t.Fatal("golden.json lacks the mtp goldens or their tolerance")
	}
	o.MTP = true
	m, err := Open(path, withCPU(t, o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	gm := &goldenModel{dir: path, m: m, tensors: openGoldenTensors(t, path)}
	return &top.MTP, gm, top.Tolerances.MTP
}

func TestMTPGoldens(t *testing.T) { runMTPGoldens(t, Options{}) }

func runMTPGoldens(t *testing.T, o Options, dir ...string) {
	g, gm, tol := loadMTPGolden(t, o, dir...)
	m := gm.m
	h := m.Config().HiddenSize
	ctx := context.Background()
	t.Run("teacher-forced", func(t *testing.T) {
		tf := g.TeacherForced
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		out, err := m.Step(ctx, []Input{{Seq: seq, Tokens: tf.Sequence, Logits: LastArgmax, Hidden: true}})
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Argmax != tf.NextToken {
			t.Errorf("main next token %d, golden %d", out[0].Argmax, tf.NextToken)
		}
		checkClose(t, "main hidden", out[0].Hidden, gm.floats(t, tf.MainHidden.Tensor), tol)
		ds, err := m.NewDraftSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		var fc, lo []float32
		d, err := m.DraftStepTrace(ctx, []DraftInput{{Seq: ds, Tokens: tf.MTPTokens, Hidden: out[0].Hidden, Logits: AllLogits}},
			func(stage int, rows []float32) {
				switch stage {
				case DraftTraceFC: // per pass: one input, passes in order
					fc = append(fc, rows...)
				case DraftTraceLayer:
					lo = append(lo, rows...)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		n := len(tf.MTPTokens)
		checkClose(t, "fc_out", fc[:n*h], gm.floats(t, tf.FCOut.Tensor), tol)
		checkClose(t, "layer_out", lo[:n*h], gm.floats(t, tf.LayerOut.Tensor), tol)
		checkClose(t, "g", d[0].Hidden, gm.floats(t, tf.G.Tensor), tol)
		want := gm.floats(t, tf.Logits.Tensor)
		v := m.Config().VocabSize
		worst := 0.0
		for p := range n {
			e := relErr(d[0].Logits[p*v:(p+1)*v], want[p*v:(p+1)*v])
			worst = max(worst, e)
			if !(e <= tol) {
				t.Errorf("draft logits at position %d: rel err %.3g > %.3g", p, e, tol)
			}
			if tf.MarginRel[p] >= 1e-3 && d[0].Argmax[p] != tf.Argmax[p] {
				t.Errorf("draft at position %d: %d, golden %d", p, d[0].Argmax[p], tf.Argmax[p])
			}
		}
		t.Logf("teacher-forced draft logits: worst per-position rel err %.3g; all %.3g", worst, relErr(d[0].Logits, want))
		if ds.Len() != n {
			t.Errorf("draft sequence length %d, want %d", ds.Len(), n)
		}
	})
	t.Run("chain", func(t *testing.T) {
		dc := g.DraftChain
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		out, err := m.Step(ctx, []Input{{Seq: seq, Tokens: dc.Prompt, Logits: LastArgmax, Hidden: true}})
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Argmax != dc.MainNext {
			t.Fatalf("main next token %d, golden %d", out[0].Argmax, dc.MainNext)
		}
		ds, err := m.NewDraftSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		want := gm.floats(t, dc.Logits.Tensor)
		v := m.Config().VocabSize
		in := DraftInput{Seq: ds, Tokens: append(dc.Prompt[1:len(dc.Prompt):len(dc.Prompt)], dc.MainNext), Hidden: out[0].Hidden, Logits: LastLogits}
		for j := range dc.Drafts {
			d, err := m.DraftStep(ctx, []DraftInput{in})
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "chain draft logits", d[0].Logits, want[j*v:(j+1)*v], tol)
			if d[0].Argmax[0] != dc.Drafts[j] && dc.MarginRel[j] >= 1e-3 {
				t.Errorf("draft %d = %d, golden %d", j+1, d[0].Argmax[0], dc.Drafts[j])
			}
			in = DraftInput{Seq: ds, Tokens: []int{d[0].Argmax[0]}, Hidden: d[0].Hidden, Logits: LastLogits}
		}
		if want := len(dc.Prompt) - 1 + len(dc.Drafts); ds.Len() != want {
			t.Errorf("draft sequence length %d, want %d", ds.Len(), want)
		}
	})
}

// TestMTPGoldensCut runs the MTP goldens with passes of 7 tokens, so that
// hidden rows and draft steps span several passes.
func TestMTPGoldensCut(t *testing.T) {
	runMTPGoldens(t, Options{MaxStepTokens: 7})
	runSpeculativeGoldens(t, Options{MaxStepTokens: 3})
}

// TestMTPErrors checks the head's refusals.
func TestMTPErrors(t *testing.T) {
	m, err := Open(vlTiny, withCPU(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.HasMTP() {
		t.Error("HasMTP without Options.MTP")
	}
	if _, err := m.NewDraftSequence(); err == nil {
		t.Error("NewDraftSequence without a head: no error")
	}
	if _, err := Open(filepath.Join("..", "testdata", "models", "small"), withCPU(t, Options{MTP: true})); err == nil {
		t.Error("Options.MTP on a checkpoint without mtp.*: no error")
	}
	seq, _ := m.NewSequence()
	other, _ := m.NewSequence()
	defer seq.Close()
	defer other.Close()
	if _, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: []int{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	rs, err := other.SaveRecurrent()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Free()
	if err := seq.Rewind(rs); err == nil {
		t.Error("Rewind to another sequence's state: no error")
	}
}
