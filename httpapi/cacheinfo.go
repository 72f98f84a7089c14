package httpapi

import (
	"fmt"
	"os"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// BlockSize is the block size the router metrics and the KV events use, in
// tokens: the prefix cache's block (llm.PrefixBlock), at whose multiples
// prefill is cut exactly and prompt state is kept. What the router
// metrics state of the state memory comes from llm: Model.CacheBlocks
// (vllm:cache_config_info) and Stats.KVCacheUsage (vllm:kv_cache_usage_perc).
const BlockSize = llm.PrefixBlock

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
