package machine

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Rate is one measured figure.
type Rate struct {
	// Value is in GB/s (10⁹ bytes) for bandwidth, GFLOP/s for compute (a
	// multiply-add counts as two operations).
	Value float64
	// Threads is the number of OS threads that ran the probe together.
	Threads int
	// Probe names the loop that measured it ("avx2 ymm loads", ...); names
	// starting with [Scalar] are pure-Go loops.
	Probe string
}

// String formats the rate with its unit left to the caller.
func (r Rate) String() string {
	return fmt.Sprintf("%.2f (%d threads, %s)", r.Value, r.Threads, r.Probe)
}

// ReadBuffer is memory to measure read bandwidth over. Every page of it is
// written once when it is made, so that reads hit distinct physical memory
// rather than the kernel's shared zero page.
type ReadBuffer struct {
	buf   []byte
	avx2  bool   // read with the AVX2 loop even where AVX-512 runs (Options.AVX2Only)
	unmap func() // gives back a buffer mapped for the purpose (NewHugeReadBuffer)
}

// Close gives back the memory of a buffer mapped for the purpose
// (NewHugeReadBuffer); the buffer must not be used afterwards. Other
// buffers are the Go heap's.
func (b *ReadBuffer) Close() {
	if b.unmap != nil {
		b.unmap()
		b.unmap, b.buf = nil, nil
	}
}

// NewReadBuffer allocates and touches a buffer of size bytes (at least 64
// KiB), the pages touched by all CPUs at once. It should be much larger
// than all the last-level caches together for the figures to be the
// memory's rather than a cache's: see [DefaultReadBytes].
//
// The buffer is in ordinary pages: asking Linux for transparent huge pages
// (madvise) saved little and, where the kernel compacts memory for them on
// demand, stalled the first touch of a GiB for seconds.
func NewReadBuffer(size int) *ReadBuffer {
	size = max(size, 64<<10)
	buf := make([]byte, size)
	touch(buf)
	return &ReadBuffer{buf: buf}
}

// touch writes one byte of every page of buf, the pages shared among all
// CPUs.
func touch(buf []byte) {
	const page = 4096
	pages := (len(buf) + page - 1) / page
	n := runtime.NumCPU()
	var wg sync.WaitGroup
	for t := range n {
		wg.Go(func() {
			for p := t * pages / n; p < (t+1)*pages/n; p++ {
				buf[p*page] = byte(p) | 1
			}
		})
	}
	wg.Wait()
}

// Len returns the size of the buffer in bytes.
func (b *ReadBuffer) Len() int { return len(b.buf) }

// DefaultReadBytes is the read-buffer size Measure uses: four times an
// estimate of all the L3 caches together, at least 512 MiB and at most 2
// GiB.
// cpuid reports the L3 of one core complex on AMD (up to 8 cores each) and
// of the whole package on Intel, so the estimate is that L3 times one per 8
// physical cores: right on AMD, generous on Intel.
func DefaultReadBytes(c CPU) int {
	complexes := max(1, (c.PhysicalCores+7)/8)
	return min(max(4*c.L3*complexes, 512<<20), 2<<30)
}

// readSink keeps the probes' results live.
var readSink uint64

// Bandwidth returns the read bandwidth of threads OS threads each reading
// its own contiguous share of the buffer once, timed from the moment all
// start until the last one ends: the best of runs passes, or of those that
// fit in budget (at least two) when budget is positive.
func (b *ReadBuffer) Bandwidth(threads, runs int, budget time.Duration) Rate {
	threads, runs = max(threads, 1), max(runs, 1)
	p := readProbes()[0]
	if b.avx2 {
		for _, q := range readProbes() {
			if strings.HasPrefix(q.name, "avx2 ") {
				p = q
				break
			}
		}
	}
	chunk := len(b.buf) / threads / p.block * p.block
	if chunk == 0 {
		return Rate{Threads: threads, Probe: p.name}
	}
	sums := make([]uint64, threads)
	best := 0.0
	start := time.Now()
	for r := range runs {
		if r >= 2 && budget > 0 && time.Since(start) > budget {
			break
		}
		d := parallel(threads, func(t int) {
			sums[t] = p.read(b.buf[t*chunk : (t+1)*chunk])
		})
		best = max(best, float64(chunk*threads)/d.Seconds()/1e9)
	}
	for _, s := range sums {
		readSink ^= s
	}
	return Rate{Value: best, Threads: threads, Probe: p.name}
}

// computeSink keeps the probes' results live.
var computeSink float32

