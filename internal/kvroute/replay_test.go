package kvroute

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

// TestEventsMatchCachedTokens replays multi-turn conversations against a
// server publishing KV events and checks, at every turn, that the longest
// chain of whole spans the events announced that matches the prompt ends
// exactly at the cached_tokens the server then reports: the events say
// where the server resumes, no more and no less. A server without a prefix
// cache reports no cached tokens; then it must announce no span.
func TestEventsMatchCachedTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("replays conversations through a server")
	}
	dir := t.TempDir()
	if err := testckpt.Write(dir, "../../testdata"); err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.StartLoading(context.Background(), dir, llm.Options{MaxModelLen: 8192},
		httpapi.Config{Addr: "127.0.0.1:0", ServedModelName: "m", KVEvents: "tcp://127.0.0.1:0", PodID: "pod-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	res, err := Replay(context.Background(), Config{
		Servers: []Server{{URL: "http://" + srv.Addr(), Events: "tcp://" + srv.Events().Addr()}},
		Model:   "m", BlockSize: httpapi.BlockSize, Policy: Events,
		Conversations: 2, Turns: 3, MaxTokens: 8, Seed: 1, Settle: 100 * time.Millisecond, Log: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay:\n%s", log.String())
	if res.Requests != 6 || res.EventError != 0 {
		t.Fatalf("%d requests, %d event errors", res.Requests, res.EventError)
	}
	reported := 0
	for _, turn := range res.Turns {
		if turn.PromptTokens <= 0 {
			t.Errorf("turn %+v prefilled nothing", turn)
		}
		if turn.HasCached {
			reported++
			if turn.CachedTokens != turn.SpanMatch {
				t.Errorf("conversation %d turn %d: the events' spans end at %d tokens, the server reused %d",
					turn.Conversation, turn.Turn, turn.SpanMatch, turn.CachedTokens)
			}
		} else if turn.SpanMatch != 0 {
			t.Errorf("conversation %d turn %d: no cached tokens reported, yet the events announce %d resumable tokens",
				turn.Conversation, turn.Turn, turn.SpanMatch)
		}
	}
	if reported == 0 {
		t.Log("the server reports no cached_tokens (no prefix cache): checked that it announces no span")
	}
}
