package httpapi

import (
	"fmt"
	"os"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/kvevents"
)

// BlockSize is the block size the router metrics and the KV events use, in
// tokens: the prefix cache's snapshot chunk C, at whose multiples prefill
// is cut exactly and prompt state is kept.
const BlockSize = engine.PrefixBlock

// CacheUsage is what the router metrics read of the engine's state memory
// (vllm:kv_cache_usage_perc, vllm:cache_config_info). An engine that
// implements it is read directly; otherwise the server derives it from
// the engine's state-memory budget (see stateUsage).
type CacheUsage interface {
	// CacheConfig returns the block size in tokens (the prefix cache's
	// snapshot chunk) and the state-memory budget in blocks of that size.
	CacheConfig() (blockSize, blocks int)
	// KVCacheUsage returns the fraction, 0 to 1, of the state-memory
	// budget held by running sequences; cached prefixes that could be
	// evicted count as free, as vLLM counts them.
	KVCacheUsage() float64
}

// cacheUsage returns the engine's CacheUsage; nil before the model is
// loaded.
func (s *Server) cacheUsage() CacheUsage {
	eng := s.Engine()
	if eng == nil {
		return nil
	}
	if cu, ok := any(eng).(CacheUsage); ok {
		return cu
	}
	seqs := s.cfg.MaxNumSeqs
	if seqs == 0 {
		seqs = engine.DefaultMaxNumSeqs
	}
	return newStateUsage(eng, seqs, s.maxModelLen)
}

// stateUsage reads the router metrics off the engine's state-memory
// budget: the usage is the state reserved by running requests over the
// budget (the prefix cache's memory, evicted first, counts as free), and
// the budget in blocks is its bytes over a block's KV cache. With no
// budget (no limit) the budget is taken to be what maxNumSeqs sequences of
// maxModelLen tokens hold, the most the running requests can reserve.
type stateUsage struct {
	eng    *engine.Engine
	budget int64
	blocks int
}

func newStateUsage(eng *engine.Engine, maxNumSeqs, maxModelLen int) *stateUsage {
	m := eng.Model()
	budget := eng.StateUsage().Budget
	if budget <= 0 {
		budget = int64(maxNumSeqs) * m.SequenceBytes(maxModelLen)
	}
	u := &stateUsage{eng: eng, budget: budget}
	if kv := int64(BlockSize) * m.KVBytesPerToken(); kv > 0 {
		u.blocks = int(budget / kv)
	}
	return u
}

func (u *stateUsage) CacheConfig() (blockSize, blocks int) { return BlockSize, u.blocks }

func (u *stateUsage) KVCacheUsage() float64 {
	if u.budget <= 0 {
		return 0
	}
	return min(float64(u.eng.StateUsage().Running)/float64(u.budget), 1)
}

// startEvents binds the KV-events publisher cfg asks for; nil when events
// are off.
func startEvents(cfg Config, modelName string) (*kvevents.Publisher, error) {
	if cfg.KVEvents == "" {
		return nil, nil
	}
	topic := cfg.KVEventsTopic
	if topic == "" {
		pod := cfg.PodID
		if pod == "" {
			var err error
			if pod, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("httpapi: KV events topic: no pod id and no host name: %w", err)
			}
		}
		topic = kvevents.Topic(pod, modelName)
	}
	p, err := kvevents.Listen(kvevents.Config{Endpoint: cfg.KVEvents, Topic: topic, Model: modelName, BlockSize: BlockSize, Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("httpapi: KV events: %w", err)
	}
	return p, nil
}

// Events returns the server's KV-events publisher: nil when events are off
// (a nil *kvevents.Publisher accepts every call). The prefix cache is to
// drive it.
func (s *Server) Events() *kvevents.Publisher { return s.events }
