package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool is a fixed set of worker goroutines that persist across steps, so a
// parallel operation costs one hand-off and one barrier, not goroutine starts.
//
// Waking a blocked goroutine takes about 10 µs on a busy machine, more than
// many of a decode step's operations take, and a step runs dozens of them
// back to back. So an idle worker polls for its next job for up to spinWait
// before it blocks, and so does the caller waiting for the workers.
type pool struct {
	workers int
	jobs    chan job
	wg      sync.WaitGroup // running workers, for close
}

// spinWait is how long a worker polls for the next job, or the caller for
// the workers to finish, before blocking: longer than the serial gaps
// between the operations of a step, short enough that an idle backend
// stops using the CPU at once.
const spinWait = 50 * time.Microsecond

// job is one worker's share of a parallel loop.
type job struct {
	fn     func(lo, hi int)
	lo, hi int
	done   *barrier
}

// barrier waits for the jobs of one parallel loop.
type barrier struct {
	pending atomic.Int32   // jobs not yet finished, for polling
	wg      sync.WaitGroup // the same, for blocking
}

// add expects n more jobs.
func (b *barrier) add(n int) {
	b.pending.Add(int32(n))
	b.wg.Add(n)
}

// done marks one job finished.
func (b *barrier) done() {
	b.pending.Add(-1)
	b.wg.Done()
}

// wait returns when every job is finished, polling for up to spinWait
// first.
func (b *barrier) wait() {
	spin(func() bool { return b.pending.Load() == 0 })
	b.wg.Wait()
}

// spin polls ready, yielding the processor between polls, until it reports
// true or spinWait has passed, and returns its last answer.
func spin(ready func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i%32 == 31 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinWait {
				return false
			}
			runtime.Gosched()
		}
	}
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
	for {
		var j job
		var ok bool
		got := spin(func() bool {
			select {
			case j, ok = <-p.jobs:
				return true
			default:
				return false
			}
		})
		if !got {
			j, ok = <-p.jobs
		}
		if !ok {
			return
		}
		j.fn(j.lo, j.hi)
		j.done.done()
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
	done := new(barrier)
	chunk := (n + parts - 1) / parts
	for i := 1; i < parts; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, n)
		if lo >= hi {
			continue
		}
		done.add(1)
		p.jobs <- job{fn: fn, lo: lo, hi: hi, done: done}
	}
	fn(0, min(chunk, n))
	done.wait()
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

// drain hands the jobs 0..n-1 (of total cost, in multiply-adds) out one at a
// time to as many workers as the cost justifies, in index order, and waits;
// fn(slot, j) runs job j on the worker with scratch slot. Callers sort their
// jobs longest first so the last ones to start are short.
func (b *Backend) drain(n int, total int64, fn func(slot, j int)) {
	b.q.reset(n)
	b.pool.run(b.pool.partsFor(n, total), func(slot int) {
		for {
			j, ok := b.q.take()
			if !ok {
				return
			}
			fn(slot, j)
		}
	})
}
