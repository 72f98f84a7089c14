package diag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"
)

// Decode-run settings, as in the seed.
const (
	decodeMaxTokens   = 128
	decodeCountedRuns = 3
)

// decodePrompt is the fixed prompt of the timed decode runs.
const decodePrompt = "Explain in one detailed paragraph why batch-one decoding of a large language model " +
	"is usually limited by memory bandwidth rather than by compute."

// streamChunk is the part of a chat.completion.chunk the decode runs read.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content          *string `json:"content"`
			Reasoning        *string `json:"reasoning"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	// Error is set by servers that report a failure inside the stream.
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// decodeRequest is the request of every decode run.
func decodeRequest(model string) chatRequest {
	return chatRequest{
		Model:              model,
		Messages:           []message{{Role: "user", Content: decodePrompt}},
		MaxTokens:          decodeMaxTokens,
		Temperature:        0,
		Stream:             true,
		StreamOptions:      &streamOptions{IncludeUsage: true},
		ChatTemplateKwargs: noThinking(),
	}
}

// decodeRun sends one streamed greedy completion and times it: TTFT from
// sending the request to the first non-empty text delta, decode time from
// that delta to the finish event, and decode tokens/s excluding the first
// token. Without a usage chunk, completion tokens are counted as the number
// of non-empty text deltas (one token per delta, as vLLM streams greedily).
func (c *client) decodeRun(ctx context.Context, model string) (*DecodeRun, error) {
	const path = "/v1/chat/completions"
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	start := c.clock()
	resp, err := c.send(ctx, http.MethodPost, path, decodeRequest(model))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &HTTPError{Endpoint: path + " (stream)", StatusCode: resp.StatusCode, Body: snippet(data)}
	}
	var (
		text       []byte
		first      time.Time
		finish     time.Time
		deltas     int
		usageRaw   json.RawMessage
		doneMarker bool
	)
	events := newSSEReader(resp.Body)
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s (stream): %w", path, c.explain(ctx, err))
		}
		if data == "[DONE]" {
			doneMarker = true
			break
		}
		var chunk streamChunk
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return nil, fmt.Errorf("%s (stream): bad chunk %q: %w", path, snippet([]byte(data)), err)
		}
		if chunk.Error != nil {
			return nil, fmt.Errorf("%s (stream): server error in stream: %s", path, chunk.Error.Message)
		}
		now := c.clock()
		if len(chunk.Usage) > 0 && string(chunk.Usage) != "null" {
			usageRaw = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			piece := deref(ch.Delta.Content) + deref(ch.Delta.Reasoning) + deref(ch.Delta.ReasoningContent)
			if piece != "" {
				if first.IsZero() {
					first = now
				}
				deltas++
				text = append(text, piece...)
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" && finish.IsZero() {
				finish = now
			}
		}
	}
	if finish.IsZero() {
		if doneMarker {
			return nil, fmt.Errorf("%s (stream): no chunk carried a finish_reason", path)
		}
		return nil, fmt.Errorf("%s (stream): stream ended before the finish event", path)
	}
	if first.IsZero() {
		return nil, fmt.Errorf("%s (stream): the stream carried no text", path)
	}
	completion := deltas
	if usageRaw != nil {
		var u usage
		if err := json.Unmarshal(usageRaw, &u); err != nil {
			return nil, fmt.Errorf("%s (stream): bad usage %s: %w", path, snippet(usageRaw), err)
		}
		completion = u.CompletionTokens
	}
	run := &DecodeRun{
		Text:          string(text),
		Usage:         usageRaw,
		TTFTMillis:    float64(first.Sub(start)) / float64(time.Millisecond),
		DecodeSeconds: finish.Sub(first).Seconds(),
		TimingScope:   TimingScope,
	}
	if run.Usage == nil {
		run.Usage = json.RawMessage("null")
	}
	if completion > 1 && run.DecodeSeconds > 0 {
		run.DecodeTokensPerSecond = float64(completion-1) / run.DecodeSeconds
	}
	return run, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// median returns the median of the runs' decode tokens/s (0 for none).
func median(runs []DecodeRun) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = r.DecodeTokensPerSecond
	}
	return medianOf(v)
}

// medianOf returns the median of v (0 for none); v is sorted in place.
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// parseUsage decodes a usage object; ok is false for null or bad JSON.
func parseUsage(raw json.RawMessage) (u usage, ok bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return u, false
	}
	return u, json.Unmarshal(raw, &u) == nil
}
