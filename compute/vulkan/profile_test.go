//go:build cgo

package vulkan

import (
	"context"
	"testing"
)

// TestProfile checks the per-operation device times: every dispatch and
// transfer is counted under its shader, times are positive, a backend
// without Options.Profile reports nothing, and ResetProfile clears.
func TestProfile(t *testing.T) {
	b := newTestBackend(t, Options{Profile: true})
	defer b.Close()
	ctx := context.Background()
	x, err := b.NewBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.NewBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.ResetProfile()
	for i := 0; i < 5; i++ {
		b.Add(x, y, 1<<16)
	}
	b.Copy(y, 0, x, 0, 1<<16)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]ProfileEntry{}
	for _, e := range b.Profile() {
		got[e.Op] = e
	}
	if e := got["eltwise"]; e.Count != 5 || e.Time <= 0 {
		t.Errorf("eltwise: %+v, want 5 dispatches with positive time (all: %+v)", e, b.Profile())
	}
	if e := got["copy"]; e.Count != 1 || e.Time <= 0 {
		t.Errorf("copy: %+v, want 1 transfer with positive time", e)
	}
	b.ResetProfile()
	if p := b.Profile(); len(p) != 0 {
		t.Errorf("after ResetProfile: %+v", p)
	}

	plain := newTestBackend(t, Options{})
	defer plain.Close()
	plain.Add(x.(*buffer), x.(*buffer), 0)
	if p := plain.Profile(); p != nil {
		t.Errorf("without Options.Profile: %+v", p)
	}
}

// TestBarrierElision checks that independent dispatches are recorded
// without a barrier between them and dependent ones with one (the
// validation layer's synchronization checks, on in tests, catch a missing
// one; this catches needless ones).
func TestBarrierElision(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	ctx := context.Background()
	var bufs [4]*buffer
	for i := range bufs {
		x, err := b.NewBuffer(4096)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = x.(*buffer)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.Add(bufs[0], bufs[3], 4096) // begins a command buffer (one barrier)
	start := b.rec.barriers
	b.Add(bufs[1], bufs[3], 4096) // reads bufs[3] too, writes another buffer
	b.Add(bufs[2], bufs[3], 4096)
	if n := b.rec.barriers - start; n != 0 {
		t.Errorf("independent dispatches recorded %d barriers", n)
	}
	b.Add(bufs[3], bufs[0], 4096) // writes what earlier ones read, reads what one wrote
	if n := b.rec.barriers - start; n != 1 {
		t.Errorf("a dependent dispatch recorded %d barriers, want 1", n)
	}
	b.Add(bufs[1], bufs[2], 4096) // reads bufs[2], written before the barrier
	if n := b.rec.barriers - start; n != 1 {
		t.Errorf("a dispatch on work before the latest barrier recorded %d more barriers", n-1)
	}
	// Copies into disjoint ranges of one buffer are independent; into
	// overlapping ranges they are not.
	start = b.rec.barriers
	b.Copy(bufs[3], 0, bufs[2], 0, 1024)
	b.Copy(bufs[3], 1024, bufs[2], 1024, 1024)
	if n := b.rec.barriers - start; n != 1 { // bufs[3] was read above
		t.Errorf("copies into disjoint ranges recorded %d barriers, want 1", n)
	}
	b.Copy(bufs[3], 1500, bufs[2], 0, 100)
	if n := b.rec.barriers - start; n != 2 {
		t.Errorf("a copy into an overlapping range recorded %d barriers, want 2", n)
	}
	got := make([]float32, 4096)
	if err := b.Download(ctx, got, bufs[1], 0); err != nil {
		t.Fatal(err)
	}
}

func TestSpanSet(t *testing.T) {
	var ss spanSet
	if ss.overlaps(1, span{0, 10}) {
		t.Error("empty set overlaps")
	}
	ss.add(1, span{10, 20})
	ss.add(1, span{40, 50})
	for _, c := range []struct {
		s    span
		want bool
	}{{span{0, 10}, false}, {span{0, 11}, true}, {span{19, 41}, true}, {span{20, 40}, false}, {span{49, 60}, true}, {span{50, 60}, false}} {
		if got := ss.overlaps(1, c.s); got != c.want {
			t.Errorf("overlaps(%v) = %v, want %v", c.s, got, c.want)
		}
	}
	if ss.overlaps(2, span{10, 20}) {
		t.Error("ranges of an earlier epoch overlap")
	}
	ss.add(2, span{100, 110})
	if ss.overlaps(2, span{10, 20}) || !ss.overlaps(2, span{105, 106}) {
		t.Error("a new epoch did not start afresh")
	}
	for i := 0; i < maxSpans+3; i++ {
		ss.add(2, span{uint64(200 + 20*i), uint64(210 + 20*i)})
	}
	if len(ss.spans) > maxSpans || !ss.overlaps(2, span{105, 106}) || !ss.overlaps(2, span{205, 206}) {
		t.Errorf("after merging: %v", ss.spans)
	}
}

// TestRecordAllocs checks that recording a dispatch allocates nothing on
// the Go heap once its pipeline exists: a decode step records hundreds.
func TestRecordAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	b := newTestBackend(t, Options{})
	defer b.Close()
	x, err := b.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	b.Add(x, y, 64)
	if n := testing.AllocsPerRun(200, func() { b.Add(x, y, 64) }); n != 0 {
		t.Errorf("recording an Add allocates %.1f times", n)
	}
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}
