package httpapi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// metricValue returns the value of a series line (name and labels as
// written) in a scrape.
func metricValue(t *testing.T, scrape, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		t.Fatalf("no %s in\n%s", series, scrape)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRouterMetrics(t *testing.T) {
	s := startServer(t, Config{}, llm.Options{MaxNumSeqs: 4, StateMemory: 64 << 20})
	_, data := get(t, s, "/metrics")
	idle := string(data)
	perToken := s.Model().StateMemory().PerToken
	info := fmt.Sprintf(`vllm:cache_config_info{model_name="test-model",block_size="64",num_gpu_blocks="%d"}`, (64<<20)/(64*perToken))
	if metricValue(t, idle, info) != 1 {
		t.Errorf("cache_config_info is not 1")
	}
	for _, name := range []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} {
		if v := metricValue(t, idle, name+`{model_name="test-model"}`); v != 0 {
			t.Errorf("%s idle: %v", name, v)
		}
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
		metricValue(t, idle, name+`{model_name="test-model"}`)
	}
	if !strings.Contains(idle, "# TYPE vllm:cache_config_info gauge") {
		t.Error("cache_config_info has no TYPE line")
	}

	// While a long request runs, usage is the state it reserved over the
	// budget.
	body := chatBody("go", 1500)
	body["ignore_eos"] = true
	stream := startStream(t, s, "/v1/chat/completions", body)
	waitFor(t, func() bool { return s.Model().Stats().Running == 1 })
	_, data = get(t, s, "/metrics")
	scrape := string(data)
	usage := metricValue(t, scrape, `vllm:kv_cache_usage_perc{model_name="test-model"}`)
	if usage <= 0 || usage > 1 || usage != metricValue(t, scrape, `vllm:gpu_cache_usage_perc{model_name="test-model"}`) {
		t.Errorf("usage %v while running", usage)
	}
	running := metricValue(t, scrape, `govinfer:state_memory_running_bytes{model_name="test-model"}`)
	if want := running / (64 << 20); usage != want {
		t.Errorf("usage %v, want the running requests' %v bytes over the budget = %v", usage, running, want)
	}
	<-stream
}
