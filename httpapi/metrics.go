package httpapi

import (
	"fmt"
	"strconv"

	"github.com/govinfer/govinfer/engine"
	"github.com/valyala/fasthttp"
)

// handleMetrics writes the Prometheus text exposition.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	b := ctx.Response.BodyWriter()
	label := "{model_name=" + strconv.Quote(s.name) + "}"
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s%s %v\n", name, help, name, name, label, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s%s %v\n", name, help, name, name, label, v)
	}
	ready := 0.0
	if s.loaded.Load() {
		ready = 1
	}
	gauge("govinfer:ready", "1 once the model is loaded.", ready)
	eng := s.Engine()
	if eng == nil {
		return
	}
	st := eng.Stats()
	gauge("vllm:num_requests_running", "Requests in the running batch.", float64(st.Running))
	gauge("vllm:num_requests_waiting", "Requests waiting to start.", float64(st.Waiting))
	gauge("govinfer:open_sequences", "Model sequences held by requests.", float64(st.OpenSequences))
	gauge("govinfer:state_bytes", "Memory of the running sequences' KV caches and recurrent states.", float64(st.StateBytes))
	counter("vllm:prompt_tokens_total", "Prompt tokens prefilled.", float64(st.PromptTokens))
	for _, prefix := range []string{"vllm:", "vllm:gpu_"} {
		counter(prefix+"prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", float64(st.PrefixQueryTokens))
		counter(prefix+"prefix_cache_hits_total", "Prompt tokens resumed from the prefix cache.", float64(st.PrefixHitTokens))
	}
	gauge("govinfer:prefix_cache_bytes", "Memory of the prefix cache's kept points and KV blocks.", float64(st.State.Cached))
	gauge("govinfer:prefix_cache_points", "Kept points in the prefix cache.", float64(st.State.CachedPoints))
	gauge("govinfer:state_memory_budget_bytes", "The state memory budget (--state-memory).", float64(st.State.Budget))
	gauge("govinfer:state_memory_running_bytes", "State memory reserved by running requests.", float64(st.State.Running))
	counter("vllm:generation_tokens_total", "Tokens generated.", float64(st.GenerationTokens))
	counter("govinfer:steps_total", "Model steps run.", float64(st.Steps))
	counter("govinfer:step_seconds_total", "Time spent in model steps.", st.StepSeconds)
	counter("govinfer:requests_rejected_total", "Requests refused because the queue was full.", float64(st.Rejected))
	fmt.Fprintf(b, "# HELP vllm:request_success_total Finished requests by reason.\n# TYPE vllm:request_success_total counter\n")
	for _, f := range []engine.FinishReason{engine.FinishStop, engine.FinishLength, engine.FinishCancelled, engine.FinishError} {
		fmt.Fprintf(b, "vllm:request_success_total{model_name=%s,finished_reason=%q} %d\n", strconv.Quote(s.name), f.String(), st.Finished[f])
	}
	histogram := func(name, help string, h engine.HistogramSnapshot) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		for i, ub := range h.Bounds {
			fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"%v\"} %d\n", name, strconv.Quote(s.name), ub, h.Cumulative[i])
		}
		fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"+Inf\"} %d\n", name, strconv.Quote(s.name), h.Count)
		fmt.Fprintf(b, "%s_sum%s %v\n%s_count%s %d\n", name, label, h.Sum, name, label, h.Count)
	}
	histogram("vllm:time_to_first_token_seconds", "Time to first token.", st.TimeToFirstToken)
	histogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens of a request.", st.InterToken)
	fmt.Fprintf(b, "# HELP govinfer:http_responses_total HTTP responses by status.\n# TYPE govinfer:http_responses_total counter\n")
	s.httpCount.Range(func(k, v any) bool {
		fmt.Fprintf(b, "govinfer:http_responses_total{code=\"%d\"} %d\n", k, v.(interface{ Load() uint64 }).Load())
		return true
	})
}