// peak runs probe p on threads OS threads at once, each for about d, and
// returns the best of runs.
func peak(p computeProbe, threads, runs int, d time.Duration) Rate {
	threads, runs = max(threads, 1), max(runs, 1)
	// Calibrate on one thread: iterations that take about d.
	n := 1 << 10
	for {
		start := time.Now()
		computeSink += p.run(n)
		el := time.Since(start)
		if el >= time.Millisecond || n >= 1<<40 {
			n = max(1, int(float64(n)*d.Seconds()/max(el.Seconds(), 1e-9)))
			break
		}
		n *= 4
	}
	best := 0.0
	res := make([]float32, threads)
	for range runs {
		el := parallel(threads, func(t int) { res[t] = p.run(n) })
		best = max(best, float64(threads)*float64(n)*p.flops/el.Seconds()/1e9)
	}
	for _, r := range res {
		computeSink += r
	}
	return Rate{Value: best, Threads: threads, Probe: p.name}
}

// FMAF32 returns the float32 multiply-add rate of threads OS threads
// running register-only chains of the widest FMA the CPU has, best of runs
// of about d each.
func FMAF32(threads, runs int, d time.Duration) Rate {
	return peak(fmaProbes()[0], threads, runs, d)
}

// DotBF16 returns the bf16 dot-product rate (VDPBF16PS: bf16 products
// accumulated in float32) of threads OS threads, best of runs of about d
// each, and false where the CPU (or this build) has no such instruction.
func DotBF16(threads, runs int, d time.Duration) (Rate, bool) {
	return firstPeak(bf16Probes(), threads, runs, d)
}

// HasDotBF16 reports whether DotBF16 can measure on this CPU and build.
func HasDotBF16() bool { return len(bf16Probes()) > 0 }

// DotInt8 returns the int8 dot-product rate (unsigned by signed byte
// products accumulated in int32, as the packed quantized products run:
// VPDPBUSD with AVX512_VNNI, else VEX VPDPBUSD on ymm with AVX-VNNI, else
// VPMADDUBSW then VPMADDWD on AVX2; a
// multiply-add counts as two operations) of threads OS threads, best of
// runs of about d each, and false where the CPU (or this build) has
// neither.
func DotInt8(threads, runs int, d time.Duration) (Rate, bool) {
	return firstPeak(int8Probes(), threads, runs, d)
}

// HasDotInt8 reports whether DotInt8 can measure on this CPU and build.
func HasDotInt8() bool { return len(int8Probes()) > 0 }

// avx2First returns the first of ps that runs on AVX2 registers, else
// the last (the Go loop).
func avx2First(ps []computeProbe) computeProbe {
	for _, p := range ps {
		if strings.HasPrefix(p.name, "avx2 ") {
			return p
		}
	}
	return ps[len(ps)-1]
}

// int8ProbesFor is int8Probes, only the ymm loops where avx2 is set: the
// AVX-VNNI loop first where avxvnni is set too, then the AVX2 one.
func int8ProbesFor(avx2, avxvnni bool) []computeProbe {
	ps := int8Probes()
	if avx2 {
		ps = slices.DeleteFunc(ps, func(p computeProbe) bool {
			return !strings.HasPrefix(p.name, "avx2 ") && !(avxvnni && strings.HasPrefix(p.name, "avx_vnni "))
		})
	}
	return ps
}

// TileBF16 returns the AMX bf16 tile rate (TDPBF16PS: bf16 products
// accumulated in float32 tiles, four independent sums) of threads OS
// threads, best of runs of about d each, and false where the CPU (or this
// build, or the operating system) has no AMX.
func TileBF16(threads, runs int, d time.Duration) (Rate, bool) {
	return firstPeak(amxProbes(), threads, runs, d)
}

// HasTileBF16 reports whether TileBF16 can measure on this CPU and build.
func HasTileBF16() bool { return len(amxProbes()) > 0 }

// firstPeak is peak on the first of ps, best first, and false where ps is
// empty (the CPU or this build has no such instruction).
func firstPeak(ps []computeProbe, threads, runs int, d time.Duration) (Rate, bool) {
	if len(ps) == 0 {
		return Rate{}, false
	}
	return peak(ps[0], threads, runs, d), true
}

