package httpapi

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model"
)

// TestStateBytesFormula checks the state the metrics assume per sequence
// against what a sequence allocates, at a length where its KV cache is
// full (the minimum capacity, 256 tokens) and at one it has grown to.
func TestStateBytesFormula(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m, err := model.Open(checkpoint(t), model.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fixed, perToken := stateBytes(m.Config())
	if fixed <= 0 || perToken <= 0 {
		t.Fatalf("fixed %d, per token %d", fixed, perToken)
	}
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	if seq.StateBytes() != fixed {
		t.Errorf("an empty sequence holds %d bytes, the formula says %d", seq.StateBytes(), fixed)
	}
	toks := make([]int, 256)
	for i := range toks {
		toks[i] = i + 10
	}
	for _, n := range []int{256, 512} {
		if _, err := m.Step(context.Background(), []model.Input{{Seq: seq, Tokens: toks, Logits: model.NoLogits}}); err != nil {
			t.Fatal(err)
		}
		if want := fixed + int64(n)*perToken; seq.StateBytes() != want {
			t.Errorf("%d tokens: %d bytes, the formula says %d", n, seq.StateBytes(), want)
		}
	}
}

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
	s := startServer(t, Config{MaxNumSeqs: 4})
	_, data := get(t, s, "/metrics")
	idle := string(data)
	info := fmt.Sprintf(`vllm:cache_config_info{model_name="test-model",block_size="64",num_gpu_blocks="%d"}`, 4*2048/64)
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

	// While a long request runs, usage is its state over the budget of
	// four sequences of 2048 tokens.
	body := chatBody("go", 1500)
	body["ignore_eos"] = true
	stream := startStream(t, s, "/v1/chat/completions", body)
	waitFor(t, func() bool { return s.Engine().Stats().StateBytes > 0 })
	_, data = get(t, s, "/metrics")
	scrape := string(data)
	usage := metricValue(t, scrape, `vllm:kv_cache_usage_perc{model_name="test-model"}`)
	if usage <= 0 || usage > 1 || usage != metricValue(t, scrape, `vllm:gpu_cache_usage_perc{model_name="test-model"}`) {
		t.Errorf("usage %v while running", usage)
	}
	// The request's KV cache has some power-of-two capacity (the engine
	// may step between the two reads of a scrape, so not necessarily the
	// one govinfer:state_bytes shows).
	fixed, perToken := stateBytes(s.lm.Config())
	budget := float64(4 * (fixed + 2048*perToken))
	ok := false
	for c := int64(256); c <= 2048; c *= 2 {
		ok = ok || usage == float64(fixed+c*perToken)/budget
	}
	if !ok {
		t.Errorf("usage %v is not one sequence's state over the budget of %v bytes", usage, budget)
	}
	<-stream
}
