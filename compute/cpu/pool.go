package cpu

import (
	"sync"
	"sync/atomic"
)

// pool is a fixed set of worker goroutines that persist across steps, so a
// parallel operation costs one hand-off and one barrier, not goroutine starts.
type pool struct {
	workers int
	jobs    chan job
	wg      sync.WaitGroup // running workers, for close
}

// job is one worker's share of a parallel loop.
type job struct {
	fn     func(lo, hi int)
	lo, hi int
	done   *sync.WaitGroup
}

func newPool(workers int) *pool {
	p := &pool{workers: workers, jobs: make(chan job, workers)}
	for i := 0; i < workers-1; i++ {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *pool) work() {
	defer p.wg.Done()
	for j := range p.jobs {
		j.fn(j.lo, j.hi)
		j.done.Done()
	}
}

// parallelFor splits [0, n) into at most p.workers contiguous ranges, each at
// least minChunk long (except the last), runs fn on each, and waits. The
// calling goroutine runs the first range itself.
func (p *pool) parallelFor(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	parts := p.workers
	if minChunk < 1 {
		minChunk = 1
	}
	if m := (n + minChunk - 1) / minChunk; m < parts {
		parts = m
	}
	if parts <= 1 {
		fn(0, n)
		return
	}
	var done sync.WaitGroup
	chunk := (n + parts - 1) / parts
	done.Add(parts - 1)
	for i := 1; i < parts; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, n)
		if lo >= hi {
			done.Done()
			continue
		}
		p.jobs <- job{fn: fn, lo: lo, hi: hi, done: &done}
	}
	fn(0, min(chunk, n))
	done.Wait()
}

func (p *pool) close() {
	close(p.jobs)
	p.wg.Wait()
}

// run calls fn(slot) for every slot in [0, parts) at the same time, one
// slot per worker (slot 0 on the calling goroutine), and waits. parts is
// clamped to [1, p.workers], so slot indexes per-worker scratch.
func (p *pool) run(parts int, fn func(slot int)) {
	parts = min(max(parts, 1), p.workers)
	p.parallelFor(parts, 1, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			fn(s)
		}
	})
}

// queue hands out the indices 0..n-1, in order, to competing workers.
type queue struct {
	next atomic.Int64
	n    int64
}

// reset makes the queue hand out 0..n-1 again.
func (q *queue) reset(n int) {
	q.next.Store(0)
	q.n = int64(n)
}

// take returns the next index, or false when all have been taken.
func (q *queue) take() (int, bool) {
	j := q.next.Add(1) - 1
	return int(j), j < q.n
}

// jobGrain is the amount of work, in multiply-adds, below which handing
// jobs to another worker costs more than it saves.
const jobGrain = 1 << 15

// partsFor returns how many workers to use for jobs jobs of total cost
// (in multiply-adds): at least jobGrain of work each.
func (p *pool) partsFor(jobs int, cost int64) int {
	return int(min(int64(p.workers), int64(jobs), max(1, cost/jobGrain)))
}
