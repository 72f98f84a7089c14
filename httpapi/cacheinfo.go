package httpapi

import (
	"fmt"
	"os"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/model"
)

// BlockSize is the block size the router metrics and the KV events use, in
// tokens: the engine's prompt chunk, at whose multiples prefill can be cut
// exactly and the prefix cache takes its snapshots (its chunk C).
const BlockSize = engine.DefaultChunkTokens

// CacheUsage is what the router metrics read of the engine's state memory
// (vllm:kv_cache_usage_perc, vllm:cache_config_info). An engine with a
// state-memory budget implements it, and the server then reads it from
// there; until one does, the server computes it from what the engine
// reports (see stateUsage).
type CacheUsage interface {
	// CacheConfig returns the block size in tokens (the prefix cache's
	// snapshot chunk) and the state-memory budget in blocks of that size.
	CacheConfig() (blockSize, blocks int)
	// KVCacheUsage returns the fraction, 0 to 1, of the state-memory
	// budget held by running sequences; cached prefixes that could be
	// evicted count as free, as vLLM counts them.
	KVCacheUsage() float64
}

// cacheUsage returns the engine's CacheUsage, or the server's own estimate
// when the engine has none; nil before the model is loaded.
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
	return newStateUsage(eng, s.lm.Config(), seqs, s.maxModelLen)
}

// stateUsage is the router metrics' view of an engine without a
// state-memory budget: the budget is taken to be what MaxNumSeqs sequences
// at MaxModelLen tokens hold (the most the engine can allocate), and the
// usage is the state bytes of the running sequences against it. It
// overstates usage somewhat, since KV caches grow by doubling.
type stateUsage struct {
	eng               *engine.Engine
	budget            int64
	blockSize, blocks int
}

func newStateUsage(eng *engine.Engine, c *model.Config, maxNumSeqs, maxModelLen int) *stateUsage {
	fixed, perToken := stateBytes(c)
	return &stateUsage{
		eng:       eng,
		budget:    int64(maxNumSeqs) * (fixed + int64(maxModelLen)*perToken),
		blockSize: BlockSize,
		blocks:    maxNumSeqs * maxModelLen / BlockSize,
	}
}

func (u *stateUsage) CacheConfig() (blockSize, blocks int) { return u.blockSize, u.blocks }

func (u *stateUsage) KVCacheUsage() float64 {
	if u.budget <= 0 {
		return 0
	}
	return min(float64(u.eng.Stats().StateBytes)/float64(u.budget), 1)
}

// stateBytes returns a sequence's state memory as model.Sequence allocates
// it: a fixed part (each Gated DeltaNet layer's conv window and recurrent
// state) and a part per token of KV cache (each attention layer's keys and
// values), float32 throughout.
func stateBytes(c *model.Config) (fixed, perToken int64) {
	for _, t := range c.LayerTypes {
		switch t {
		case model.LinearAttention:
			fixed += int64((c.LinearConvKernel-1)*c.ConvDim()+c.LinearNumValueHeads*c.LinearKeyHeadDim*c.LinearValueHeadDim) * 4
		case model.FullAttention:
			perToken += int64(2*c.NumKVHeads*c.HeadDim) * 4
		}
	}
	return fixed, perToken
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
