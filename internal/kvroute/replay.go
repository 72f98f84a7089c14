package kvroute

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/kvevents"
)

// Policies of Replay.
const (
	RoundRobin = "round-robin" // each request to the next server
	Events     = "events"      // to the server whose events match most of the prompt
)

// Server is one replica: its API base URL and its KV-events endpoint.
type Server struct {
	URL    string // such as http://127.0.0.1:8000
	Events string // such as tcp://127.0.0.1:5557
}

// Config configures a Replay.
type Config struct {
	Servers []Server
	// Model is the served model name (the block hashes' root).
	Model string
	// BlockSize is the router's block size in tokens.
	BlockSize int
	// Policy is RoundRobin or Events.
	Policy string
	// Conversations, Turns and MaxTokens shape the workload: that many
	// conversations of that many user turns, each answered in at most
	// MaxTokens tokens, interleaved turn by turn.
	Conversations, Turns, MaxTokens int
	// Seed makes the conversations' text; replays with different seeds
	// share no prefix.
	Seed uint64
	// Settle is how long to wait after each response for its events.
	Settle time.Duration
	// Log, when set, gets one line per request.
	Log io.Writer
}

// Turn is one request of a replay.
type Turn struct {
	Conversation, Turn, Server int
	PromptTokens               int
	// CachedTokens is usage.prompt_tokens_details.cached_tokens; the
	// server reported it when HasCached.
	CachedTokens int
	HasCached    bool
	// SpanMatch is what the events said the chosen server can skip
	// (Index.SpanMatch) when the request was sent; MatchBlocks the
	// blocks the router credited it with (Index.Match).
	SpanMatch, MatchBlocks int
	TTFT                   time.Duration
}

// Result sums up a replay.
type Result struct {
	Policy                   string
	Requests                 int
	PromptTokens, Cached     int
	Prefilled                int // prompt tokens the servers prefilled: prompt - cached
	HitRate                  float64
	MeanTTFT                 time.Duration
	EventBatches, EventError int
	// SpanMismatches counts requests whose cached tokens differ from
	// SpanMatch (only where the server reports cached tokens).
	SpanMismatches int
	Turns          []Turn
}

// words are the vocabulary of the generated conversations.
var words = strings.Fields(`the a of to and in that is for on with as was at by from this it be are an or
have not but what all were when we there can more if no out so said up its about into than them only other
new some could time these two may then first any like now my such make over our even most after also did
many before must through back years where much your way well down should because each just those people how
too little state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came right used
take three system model server cache token prompt replica route block state memory request stream event`)

// text returns n words drawn with r.
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// conversation is one replayed chat.
type conversation struct {
	messages []any
	r        *rand.Rand
}

func newConversation(seed uint64, i int) *conversation {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	system := fmt.Sprintf("You are assistant %d of run %d. %s", i, seed, text(r, 250))
	return &conversation{messages: []any{map[string]any{"role": "system", "content": system}}, r: r}
}

func (c *conversation) ask() {
	c.messages = append(c.messages, map[string]any{"role": "user", "content": text(c.r, 30) + "?"})
}

func (c *conversation) answer(reply string) {
	c.messages = append(c.messages, map[string]any{"role": "assistant", "content": reply})
}

