//go:build cgo

package vulkan

import (
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
)

// TestArenaAllocationsBounded loads as many weights as two layers of a
// 35B-A3B-shaped mixture of experts hold (256 experts × 3 matrices each,
// at a smaller width) and checks that the VkDeviceMemory allocations stay
// bounded by the bytes over the block size, not by the tensor count; that
// every weight reads back its own bytes (no two share a range); and that
// freeing them gives every block back.
func TestArenaAllocationsBounded(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	// Small blocks, so that a small test fills many.
	b.arena.blockBytes, b.arena.minBytes = 1<<20, 256<<10
	if _, err := b.readInto(t.Context(), b.dummy, 0, 16); err != nil { // makes the readback buffer
		t.Fatal(err)
	}
	base := b.MemoryAllocations()
	rng := rand.New(rand.NewPCG(7, 8))
	const layers, experts = 2, 256
	type loaded struct {
		w    *weight
		data []byte
	}
	var ws []loaded
	var bytes int64
	for l := range layers {
		for e := range experts {
			for m, shape := range [][2]int{{64, 256}, {64, 256}, {256, 64}} {
				// Odd row counts too, so sizes are not all multiples of
				// the alignment.
				rows, cols := shape[0]+(e+m+l)%3, shape[1]
				data := make([]byte, rows*cols*2)
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				w, err := b.LoadWeight("expert", compute.BF16, rows, cols, data)
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, loaded{w.(*weight), data})
				bytes += int64(len(data))
			}
		}
	}
	got := b.MemoryAllocations() - base
	limit := int(bytes/b.BlockBytes()) + 1 + 2 // the doubling first blocks
	t.Logf("%d weights, %d MiB: %d allocations (block %d MiB)", len(ws), bytes>>20, got, b.BlockBytes()>>20)
	if got > limit {
		t.Errorf("%d weights of %d bytes made %d allocations, want at most %d", len(ws), bytes, got, limit)
	}
	// Every weight reads back its own bytes.
	for i, l := range ws {
		if i%97 != 0 && i != len(ws)-1 {
			continue
		}
		c := l.w.chunks[0].raw
		back, err := b.readInto(t.Context(), c, 0, uint64(len(l.data)))
		if err != nil {
			t.Fatal(err)
		}
		for j := range l.data {
			if back[j] != l.data[j] {
				t.Fatalf("weight %d byte %d reads %d, want %d", i, j, back[j], l.data[j])
			}
		}
	}
	// Ranges never overlap within a block.
	type rng2 struct{ lo, hi uint64 }
	byBlock := map[*memBlock][]rng2{}
	for _, l := range ws {
		r := l.w.chunks[0].raw
		if r.block == nil {
			t.Fatalf("weight of %d bytes has memory of its own", r.size)
		}
		if r.off%b.arena.align != 0 {
			t.Errorf("offset %d not aligned to %d", r.off, b.arena.align)
		}
		for _, o := range byBlock[r.block] {
			if r.off < o.hi && o.lo < r.off+r.alloc {
				t.Fatalf("ranges [%d, %d) and [%d, %d) of one block overlap", r.off, r.off+r.alloc, o.lo, o.hi)
			}
		}
		byBlock[r.block] = append(byBlock[r.block], rng2{r.off, r.off + r.alloc})
	}
	// Free half in a scattered order, then load again into the holes:
	// no new blocks.
	before := b.MemoryAllocations()
	for i := 0; i < len(ws); i += 2 {
		ws[i].w.free(b)
	}
	for i := 0; i < len(ws); i += 2 {
		w, err := b.LoadWeight("again", compute.BF16, ws[i].w.rows, ws[i].w.cols, ws[i].data)
		if err != nil {
			t.Fatal(err)
		}
		ws[i].w = w.(*weight)
	}
	if after := b.MemoryAllocations(); after > before {
		t.Errorf("reloading freed weights grew the allocations from %d to %d", before, after)
	}
	for _, l := range ws {
		l.w.free(b)
	}
	if err := b.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.MemoryAllocations(); got != base {
		t.Errorf("after freeing every weight %d allocations remain, want %d", got, base)
	}
}
