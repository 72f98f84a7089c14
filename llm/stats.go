package llm

import (
	"sync"

	"github.com/govinfer/govinfer/engine"
)

// What a server exports about a Model besides its answers: counters for
// metrics (Stats), the state memory as vLLM's router metrics describe a KV
// cache (CacheBlocks, Stats.KVCacheUsage) and the prefix cache's changes
// for KV events (ObservePrefixCache). Package httpapi reads them all here.

// PrefixBlock is the prefix cache's block, in tokens: prompt state is kept
// at its multiples, and KV events and the router metrics count in it.
const PrefixBlock = engine.PrefixBlock

// DefaultMaxNumSeqs and DefaultMaxQueue are the defaults of
// Options.MaxNumSeqs and Options.MaxQueue.
const (
	DefaultMaxNumSeqs = engine.DefaultMaxNumSeqs
	DefaultMaxQueue   = engine.DefaultMaxQueue
)

// StateUsage is how the state memory budget is used at one moment: by the
// running requests (reserved for their prompt and answer from start to
// end) and by the prefix cache (evicted first when a request needs room).
type StateUsage = engine.StateUsage

// Histogram is a latency histogram at one moment, in seconds: Cumulative[i]
// counts the observations at most Bounds[i].
type Histogram = engine.HistogramSnapshot

// Stats is a snapshot of a Model's counters since Open (Model.Stats).
type Stats struct {
	// Running and Waiting are the requests in the batch and those queued
	// behind it (one per choice).
	Running, Waiting int
	// OpenSequences counts the model sequences held by requests; it
	// returns to zero when every request has ended.
	OpenSequences int
	// StateBytes is the memory of the running sequences' KV caches and
	// recurrent states after the last step.
	StateBytes int64
	// PromptTokens counts the prompt tokens prefilled, GenerationTokens
	// the tokens generated.
	PromptTokens, GenerationTokens uint64
	// PrefixQueryTokens counts the prompt tokens looked up in the prefix
	// cache, PrefixHitTokens those of them resumed instead of prefilled.
	PrefixQueryTokens, PrefixHitTokens uint64
	// PrefixDiskHitTokens counts the hit tokens the disk tier supplied
	// (Options.PrefixCacheDir); the memory tier's are the rest, less the
	// host tier's.
	// PrefixDisk is the disk tier's state: its files, bytes written and
	// read, writes dropped (the disk slower than eviction) and files
	// skipped as corrupt.
	PrefixDiskHitTokens uint64
	PrefixDisk          PrefixDiskUsage
	// PrefixHostHitTokens counts the hit tokens the host tier supplied
	// (Options.PrefixCacheHost), PrefixHost is its state: bytes held and
	// copied in and out.
	PrefixHostHitTokens uint64
	PrefixHost          PrefixHostUsage
	// State is the use of the state memory budget.
	State StateUsage
	// KVCacheUsage is the fraction, 0 to 1, of the state memory held by
	// running requests, as vLLM's kv_cache_usage_perc: cached prefixes,
	// which are evicted first, count as free. Without a budget it is taken
	// over what CacheBlocks counts.
	KVCacheUsage float64
	// Steps counts the model steps run, StepSeconds their time.
	Steps       uint64
	StepSeconds float64
	// Rejected counts the requests refused because the queue was full.
	Rejected uint64
	// SpecDraftTokens counts the tokens speculative decoding drafted,
	// SpecAcceptedTokens those the model accepted (Options.Speculative).
	SpecDraftTokens, SpecAcceptedTokens uint64
	// Finished counts the ended requests by reason.
	Finished FinishCounts
	// TimeToFirstToken is measured from a request's start to its first
	// token, InterToken between consecutive tokens of a request.
	TimeToFirstToken, InterToken Histogram
}

// FinishCounts counts ended requests by why they ended: a stop or
// end-of-sequence token, their token limit or the context, cancellation
// (the caller's context, or Close), or a failure of the model.
type FinishCounts struct {
	Stop, Length, Cancelled, Error uint64
}

// Stats returns the model's counters.
func (lm *Model) Stats() Stats {
	st := lm.eng.Stats()
	s := Stats{
		Running: st.Running, Waiting: st.Waiting, OpenSequences: st.OpenSequences, StateBytes: st.StateBytes,
		PromptTokens: st.PromptTokens, GenerationTokens: st.GenerationTokens,
		PrefixQueryTokens: st.PrefixQueryTokens, PrefixHitTokens: st.PrefixHitTokens, State: st.State,
		PrefixDiskHitTokens: st.PrefixDiskHitTokens, PrefixDisk: st.Disk,
		PrefixHostHitTokens: st.PrefixHostHitTokens, PrefixHost: st.Host,
		Steps: st.Steps, StepSeconds: st.StepSeconds, Rejected: st.Rejected,
		SpecDraftTokens: st.SpecDraftTokens, SpecAcceptedTokens: st.SpecAcceptedTokens,
		Finished: FinishCounts{
			Stop: st.Finished[engine.FinishStop], Length: st.Finished[engine.FinishLength],
			Cancelled: st.Finished[engine.FinishCancelled], Error: st.Finished[engine.FinishError],
		},
		TimeToFirstToken: st.TimeToFirstToken, InterToken: st.InterToken,
	}
	if lm.usageBudget > 0 {
		s.KVCacheUsage = min(float64(st.State.Running)/float64(lm.usageBudget), 1)
	}
	return s
}

