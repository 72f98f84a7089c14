package cpu

import "sync"

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
