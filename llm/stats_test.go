package llm_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// spanRecorder records the spans a prefix-cache observer is told of.
type spanRecorder struct {
	mu              sync.Mutex
	stored, removed []llm.PrefixSpan
}

func (r *spanRecorder) PrefixStored(sp llm.PrefixSpan) {
	r.mu.Lock()
	r.stored = append(r.stored, sp)
	r.mu.Unlock()
}

func (r *spanRecorder) PrefixRemoved(sp llm.PrefixSpan) {
	r.mu.Lock()
	r.removed = append(r.removed, sp)
	r.mu.Unlock()
}

func (r *spanRecorder) storedBlocks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, sp := range r.stored {
		n += len(sp.BlockHashes)
	}
	return n
}

// TestServerFacts checks what a server reads of a model: its name, the
// counters, the state memory in blocks and the prefix cache's changes.
func TestServerFacts(t *testing.T) {
	const budget = 64 << 20
	m, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048, StateMemory: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n, err := llm.MaxModelLenOf(checkpointDir, llm.Options{}); err != nil || n != 8192 {
		t.Errorf("MaxModelLenOf = %d, %v; want the test checkpoint's context, 8192", n, err)
	}
	if n, _ := llm.MaxModelLenOf(checkpointDir, llm.Options{MaxModelLen: 2048}); n != m.MaxModelLen() {
		t.Errorf("MaxModelLenOf = %d, Open gave %d", n, m.MaxModelLen())
	}
	if m.Name() == "" || strings.Contains(m.Name(), "/") || m.BackendName() == "" {
		t.Errorf("name %q, backend %q", m.Name(), m.BackendName())
	}
	bs, blocks := m.CacheBlocks()
	if want := int(budget / (llm.PrefixBlock * m.StateMemory().PerToken)); bs != llm.PrefixBlock || blocks != want {
		t.Errorf("CacheBlocks = %d, %d; want %d, %d", bs, blocks, llm.PrefixBlock, want)
	}

	var first, second spanRecorder
	removeFirst := m.ObservePrefixCache(&first)
	m.ObservePrefixCache(&second)
	prompt := strings.Repeat("The engine schedules prefill in chunks. ", 20)
	params := greedy(4)
	params.IgnoreEOS = true
	complete := func(text string) {
		t.Helper()
		st, err := m.Complete(context.Background(), llm.CompletionRequest{Prompts: []llm.Prompt{{Text: text}}, Params: params})
		if err != nil {
			t.Fatal(err)
		}
		for range st.Events() {
		}
		st.Close()
	}
	complete(prompt)
	st := m.Stats()
	if st.Finished.Length != 1 || st.GenerationTokens != 4 || st.PromptTokens == 0 || st.Running != 0 {
		t.Errorf("stats after one request: %+v", st)
	}
	if st.KVCacheUsage != 0 || st.State.Budget != budget || st.TimeToFirstToken.Count != 1 {
		t.Errorf("idle usage %v, state %+v, TTFT count %d", st.KVCacheUsage, st.State, st.TimeToFirstToken.Count)
	}
	if first.storedBlocks() == 0 || first.storedBlocks() != second.storedBlocks() {
		t.Fatalf("observers saw %d and %d stored blocks", first.storedBlocks(), second.storedBlocks())
	}
	removeFirst()
	before := first.storedBlocks()
	complete("Something else entirely. " + prompt)
	if first.storedBlocks() != before {
		t.Error("a removed observer was called")
	}
	if second.storedBlocks() <= before {
		t.Error("the observer left was not called")
	}
}
