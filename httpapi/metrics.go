package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// The Prometheus text exposition, with vLLM's names for what routers read
// (the llm-d router and the Gateway API inference extension scrape every
// 50 ms per replica; vLLM production-stack and KEDA read the same names):
//
//	vllm:num_requests_running, vllm:num_requests_waiting  queue depth
//	vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc   state memory held by running sequences, 0 to 1
//	vllm:cache_config_info{block_size,num_gpu_blocks}      the prefix-cache block and the budget in blocks
//
// every series labelled model_name. The handler appends into a pooled
// buffer: a scrape costs tens of microseconds (BenchmarkMetricsHandler).

// metricsBufs holds the buffers scrapes are written into.
var metricsBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// promWriter appends Prometheus text to a buffer.
type promWriter struct {
	b     []byte
	label string // {model_name="..."}
	model string // "..." quoted
}

func (w *promWriter) header(name, help, typ string) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, help...)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, typ...)
	w.b = append(w.b, '\n')
}

// value appends a sample's value and ends its line.
func (w *promWriter) value(v float64) {
	w.b = append(w.b, ' ')
	w.b = strconv.AppendFloat(w.b, v, 'g', -1, 64)
	w.b = append(w.b, '\n')
}

func (w *promWriter) uint(v uint64) {
	w.b = append(w.b, ' ')
	w.b = strconv.AppendUint(w.b, v, 10)
	w.b = append(w.b, '\n')
}

// labels opens a label set with model_name; the caller appends more
// labels and the closing brace.
func (w *promWriter) labels(name string) {
	w.b = append(w.b, name...)
	w.b = append(w.b, "{model_name="...)
	w.b = append(w.b, w.model...)
}

func (w *promWriter) gauge(name, help string, v float64) {
	w.header(name, help, "gauge")
	w.b = append(w.b, name...)
	w.b = append(w.b, w.label...)
	w.value(v)
}

func (w *promWriter) counter(name, help string, v float64) {
	w.header(name, help, "counter")
	w.b = append(w.b, name...)
	w.b = append(w.b, w.label...)
	w.value(v)
}

func (w *promWriter) histogram(name, help string, h llm.Histogram) {
	w.header(name, help, "histogram")
	bucket := name + "_bucket"
	for i, ub := range h.Bounds {
		w.labels(bucket)
		w.b = append(w.b, `,le="`...)
		w.b = strconv.AppendFloat(w.b, ub, 'g', -1, 64)
		w.b = append(w.b, `"}`...)
		w.uint(h.Cumulative[i])
	}
	w.labels(bucket)
	w.b = append(w.b, `,le="+Inf"}`...)
	w.uint(h.Count)
	w.b = append(w.b, name...)
	w.b = append(w.b, "_sum"...)
	w.b = append(w.b, w.label...)
	w.value(h.Sum)
	w.b = append(w.b, name...)
	w.b = append(w.b, "_count"...)
	w.b = append(w.b, w.label...)
	w.uint(h.Count)
}

// handleMetrics writes the Prometheus text exposition.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	bp := metricsBufs.Get().(*[]byte)
	quoted := strconv.Quote(s.name)
	w := promWriter{b: (*bp)[:0], model: quoted, label: "{model_name=" + quoted + "}"}
	s.writeMetrics(&w)
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetBody(w.b)
	*bp = w.b
	metricsBufs.Put(bp)
}

