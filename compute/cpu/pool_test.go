package cpu

import (
	"sync/atomic"
	"testing"
)

// TestPoolRun checks that run gives every slot exactly once and that the
// queue hands out every index exactly once across workers.
func TestPoolRun(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		p := newPool(workers)
		for _, parts := range []int{0, 1, 3, 8} {
			var slots [8]atomic.Int32
			p.run(parts, func(s int) { slots[s].Add(1) })
			want := min(max(parts, 1), workers)
			for s := range slots {
				n := slots[s].Load()
				if (s < want && n != 1) || (s >= want && n != 0) {
					t.Errorf("workers %d parts %d: slot %d ran %d times", workers, parts, s, n)
				}
			}
			var q queue
			const jobs = 1000
			var seen [jobs]atomic.Int32
			q.reset(jobs)
			p.run(parts, func(int) {
				for {
					j, ok := q.take()
					if !ok {
						return
					}
					seen[j].Add(1)
				}
			})
			for j := range seen {
				if seen[j].Load() != 1 {
					t.Fatalf("workers %d parts %d: job %d taken %d times", workers, parts, j, seen[j].Load())
				}
			}
		}
		p.close()
	}
}

// BenchmarkPoolHandoff measures one parallel operation that does no work:
// the cost of handing jobs to the workers and waiting for them.
func BenchmarkPoolHandoff(b *testing.B) {
	p := newPool(2)
	defer p.close()
	var sink atomic.Int64
	for b.Loop() {
		p.run(2, func(s int) { sink.Add(int64(s)) })
	}
}