// parallel runs fn(0..threads-1) on as many goroutines, each locked to its
// own OS thread, and returns the time from their common start to the end of
// the last.
func parallel(threads int, fn func(t int)) time.Duration {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(threads)
	done.Add(threads)
	for t := range threads {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-start
			fn(t)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	return time.Since(t0)
}

// Report is what Measure finds.
type Report struct {
	CPU CPU
	// Threads is the thread count of the N-thread figures.
	Threads int
	// ReadBytes is the size of the buffer the read loops ran over.
	ReadBytes int
	// ReadOne and Read are the read bandwidths at 1 and at Threads threads.
	ReadOne, Read Rate
	// ReadHuge is the read bandwidth at Threads threads over a buffer
	// backed by transparent huge pages (Options.HugePages), of which
	// ReadHugeShare were huge pages; zero where none could be mapped.
	ReadHuge      Rate
	ReadHugeShare float64
	// FMAOne and FMA are the f32 FMA peaks at 1 and at Threads threads.
	FMAOne, FMA Rate
	// BF16 says whether the bf16 dot peaks DotBF16One and DotBF16 were measured.
	BF16                bool
	DotBF16One, DotBF16 Rate
	// Int8 says whether the int8 dot peaks DotInt8One and DotInt8 were
	// measured (in billions of integer operations per second).
	Int8                bool
	DotInt8One, DotInt8 Rate
	// AMX says whether the AMX bf16 tile peaks TileBF16One and TileBF16
	// were measured.
	AMX                   bool
	TileBF16One, TileBF16 Rate
	// Elapsed is how long Measure took, buffer allocation included.
	Elapsed time.Duration
}

// Options configures Measure. Zero values pick the defaults.
type Options struct {
	// Threads for the N-thread figures; 0 means runtime.NumCPU().
	Threads int
	// ReadBytes is the size of the read buffer; 0 means DefaultReadBytes.
	ReadBytes int
	// ReadRuns is the number of passes over the buffer per figure, the best
	// reported; 0 means 4. Passes stop early (after two) once a figure has
	// taken ReadBudget; 0 means 400 ms, negative no limit.
	ReadRuns   int
	ReadBudget time.Duration
	// ComputeTime is the length of each compute run (3 runs per figure); 0
	// means 15 ms.
	ComputeTime time.Duration
	// HugePages also measures the read loop at Threads threads over a
	// buffer of ReadBytes in transparent huge pages (Linux), as weights
	// mapped from files that fit in memory are read (Report.ReadHuge).
	HugePages bool
	// Int8AVX2 measures the int8 dot peak on the AVX2 loop (VPMADDUBSW
	// then VPMADDWD) even where the CPU has AVX512_VNNI, for kernels that
	// do not use it.
	Int8AVX2 bool
	// AVX2Only measures what the AVX2 kernel set can reach: the read, FMA
	// and int8 loops on ymm registers, no bf16 or AMX peaks, even where
	// the CPU has AVX-512 (for kernels forced to AVX2 on such a CPU).
	AVX2Only bool
	// Int8AVXVNNI, with Int8AVX2, measures it on the AVX-VNNI loop (VEX
	// VPDPBUSD on ymm) where the CPU has AVX-VNNI, for kernels that use
	// it without AVX512_VNNI.
	Int8AVXVNNI bool
}

// Measure runs every probe: read bandwidth and compute peaks at one thread
// and at o.Threads. With the defaults it takes under two seconds (most of
// it touching and reading the read buffer, whose passes stop early when
// they take long).
func Measure(o Options) Report {
	start := time.Now()
	cpu := DetectCPU()
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.ReadBytes <= 0 {
		o.ReadBytes = DefaultReadBytes(cpu)
	}
	if o.ReadRuns <= 0 {
		o.ReadRuns = 4
	}
	if o.ReadBudget == 0 {
		o.ReadBudget = 400 * time.Millisecond
	}
	if o.ComputeTime <= 0 {
		o.ComputeTime = 15 * time.Millisecond
	}
	r := Report{CPU: cpu, Threads: o.Threads}
	if o.HugePages {
		// Before the heap buffer is made, so that the two are not held
		// at once.
		if hb, share := NewHugeReadBuffer(o.ReadBytes); hb != nil {
			hb.avx2 = o.AVX2Only
			r.ReadHuge, r.ReadHugeShare = hb.Bandwidth(o.Threads, o.ReadRuns, o.ReadBudget), share
			hb.Close()
		}
	}
	buf := NewReadBuffer(o.ReadBytes)
	r.ReadBytes = buf.Len()
	if o.AVX2Only {
		buf.avx2 = true
	}
	r.ReadOne = buf.Bandwidth(1, o.ReadRuns, o.ReadBudget)
	r.Read = buf.Bandwidth(o.Threads, o.ReadRuns, o.ReadBudget)
	fma := fmaProbes()[0]
	if o.AVX2Only {
		fma = avx2First(fmaProbes())
	}
	r.FMAOne = peak(fma, 1, 3, o.ComputeTime)
	r.FMA = peak(fma, o.Threads, 3, o.ComputeTime)
	if o.AVX2Only {
		o.Int8AVX2 = true
	}
	if HasDotBF16() && !o.AVX2Only {
		r.BF16 = true
		r.DotBF16One, _ = DotBF16(1, 3, o.ComputeTime)
		r.DotBF16, _ = DotBF16(o.Threads, 3, o.ComputeTime)
	}
	if ps := int8ProbesFor(o.Int8AVX2, o.Int8AVXVNNI); len(ps) > 0 {
		r.Int8 = true
		r.DotInt8One = peak(ps[0], 1, 3, o.ComputeTime)
		r.DotInt8 = peak(ps[0], o.Threads, 3, o.ComputeTime)
	}
	if HasTileBF16() && !o.AVX2Only {
		r.AMX = true
		r.TileBF16One, _ = TileBF16(1, 3, o.ComputeTime)
		r.TileBF16, _ = TileBF16(o.Threads, 3, o.ComputeTime)
	}
	r.Elapsed = time.Since(start)
	return r
}