// usageBudgetBytes returns the bytes KVCacheUsage and CacheBlocks count: the
// state memory budget, or with none what maxNumSeqs sequences of the
// longest choice hold, the most the running requests can reserve.
func (lm *Model) usageBudgetBytes(maxNumSeqs int) int64 {
	if lm.stateMemory > 0 {
		return lm.stateMemory
	}
	return int64(maxNumSeqs) * lm.m.SequenceBytes(lm.maxModelLen)
}

// CacheBlocks returns the state memory as vLLM's cache_config_info states
// a KV cache: the block size in tokens (PrefixBlock) and the budget in
// blocks of that size's KV cache.
func (lm *Model) CacheBlocks() (blockSize, blocks int) {
	if kv := int64(PrefixBlock) * lm.m.KVBytesPerToken(); kv > 0 {
		blocks = int(lm.usageBudget / kv)
	}
	return PrefixBlock, blocks
}

// PrefixObserver is told what the prefix cache stores and evicts, as spans
// of PrefixBlock-token blocks named by their chained hashes. Its methods
// run on the engine's goroutine between steps: they must return quickly
// and must not call the Model.
type PrefixObserver = engine.PrefixObserver

// PrefixSpan is a run of blocks of a cached prefix (PrefixObserver).
type PrefixSpan = engine.PrefixSpan

// SpanLoRA is an adapter a prefix span's state was computed with.
type SpanLoRA = engine.SpanLoRA

// SpanLoRAName returns the name KV events give a span's adapters: the one
// adapter's name, several joined by "+" (each "*scale" where that is not
// 1), "" for the base model.
func SpanLoRAName(ls []SpanLoRA) string { return engine.LoRAName(ls) }

// PrefixTier names a tier of the prefix cache (PrefixSpan.Tier).
type PrefixTier = engine.Tier

// The prefix cache's tiers (engine.TierDevice, TierHost, TierDisk).
const (
	PrefixTierDevice = engine.TierDevice
	PrefixTierHost   = engine.TierHost
	PrefixTierDisk   = engine.TierDisk
)

// SpanImage is an image whose tokens fall within a PrefixSpan.
type SpanImage = engine.SpanImage

// ObservePrefixCache adds obs to the prefix cache's observers (besides
// Options.PrefixObserver): from now on it is told each span the cache
// stores or evicts, in each tier (PrefixSpan.Tier). What memory held
// before is not reported; what the disk tier holds (Options.PrefixCacheDir,
// after a restart too) is, first, as spans stored in PrefixTierDisk
// (engine.Engine.DiskSpans), so that KV events name the states a restarted
// server can resume from. remove takes it off again, waiting for a call in
// progress, so obs is not called once remove returns; obs must not call
// remove. With the prefix cache off (Options.NoPrefixCache) nothing is
// reported.
func (lm *Model) ObservePrefixCache(obs PrefixObserver) (remove func()) {
	remove = lm.observers.add(obs)
	lm.observers.replay(obs, lm.eng.DiskSpans)
	return remove
}

// prefixRelay is the engine's prefix observer: it passes every change on
// to the observers added since.
type prefixRelay struct {
	mu   sync.Mutex // held while calling the observers
	list []*PrefixObserver
}

func (r *prefixRelay) add(obs PrefixObserver) func() {
	if obs == nil {
		return func() {}
	}
	p := &obs
	r.mu.Lock()
	r.list = append(r.list, p)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, q := range r.list {
			if q == p {
				r.list = append(r.list[:i:i], r.list[i+1:]...)
				return
			}
		}
	}
}

// replay tells obs, an observer added, of the spans spans returns, which
// it calls holding the relay's lock: the engine's reports wait meanwhile,
// so a removal that follows the snapshot reaches obs after it.
func (r *prefixRelay) replay(obs PrefixObserver, spans func() []PrefixSpan) {
	if obs == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range spans() {
		obs.PrefixStored(sp)
	}
}

func (r *prefixRelay) PrefixStored(sp PrefixSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.list {
		(*p).PrefixStored(sp)
	}
}

func (r *prefixRelay) PrefixRemoved(sp PrefixSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.list {
		(*p).PrefixRemoved(sp)
	}
}
