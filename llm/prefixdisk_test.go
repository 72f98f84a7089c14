package llm_test

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// TestPrefixCacheDirRestart: through the Go API, a conversation's state
// written by a closed model is resumed by the next one opened on the same
// directory (a restart), with the tokens and logprobs of a cold model.
func TestPrefixCacheDirRestart(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	o := llm.Options{MaxModelLen: 2048, PrefixCacheDir: dir, PrefixCacheDisk: 1 << 30,
		PrefixCacheLog: func(f string, a ...any) { log.WriteString(f) }}
	req := llm.ChatRequest{Messages: []llm.Message{
		{Role: "system", Content: strings.Repeat("You are a careful coding agent. Read before you write. ", 12)},
		{Role: "user", Content: "Find where the engine schedules prefill."},
	}, Params: llm.Params{MaxTokens: 8, IgnoreEOS: true, Logprobs: true, Seed: llm.Uint64(5)}}
	first, err := llm.Open(checkpointDir, o)
	if err != nil {
		t.Fatal(err)
	}
	chatLogprobs(t, first, req)
	if _, err := llm.Open(checkpointDir, o); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second model on the directory: %v", err)
	}
	first.Close()

	second, err := llm.Open(checkpointDir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// A new observer is told first what the disk holds: the prompt's
	// blocks, up to where it resumes.
	var onDisk diskRecorder
	remove := second.ObservePrefixCache(&onDisk)
	_, ids, err := second.ChatPrompt(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := onDisk.diskTokens(); n < len(ids)-llm.PrefixBlock || n > len(ids) {
		t.Errorf("the disk's spans hold %d tokens; the prompt has %d", n, len(ids))
	}
	remove()
	got, _, u := chatLogprobs(t, second, req)
	want, _, _ := chatLogprobs(t, openModel(t), llm.ChatRequest{Messages: req.Messages, Params: req.Params})
	if u.CachedTokens < u.PromptTokens-llm.PrefixBlock {
		t.Errorf("after a restart %d of %d prompt tokens were resumed", u.CachedTokens, u.PromptTokens)
	}
	for i := range want[0] {
		if got[0][i].ID != want[0][i].ID || math.Float64bits(got[0][i].Logprob) != math.Float64bits(want[0][i].Logprob) {
			t.Fatalf("token %d after a restart: %+v, want %+v", i, got[0][i], want[0][i])
		}
	}
	st := second.Stats()
	if st.PrefixDiskHitTokens == 0 || st.PrefixDisk.Reads == 0 || !strings.Contains(second.PrefixCacheDisk(), dir) {
		t.Errorf("disk hits %d tokens, %+v; %q", st.PrefixDiskHitTokens, st.PrefixDisk, second.PrefixCacheDisk())
	}
	if log.Len() > 0 {
		t.Errorf("logged %q", log.String())
	}
}

// TestPrefixCacheHostOnCPU: on the CPU backend the memory tier is host
// memory already; a host tier is refused at open, saying so.
func TestPrefixCacheHostOnCPU(t *testing.T) {
	lm, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 1024, PrefixCacheHost: 1 << 20})
	if err == nil {
		lm.Close()
		t.Fatal("a host tier opened on the CPU backend")
	}
	if !strings.Contains(err.Error(), "host memory already") {
		t.Errorf("error %q does not say why", err)
	}
	if _, err := llm.Open(checkpointDir, llm.Options{PrefixCacheHost: -1}); err == nil {
		t.Error("a negative host tier opened")
	}
}

// diskRecorder records the spans stored in the disk tier.
type diskRecorder struct {
	mu    sync.Mutex
	spans []llm.PrefixSpan
}

func (r *diskRecorder) PrefixStored(sp llm.PrefixSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sp.Tier == llm.PrefixTierDisk {
		r.spans = append(r.spans, sp)
	}
}

func (r *diskRecorder) PrefixRemoved(llm.PrefixSpan) {}

// diskTokens returns the end of the deepest span.
func (r *diskRecorder) diskTokens() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := 0
	for _, sp := range r.spans {
		end = max(end, sp.End)
	}
	return end
}