func (s *Server) writeMetrics(w *promWriter) {
	ready := 0.0
	if s.loaded.Load() && !s.draining.Load() {
		ready = 1
	}
	w.gauge("govinfer:ready", "1 once the model is loaded, 0 while loading or draining.", ready)
	ev := s.events.Stats()
	w.counter("govinfer:kv_events_batches_total", "KV-cache event batches published.", float64(ev.Batches))
	w.counter("govinfer:kv_events_dropped_batches_total", "KV-cache event batches dropped because the socket could not keep up.", float64(ev.DroppedBatches))
	if !s.loaded.Load() {
		return
	}
	st := s.lm.Stats()
	s.writeLoRAMetrics(w, float64(time.Now().UnixNano())/1e9)
	w.gauge("vllm:num_requests_running", "Requests in the running batch.", float64(st.Running))
	w.gauge("vllm:num_requests_waiting", "Requests waiting to start.", float64(st.Waiting))
	w.gauge("vllm:kv_cache_usage_perc", "Fraction of the state-memory budget held by running sequences (0 to 1).", st.KVCacheUsage)
	w.gauge("vllm:gpu_cache_usage_perc", "Fraction of the state-memory budget held by running sequences (0 to 1; vLLM's older name).", st.KVCacheUsage)
	bs, blocks := s.lm.CacheBlocks()
	w.header("vllm:cache_config_info", "Prefix-cache block size in tokens and the state-memory budget in blocks.", "gauge")
	w.labels("vllm:cache_config_info")
	w.b = append(w.b, `,block_size="`...)
	w.b = strconv.AppendInt(w.b, int64(bs), 10)
	w.b = append(w.b, `",num_gpu_blocks="`...)
	w.b = strconv.AppendInt(w.b, int64(blocks), 10)
	w.b = append(w.b, `"}`...)
	w.value(1)
	w.gauge("govinfer:open_sequences", "Model sequences held by requests.", float64(st.OpenSequences))
	w.gauge("govinfer:state_bytes", "Memory of the running sequences' KV caches and recurrent states.", float64(st.StateBytes))
	w.counter("vllm:prompt_tokens_total", "Prompt tokens prefilled.", float64(st.PromptTokens))
	for _, prefix := range []string{"vllm:", "vllm:gpu_"} {
		w.counter(prefix+"prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", float64(st.PrefixQueryTokens))
		w.counter(prefix+"prefix_cache_hits_total", "Prompt tokens resumed from the prefix cache.", float64(st.PrefixHitTokens))
	}
	w.gauge("govinfer:prefix_cache_bytes", "Memory of the prefix cache's kept points and KV blocks.", float64(st.State.Cached))
	w.gauge("govinfer:prefix_cache_points", "Kept points in the prefix cache.", float64(st.State.CachedPoints))
	d, h := st.PrefixDisk, st.PrefixHost
	if d.Budget > 0 || h.Budget > 0 { // --prefix-cache-dir, --prefix-cache-host: vLLM's names for a KV connector's hits
		lower := st.PrefixDiskHitTokens + st.PrefixHostHitTokens
		w.counter("vllm:external_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache with its tiers below memory.", float64(st.PrefixQueryTokens))
		w.counter("vllm:external_prefix_cache_hits_total", "Prompt tokens resumed from prefix states read from host memory or disk.", float64(lower))
		w.counter("govinfer:prefix_cache_memory_hits_total", "Prompt tokens resumed from prefix states in memory.", float64(st.PrefixHitTokens-lower))
		tiers := []struct {
			name          string
			on            bool
			hits          uint64
			bytes         int64
			written, read float64
		}{
			{"memory", true, st.PrefixHitTokens - lower, st.State.Cached, 0, 0},
			{"host", h.Budget > 0, st.PrefixHostHitTokens, h.Bytes, float64(h.WriteBytes), float64(h.ReadBytes)},
			{"disk", d.Budget > 0, st.PrefixDiskHitTokens, d.Bytes, float64(d.WriteBytes), float64(d.ReadBytes)},
		}
		for _, m := range []struct {
			name, help, typ string
			v               func(i int) float64
			lowerOnly       bool
		}{
			{"govinfer:prefix_cache_tier_hits_total", "Prompt tokens resumed from prefix states each tier supplied (memory: --state-memory, host: --prefix-cache-host, disk: --prefix-cache-dir).", "counter",
				func(i int) float64 { return float64(tiers[i].hits) }, false},
			{"govinfer:prefix_cache_tier_bytes", "Bytes of prefix states each tier holds.", "gauge", func(i int) float64 { return float64(tiers[i].bytes) }, false},
			{"govinfer:prefix_cache_tier_written_bytes_total", "Bytes of prefix states copied into each tier below memory.", "counter", func(i int) float64 { return tiers[i].written }, true},
			{"govinfer:prefix_cache_tier_read_bytes_total", "Bytes of prefix states copied back to memory from each tier below it.", "counter", func(i int) float64 { return tiers[i].read }, true},
		} {
			w.header(m.name, m.help, m.typ)
			for i, t := range tiers {
				if !t.on || m.lowerOnly && i == 0 {
					continue
				}
				w.labels(m.name)
				w.b = append(w.b, `,tier="`...)
				w.b = append(w.b, t.name...)
				w.b = append(w.b, `"}`...)
				w.value(m.v(i))
			}
		}
	}
	if h.Budget > 0 {
		w.gauge("govinfer:prefix_cache_host_budget_bytes", "The host tier's budget (--prefix-cache-host).", float64(h.Budget))
	}
	if d.Budget > 0 {
		w.gauge("govinfer:prefix_cache_disk_bytes", "Bytes of the prefix cache's files on disk.", float64(d.Bytes))
		w.gauge("govinfer:prefix_cache_disk_budget_bytes", "The disk tier's budget (--prefix-cache-disk).", float64(d.Budget))
		w.counter("govinfer:prefix_cache_disk_written_bytes_total", "Bytes of prefix states written to disk.", float64(d.WriteBytes))
		w.counter("govinfer:prefix_cache_disk_read_bytes_total", "Bytes of prefix states read from disk.", float64(d.ReadBytes))
		w.counter("govinfer:prefix_cache_disk_dropped_writes_total", "Prefix states not written: the disk was slower than eviction.", float64(d.Dropped))
		w.counter("govinfer:prefix_cache_disk_corrupt_files_total", "Prefix cache files skipped as corrupt or foreign, and removed.", float64(d.Corrupt))
	}
	w.gauge("govinfer:state_memory_budget_bytes", "The state memory budget (--state-memory).", float64(st.State.Budget))
	w.gauge("govinfer:state_memory_running_bytes", "State memory reserved by running requests.", float64(st.State.Running))
	w.counter("vllm:generation_tokens_total", "Tokens generated.", float64(st.GenerationTokens))
	w.counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens speculative decoding proposed.", float64(st.SpecDraftTokens))
	w.counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens speculative decoding accepted.", float64(st.SpecAcceptedTokens))
	w.counter("govinfer:steps_total", "Model steps run.", float64(st.Steps))
	w.counter("govinfer:step_seconds_total", "Time spent in model steps.", st.StepSeconds)
	w.counter("govinfer:requests_rejected_total", "Requests refused because the queue was full.", float64(st.Rejected))
	w.header("vllm:request_success_total", "Finished requests by reason.", "counter")
	for _, f := range []struct {
		reason string
		n      uint64
	}{{"stop", st.Finished.Stop}, {"length", st.Finished.Length}, {"cancelled", st.Finished.Cancelled}, {"error", st.Finished.Error}} {
		w.labels("vllm:request_success_total")
		w.b = append(w.b, `,finished_reason="`...)
		w.b = append(w.b, f.reason...)
		w.b = append(w.b, `"}`...)
		w.uint(f.n)
	}
	w.histogram("vllm:time_to_first_token_seconds", "Time to first token.", st.TimeToFirstToken)
	w.histogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens of a request.", st.InterToken)
	w.header("govinfer:http_responses_total", "HTTP responses by status.", "counter")
	s.httpCount.Range(func(k, v any) bool {
		w.b = append(w.b, `govinfer:http_responses_total{code="`...)
		w.b = strconv.AppendInt(w.b, int64(k.(int)), 10)
		w.b = append(w.b, `"}`...)
		w.uint(v.(interface{ Load() uint64 }).Load())
		return true
	})
}