// Replay runs the workload of cfg over its servers, routed by its policy,
// and sums up what the servers prefilled.
func Replay(ctx context.Context, cfg Config) (*Result, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("kvroute: no servers")
	}
	if cfg.Policy != RoundRobin && cfg.Policy != Events {
		return nil, fmt.Errorf("kvroute: policy %q: want %s or %s", cfg.Policy, RoundRobin, Events)
	}
	h, err := kvevents.NewHasher("", cfg.Model, cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	idx := NewIndex(h)
	res := &Result{Policy: cfg.Policy}
	var resMu sync.Mutex
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, s := range cfg.Servers {
		if s.Events == "" {
			continue
		}
		msgs, err := kvevents.Subscribe(sctx, s.Events, "kv@")
		if err != nil {
			return nil, err
		}
		pod := strconv.Itoa(i)
		go func() {
			for m := range msgs {
				resMu.Lock()
				res.EventBatches++
				if m.Err != nil {
					res.EventError++
				}
				resMu.Unlock()
				if m.Err == nil {
					if err := idx.Apply(pod, m.Batch); err != nil {
						resMu.Lock()
						res.EventError++
						resMu.Unlock()
						if cfg.Log != nil {
							fmt.Fprintf(cfg.Log, "events: %v\n", err)
						}
					}
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // ZeroMQ subscriptions take a moment

	convs := make([]*conversation, cfg.Conversations)
	for i := range convs {
		convs[i] = newConversation(cfg.Seed, i)
	}
	next := 0
	var ttft time.Duration
	for turn := range cfg.Turns {
		for ci, c := range convs {
			c.ask()
			body := map[string]any{"model": cfg.Model, "messages": c.messages,
				"chat_template_kwargs": map[string]any{"enable_thinking": false}}
			ids, err := render(ctx, cfg.Servers[0].URL, body)
			if err != nil {
				return nil, err
			}
			choice := next % len(cfg.Servers)
			next++
			best := 0
			if cfg.Policy == Events {
				for pod, n := range idx.Match(ids) {
					p, _ := strconv.Atoi(pod)
					if n > best || n == best && best > 0 && p < choice {
						best, choice = n, p
					}
				}
			} else {
				best = idx.Match(ids)[strconv.Itoa(choice)]
			}
			t := Turn{Conversation: ci, Turn: turn, Server: choice, MatchBlocks: best, SpanMatch: idx.SpanMatch(strconv.Itoa(choice), ids)}
			body["max_tokens"], body["temperature"], body["stream"] = cfg.MaxTokens, 0, true
			body["stream_options"] = map[string]any{"include_usage": true}
			reply, err := chat(ctx, cfg.Servers[choice].URL, body, &t)
			if err != nil {
				return nil, err
			}
			c.answer(reply)
			if t.PromptTokens != len(ids) {
				return nil, fmt.Errorf("kvroute: server %d prefilled %d tokens for a prompt rendered as %d", choice, t.PromptTokens, len(ids))
			}
			res.Turns = append(res.Turns, t)
			res.Requests++
			res.PromptTokens += t.PromptTokens
			res.Cached += t.CachedTokens
			if t.HasCached && t.CachedTokens != t.SpanMatch {
				res.SpanMismatches++
			}
			ttft += t.TTFT
			if cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "%s conv %2d turn %d -> server %d: prompt %5d cached %5d (events: %d blocks, spans to %d) ttft %6.1f ms\n",
					cfg.Policy, ci, turn, choice, t.PromptTokens, t.CachedTokens, t.MatchBlocks, t.SpanMatch, float64(t.TTFT.Microseconds())/1e3)
			}
			time.Sleep(cfg.Settle)
		}
	}
	res.Prefilled = res.PromptTokens - res.Cached
	if res.PromptTokens > 0 {
		res.HitRate = float64(res.Cached) / float64(res.PromptTokens)
	}
	if res.Requests > 0 {
		res.MeanTTFT = ttft / time.Duration(res.Requests)
	}
	resMu.Lock()
	defer resMu.Unlock()
	return res, nil
}

// post sends a JSON body and returns the response.
func post(ctx context.Context, url string, body any) (*http.Response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kvroute: %w", err)
	}
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("kvroute: %s: %d %s", url, resp.StatusCode, data)
	}
	return resp, nil
}

// render returns the token ids of a chat request (the router's
// token-producer does the same).
func render(ctx context.Context, base string, body map[string]any) ([]int, error) {
	resp, err := post(ctx, base+"/v1/chat/completions/render", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		TokenIDs []int `json:"token_ids"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("kvroute: render: %w", err)
	}
	return r.TokenIDs, nil
}

// chat streams a chat completion, fills t's usage and TTFT, and returns
// the answer's text.
func chat(ctx context.Context, base string, body map[string]any, t *Turn) (string, error) {
	start := time.Now()
	resp, err := post(ctx, base+"/v1/chat/completions", body)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var reply strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			return "", fmt.Errorf("kvroute: a stream chunk: %w: %s", err, line)
		}
		if chunk.Error != nil {
			return "", fmt.Errorf("kvroute: generation failed: %s", chunk.Error.Message)
		}
		for _, c := range chunk.Choices {
			for _, s := range []*string{c.Delta.Content, c.Delta.Reasoning} {
				if s != nil && *s != "" {
					if t.TTFT == 0 {
						t.TTFT = time.Since(start)
					}
					if s == c.Delta.Content {
						reply.WriteString(*s)
					}
				}
			}
		}
		if u := chunk.Usage; u != nil {
			t.PromptTokens = u.PromptTokens
			if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
				t.CachedTokens, t.HasCached = *d.CachedTokens, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("kvroute: reading the stream: %w", err)
	}
	if t.TTFT == 0 {
		t.TTFT = time.Since(start)
	}
	return reply.String(), nil
}
