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
