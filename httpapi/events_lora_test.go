package httpapi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// TestKVEventsLoRA: a prompt run with a LoRA adapter is announced with the
// adapter's lora_name and lora_id, in blocks a router computes from the
// request's model (the adapter's name); the same prompt on the base model
// is announced without them, in other blocks.
func TestKVEventsLoRA(t *testing.T) {
	s := startServerDir(t, smallCheckpoint(t), Config{KVEvents: "tcp://127.0.0.1:0", PodID: "p"},
		llm.Options{LoRA: []llm.LoRAAdapter{{Name: "a", Path: loraPath("lora-small-a")}}})
	msgs := subscribeEvents(t, s)
	stored := func() []kvevents.Event {
		var evs []kvevents.Event
		for {
			select {
			case m := <-msgs:
				if m.Err != nil {
					t.Fatal(m.Err)
				}
				for _, ev := range m.Batch.Events {
					if ev.Tag == kvevents.TagBlockStored {
						evs = append(evs, ev)
					}
				}
			case <-time.After(300 * time.Millisecond):
				return evs
			}
		}
	}
	prompt, _ := loraPrompt(t, "lora-small-a") // 130 tokens
	httpTokens(t, s, prompt, 2, map[string]any{"model": "a"})
	withA := stored()
	httpTokens(t, s, prompt, 2, nil)
	base := stored()
	if len(withA) == 0 || len(base) == 0 {
		t.Fatalf("stored events: %d with the adapter, %d without", len(withA), len(base))
	}
	check := func(what, model string, evs []kvevents.Event, name string, id int) {
		var hashes []uint64
		var tokens []int
		for _, ev := range evs {
			if ev.LoRAName != name || ev.LoRAID != id {
				t.Errorf("%s: event with lora_name %q lora_id %d, want %q %d", what, ev.LoRAName, ev.LoRAID, name, id)
			}
			hashes = append(hashes, ev.Hashes...)
			tokens = append(tokens, ev.Tokens...)
		}
		h, err := kvevents.NewHasher("", model, evs[0].BlockSize)
		if err != nil {
			t.Fatal(err)
		}
		if want := h.Keys(tokens); !slices.Equal(hashes, want) {
			t.Errorf("%s: blocks %v, a router hashing for model %q gets %v", what, hashes, model, want)
		}
		if !slices.Equal(tokens, prompt[:len(tokens)]) {
			t.Errorf("%s: tokens are not the prompt's", what)
		}
	}
	check("adapter", "a", withA, "a", 1)
	check("base", "test-model", base, "", 0)
}

// subscribeEvents subscribes to s's KV events until the test ends and
// returns the messages once the subscription is live: ZeroMQ drops what
// is published before, so AllCleared is published until one arrives.
func subscribeEvents(t *testing.T, s *Server) <-chan kvevents.Received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := kvevents.Subscribe(ctx, "tcp://"+s.Events().Addr(), "kv@")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		s.Events().AllCleared()
		select {
		case <-msgs:
			return msgs
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("no event reached the subscriber")
	return nil
}
