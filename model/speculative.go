package model

import (
	"context"
	"errors"
	"fmt"
)

// SaveRecurrentTo copies the sequence's Gated DeltaNet state at its current
// position into rs, a state of the same model made by SaveRecurrent,
// overwriting it: a snapshot reused round after round (speculative
// decoding) instead of a new allocation each time.
func (s *Sequence) SaveRecurrentTo(rs *RecurrentState) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if rs == nil || rs.m != m || (rs.buf == nil && m.RecurrentBytes() > 0) {
		return errors.New("model: saving into a missing or freed recurrent state")
	}
	off := 0
	for l, t := range m.cfg.LayerTypes {
		if t != LinearAttention {
			continue
		}
		nc, nr := s.conv[l].Len(), s.rec[l].Len()
		m.be.Copy(rs.buf, off, s.conv[l], 0, nc)
		m.be.Copy(rs.buf, off+nc, s.rec[l], 0, nr)
		off += nc + nr
	}
	rs.pos, rs.delta, rs.src = s.n, s.ropeDelta, s
	return nil
}

// Rewind sets the sequence back to an earlier state of its own: rs must
// have been copied from s (SaveRecurrent or SaveRecurrentTo) at a position
// no later than Len(). The Gated DeltaNet state is copied back and the
// length cut to rs.Pos(); the keys and values of the earlier positions are
// those the sequence still holds (steps since wrote later positions only),
// and later steps overwrite the rest. Speculative decoding rewinds a
// sequence to before its verify step when drafts are rejected.
func (s *Sequence) Rewind(rs *RecurrentState) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	switch {
	case rs == nil || rs.m != m || (rs.buf == nil && m.RecurrentBytes() > 0):
		return errors.New("model: rewinding to a missing or freed recurrent state")
	case rs.src != s:
		return errors.New("model: rewinding to the state of another sequence")
	case rs.pos > s.n:
		return fmt.Errorf("model: rewinding a sequence of %d tokens to position %d", s.n, rs.pos)
	}
	off := 0
	for l, t := range m.cfg.LayerTypes {
		if t != LinearAttention {
			continue
		}
		nc, nr := s.conv[l].Len(), s.rec[l].Len()
		m.be.Copy(s.conv[l], 0, rs.buf, off, nc)
		m.be.Copy(s.rec[l], 0, rs.buf, off+nc, nr)
		off += nc + nr
	}
	s.n, s.ropeDelta = rs.pos, rs.delta
	return nil
}

// Speculator runs greedy speculative decoding of one sequence with the MTP
// head as drafter (vLLM's "mtp" method, greedy acceptance). A round at
// committed length n, the main model having consumed x_0..x_{n-1} and
// chosen x_n:
//
//   - drafts: d_1 is the head's argmax at position n-1 (left by the
//     previous round or Prefill); d_j (j > 1) comes from (d_{j-1}, g) at
//     position n+j-2, g the previous draft step's mtp.norm output;
//   - verify: the main model runs [x_n, d_1..d_k] at positions n..n+k in one
//     step, choosing c_0..c_k;
//   - accept: a is the longest prefix with d_i == c_{i-1}; d_1..d_a and c_a
//     are committed (the output equals plain greedy decoding);
//   - roll back: when a < k the main sequence is rewound to its state
//     before the verify step and fed x_n, d_1..d_a again (its Gated
//     DeltaNet state cannot be cut back otherwise); the head's cache is cut
//     to n entries and the head re-run at positions n..n+a on (d_1..d_a,
//     c_a) with the verify step's hidden rows of x_n, d_1..d_a, whose
//     argmax at n+a is the next round's d_1.
type Speculator struct {
	m    *Model
	seq  *Sequence
	ds   *DraftSequence
	snap *RecurrentState

	started bool
	next    int       // x_n: chosen by the main model, not yet fed to it
	draft   int       // the head's argmax at position n-1: the next d_1
	g       []float32 // the head's g at position n-1
	// Passes counts the main model's steps: one per prompt, one verify
	// per round, one re-feed per round with a rejected draft.
	Passes int
}

// SpecRound is the trace of one speculative round.
type SpecRound struct {
	Position    int   // n: the position x_n is fed at
	Drafts      []int // d_1..d_k
	MainChoices []int // c_0..c_k
	Accepted    int   // a
	Committed   []int // d_1..d_a, c_a
}

