package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// histogram counts observations in cumulative buckets, as Prometheus
// histograms do. It is safe for concurrent use.
type histogram struct {
	mu     sync.Mutex
	bounds []float64 // upper bounds, ascending
	counts []uint64  // per bucket, not cumulative; one more for +Inf
	sum    float64
	n      uint64
}

// newHistogram returns a histogram with the given ascending upper bounds.
func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: append([]float64(nil), bounds...), counts: make([]uint64, len(bounds)+1)}
}

// Observe records one value.
func (h *histogram) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

// HistogramSnapshot is a histogram's state at one moment.
type HistogramSnapshot struct {
	// Bounds are the buckets' upper bounds; Cumulative[i] counts the
	// observations <= Bounds[i].
	Bounds     []float64
	Cumulative []uint64
	Sum        float64
	Count      uint64
}

// Snapshot returns a copy of the histogram's state.
func (h *histogram) Snapshot() HistogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HistogramSnapshot{Bounds: append([]float64(nil), h.bounds...), Cumulative: make([]uint64, len(h.bounds)), Sum: h.sum, Count: h.n}
	var c uint64
	for i := range h.bounds {
		c += h.counts[i]
		s.Cumulative[i] = c
	}
	return s
}

// latencyBuckets are the bucket bounds, in seconds, of the latency
// histograms (vLLM's time-to-first-token buckets).
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

// metrics holds the engine's counters.
type metrics struct {
	running, waiting         atomic.Int64
	seqOpen                  atomic.Int64
	stateBytes               atomic.Int64
	promptTokens             atomic.Uint64
	prefixQueries            atomic.Uint64
	prefixHits               atomic.Uint64
	diskHits                 atomic.Uint64 // of prefixHits, those read from the disk tier
	hostHits                 atomic.Uint64 // of prefixHits, those copied from the host tier
	generationTokens         atomic.Uint64
	steps                    atomic.Uint64
	stepNanos                atomic.Uint64
	rejected                 atomic.Uint64
	stop, length, cancel, er atomic.Uint64
	ttft, itl                *histogram

	specDrafted, specAccepted atomic.Uint64 // Config.Speculative
}

func newMetrics() *metrics {
	return &metrics{ttft: newHistogram(latencyBuckets), itl: newHistogram(latencyBuckets)}
}

func (m *metrics) observeStep(d time.Duration) {
	m.steps.Add(1)
	m.stepNanos.Add(uint64(d.Nanoseconds()))
}

func (m *metrics) finished(f FinishReason) {
	switch f {
	case FinishStop:
		m.stop.Add(1)
	case FinishLength:
		m.length.Add(1)
	case FinishCancelled:
		m.cancel.Add(1)
	case FinishError:
		m.er.Add(1)
	}
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Running int // requests in the batch
	Waiting int // requests queued
	// OpenSequences counts the model sequences the engine holds; it
	// returns to zero when every request has ended.
	OpenSequences int
	// StateBytes is the memory of the running sequences' state (KV caches,
	// recurrent states) after the last step.
	StateBytes   int64
	PromptTokens uint64 // prompt tokens prefilled, all requests
	// PrefixQueryTokens counts the prompt tokens of the requests started
	// with the prefix cache on, PrefixHitTokens those of them resumed from
	// the cache instead of prefilled.
	PrefixQueryTokens, PrefixHitTokens uint64
	// PrefixDiskHitTokens counts the hit tokens that the disk tier
	// supplied (Config.PrefixDisk): a request resuming beyond what memory
	// held counts the difference. The memory tier's hits are the rest.
	PrefixDiskHitTokens uint64
	// PrefixHostHitTokens counts the hit tokens that the host tier
	// supplied (Config.PrefixHost), as PrefixDiskHitTokens counts the
	// disk tier's. The memory tier's hits are the rest.
	PrefixHostHitTokens uint64
	// Disk is the disk tier's state (zero without one).
	Disk DiskUsage
	// Host is the host tier's state (zero without one).
	Host HostUsage
	// State is the use of the state memory budget.
	State            StateUsage
	GenerationTokens uint64 // tokens generated, all requests
	Steps            uint64 // model steps run
	StepSeconds      float64
	Rejected         uint64 // submissions refused because the queue was full

	// SpecDraftTokens counts the draft tokens of speculative rounds, all
	// requests, SpecAcceptedTokens those the main model accepted
	// (Config.Speculative; Stream.SpecTokens per request).
	SpecDraftTokens, SpecAcceptedTokens uint64
	// Finished counts ended requests by reason.
	Finished map[FinishReason]uint64
	// TimeToFirstToken is measured from Submit to the first token;
	// InterToken between consecutive tokens of a request. Both in seconds.
	TimeToFirstToken, InterToken HistogramSnapshot
}

// StateUsage returns the use of the state memory budget: by the running
// requests, and by the prefix cache (evictable).
func (e *Engine) StateUsage() StateUsage { return e.budget.usage() }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	m := e.metrics
	var disk DiskUsage
	var host HostUsage
	if e.cache != nil && e.cache.disk != nil {
		disk = e.cache.disk.Stats()
	}
	if e.cache != nil && e.cache.host != nil {
		host = e.cache.host.snapshot()
	}
	return Stats{
		Disk:                disk,
		Host:                host,
		PrefixHostHitTokens: m.hostHits.Load(),
		Running:             int(m.running.Load()),
		Waiting:             int(m.waiting.Load()),
		OpenSequences:       int(m.seqOpen.Load()),
		StateBytes:          m.stateBytes.Load(),
		PromptTokens:        m.promptTokens.Load(),
		PrefixQueryTokens:   m.prefixQueries.Load(),
		PrefixHitTokens:     m.prefixHits.Load(),
		PrefixDiskHitTokens: m.diskHits.Load(),
		State:               e.budget.usage(),
		GenerationTokens:    m.generationTokens.Load(),
		Steps:               m.steps.Load(),
		StepSeconds:         float64(m.stepNanos.Load()) / 1e9,
		Rejected:            m.rejected.Load(),
		Finished: map[FinishReason]uint64{
			FinishStop: m.stop.Load(), FinishLength: m.length.Load(),
			FinishCancelled: m.cancel.Load(), FinishError: m.er.Load(),
		},
		TimeToFirstToken: m.ttft.Snapshot(),
		InterToken:       m.itl.Snapshot(),

		SpecDraftTokens:    m.specDrafted.Load(),
		SpecAcceptedTokens: m.specAccepted.Load(),
	}
}
