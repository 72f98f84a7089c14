package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// TestKVEventsTiers: with the disk tier, a router that indexes the events
// by medium can tell where a conversation's prefix is. On the CPU backend
// memory is "CPU": a prefix evicted from memory is removed from "CPU" and
// stored on "FS", and read back it is stored on "CPU" again (and stays on
// "FS"). /metrics reports hits and bytes per tier.
func TestKVEventsTiers(t *testing.T) {
	probe := startServer(t, Config{})
	sm := probe.Model().StateMemory()
	probe.Close()
	// One request of about 560 tokens running and one 512-token prefix
	// cached, no more.
	budget := 2*sm.PerSequence + (562+512+8)*sm.PerToken
	s := startServer(t, Config{KVEvents: "tcp://127.0.0.1:0", PodID: "p"},
		llm.Options{StateMemory: budget, MaxNumSeqs: 1, PrefixCacheDir: t.TempDir(), PrefixCacheDisk: 1 << 30})
	msgs := subscribeEvents(t, s)
	index := map[string]map[uint64]bool{}
	drain := func() []kvevents.Event {
		var evs []kvevents.Event
		for {
			select {
			case m := <-msgs:
				if m.Err != nil {
					t.Fatal(m.Err)
				}
				for _, ev := range m.Batch.Events {
					med := strings.ToLower(ev.Medium)
					if med == "" {
						med = "gpu"
					}
					switch ev.Tag {
					case kvevents.TagBlockStored:
						if index[med] == nil {
							index[med] = map[uint64]bool{}
						}
						for _, h := range ev.Hashes {
							index[med][h] = true
						}
					case kvevents.TagBlockRemoved:
						for _, h := range ev.Hashes {
							delete(index[med], h)
						}
					case kvevents.TagAllBlocksCleared:
						clear(index)
					}
				}
				evs = append(evs, m.Batch.Events...)
			case <-time.After(300 * time.Millisecond):
				return evs
			}
		}
	}
	drain()
	chat := func(system string) {
		t.Helper()
		body := map[string]any{"model": "test-model", "max_tokens": 4, "ignore_eos": true, "messages": []any{
			map[string]any{"role": "system", "content": strings.Repeat(system+" ", 60)},
			map[string]any{"role": "user", "content": "Go on."},
		}}
		if code, out := post(t, s, "/v1/chat/completions", body); code != http.StatusOK {
			t.Fatalf("%d %s", code, out)
		}
	}
	// The deepest block of a conversation's stored spans is where it resumes.
	chat("Answer every question about the weather with care.")
	var last uint64
	for _, ev := range drain() {
		if ev.Tag == kvevents.TagBlockStored {
			if ev.Medium != kvevents.MediumCPU {
				t.Errorf("memory's BlockStored on %q, want %q", ev.Medium, kvevents.MediumCPU)
			}
			last = ev.Hashes[len(ev.Hashes)-1]
		}
	}
	if last == 0 {
		t.Fatal("no BlockStored")
	}
	where := func() (cpu, fs bool) { return index["cpu"][last], index["fs"][last] }
	if cpu, fs := where(); !cpu || fs {
		t.Errorf("after the first conversation: in memory %v, on disk %v; want memory only", cpu, fs)
	}
	chat("Describe old trains and their engines in detail.")
	drain()
	if cpu, fs := where(); cpu || !fs {
		t.Errorf("after another conversation: in memory %v, on disk %v; want disk only", cpu, fs)
	}
	chat("Answer every question about the weather with care.")
	drain()
	if cpu, fs := where(); !cpu || !fs {
		t.Errorf("after reading it back: in memory %v, on disk %v; want both", cpu, fs)
	}
	_, metrics := get(t, s, "/metrics")
	for _, name := range []string{`govinfer:prefix_cache_tier_hits_total{model_name="test-model",tier="disk"}`,
		`govinfer:prefix_cache_tier_bytes{model_name="test-model",tier="disk"}`,
		`govinfer:prefix_cache_tier_read_bytes_total{model_name="test-model",tier="disk"}`,
		`govinfer:prefix_cache_tier_bytes{model_name="test-model",tier="memory"}`} {
		found := false
		for _, l := range strings.Split(string(metrics), "\n") {
			if strings.HasPrefix(l, name+" ") && !strings.HasSuffix(l, " 0") {
				found = true
			}
		}
		if !found {
			t.Errorf("no nonzero %s in /metrics", name)
		}
	}
}