// NewSpeculator returns a speculator for seq, which must be empty; it owns
// a draft sequence and a snapshot until Close (seq stays the caller's).
func (m *Model) NewSpeculator(seq *Sequence) (*Speculator, error) {
	if seq == nil || seq.m != m {
		return nil, errors.New("model: speculator needs a sequence of this model")
	}
	if seq.Len() != 0 {
		return nil, fmt.Errorf("model: speculator needs an empty sequence, this one holds %d tokens", seq.Len())
	}
	ds, err := m.NewDraftSequence()
	if err != nil {
		return nil, err
	}
	ds.SetRopeDelta(seq.RopeDelta())
	snap, err := seq.SaveRecurrent()
	if err != nil {
		ds.Close()
		return nil, err
	}
	return &Speculator{m: m, seq: seq, ds: ds, snap: snap}, nil
}

// Close frees the draft sequence and the snapshot.
func (sp *Speculator) Close() {
	sp.ds.Close()
	sp.snap.Free()
}

// Prefill feeds the prompt to the main model and runs the head over every
// prompt position (tokens shifted left by one, the main model's choice
// last); it returns the main model's greedy next token.
func (sp *Speculator) Prefill(ctx context.Context, prompt []int) (int, error) {
	if sp.started {
		return 0, errors.New("model: speculator prefilled twice")
	}
	out, err := sp.m.Step(ctx, []Input{{Seq: sp.seq, Tokens: prompt, Logits: LastArgmax, Hidden: true}})
	if err != nil {
		return 0, err
	}
	sp.Passes++
	next := out[0].Argmax
	toks := append(append(make([]int, 0, len(prompt)), prompt[1:]...), next)
	d, err := sp.m.DraftStep(ctx, []DraftInput{{Seq: sp.ds, Tokens: toks, Hidden: out[0].Hidden, Logits: LastArgmax}})
	if err != nil {
		return 0, err
	}
	sp.started, sp.next, sp.draft, sp.g = true, next, d[0].Argmax[0], d[0].Hidden
	return next, nil
}

// Round drafts k tokens, verifies them and commits 1 to k+1 tokens
// (Speculator). After it the main model has consumed everything committed
// but the last token.
func (sp *Speculator) Round(ctx context.Context, k int) (SpecRound, error) {
	if !sp.started {
		return SpecRound{}, errors.New("model: speculator round before Prefill")
	}
	if k < 1 {
		return SpecRound{}, fmt.Errorf("model: %d speculative tokens", k)
	}
	m := sp.m
	h := m.cfg.HiddenSize
	n := sp.seq.Len()
	r := SpecRound{Position: n, Drafts: []int{sp.draft}}
	g := sp.g
	for len(r.Drafts) < k {
		d, err := m.DraftStep(ctx, []DraftInput{{Seq: sp.ds, Tokens: r.Drafts[len(r.Drafts)-1:], Hidden: g, Logits: LastArgmax}})
		if err != nil {
			return r, err
		}
		r.Drafts = append(r.Drafts, d[0].Argmax[0])
		g = d[0].Hidden
	}
	if err := sp.seq.SaveRecurrentTo(sp.snap); err != nil {
		return r, err
	}
	verify := append([]int{sp.next}, r.Drafts...)
	out, err := m.Step(ctx, []Input{{Seq: sp.seq, Tokens: verify, Logits: AllArgmax, Hidden: true, Decode: true}})
	if err != nil {
		return r, err
	}
	sp.Passes++
	r.MainChoices = out[0].Argmaxes
	a := 0
	for a < k && r.Drafts[a] == r.MainChoices[a] {
		a++
	}
	r.Accepted = a
	r.Committed = append(append([]int{}, r.Drafts[:a]...), r.MainChoices[a])
	if a < k {
		if err := sp.seq.Rewind(sp.snap); err != nil {
			return r, err
		}
		if _, err := m.Step(ctx, []Input{{Seq: sp.seq, Tokens: verify[:a+1], Logits: NoLogits, Decode: true}}); err != nil {
			return r, err
		}
		sp.Passes++
	}
	if err := sp.ds.Truncate(n); err != nil {
		return r, err
	}
	d, err := m.DraftStep(ctx, []DraftInput{{Seq: sp.ds, Tokens: r.Committed, Hidden: out[0].Hidden[:(a+1)*h], Logits: LastArgmax}})
	if err != nil {
		return r, err
	}
	sp.next, sp.draft, sp.g = r.MainChoices[a], d[0].Argmax[0], d[0].Hidden
	return r, nil
}
