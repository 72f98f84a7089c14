package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
)

// answer is what request isolation compares: the generated content, tool
// calls (name and arguments; ids are per request), finish reason, and the
// token ids and logprob tokens when the server returns them. Logprob values
// are not compared: they are floats a batched kernel may round differently
// even when every token is the same.
type answer struct {
	Content       string
	Reasoning     string
	ToolCalls     []string
	FinishReason  string
	TokenIDs      []int
	LogprobTokens []string
}

// answerOf extracts the compared parts of a chat completion.
func answerOf(r *chatResponse) answer {
	var a answer
	if len(r.Choices) == 0 {
		return a
	}
	ch := r.Choices[0]
	a.Content = deref(ch.Message.Content)
	a.Reasoning = deref(ch.Message.Reasoning) + deref(ch.Message.ReasoningContent)
	for _, tc := range ch.Message.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, tc.Function.Name+" "+canonicalJSON(tc.Function.Arguments))
	}
	a.FinishReason = deref(ch.FinishReason)
	a.TokenIDs = ch.TokenIDs
	var lp struct {
		Content []struct {
			Token string `json:"token"`
		} `json:"content"`
	}
	if len(ch.Logprobs) > 0 && json.Unmarshal(ch.Logprobs, &lp) == nil {
		for _, t := range lp.Content {
			a.LogprobTokens = append(a.LogprobTokens, t.Token)
		}
	}
	return a
}

// canonicalJSON re-encodes a JSON text so key order and spacing do not
// matter; text that is not JSON is returned as is.
func canonicalJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return s
	}
	return string(bytes.TrimSpace(b.Bytes()))
}

// runIsolation sends every check's request at once and compares each answer
// with its solo answer. solo holds the solo responses by check index (nil
// entries are fetched alone first). It returns whether every answer matched,
// the mismatches, and the requests that broke.
func runIsolation(ctx context.Context, c *client, model string, checks []BehaviorCheck, solo []*chatResponse) (bool, []string, error) {
	for i, ch := range checks {
		if solo[i] != nil {
			continue
		}
		res, err := c.chat(ctx, ch.request(model))
		if err != nil {
			return false, nil, fmt.Errorf("isolation: solo %s: %w", ch.ID, err)
		}
		solo[i] = &res.parsed
	}
	type outcome struct {
		resp chatResponse
		err  error
	}
	out := make([]outcome, len(checks))
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i, ch := range checks {
		wg.Go(func() {
			<-start
			res, err := c.chat(ctx, ch.request(model))
			out[i] = outcome{res.parsed, err}
		})
	}
	close(start)
	wg.Wait()
	var mismatches []string
	for i, ch := range checks {
		if out[i].err != nil {
			return false, nil, fmt.Errorf("isolation: concurrent %s: %w", ch.ID, out[i].err)
		}
		want, got := answerOf(solo[i]), answerOf(&out[i].resp)
		if !reflect.DeepEqual(want, got) {
			mismatches = append(mismatches, fmt.Sprintf("%s: alone %+v, concurrent %+v", ch.ID, want, got))
		}
	}
	return len(mismatches) == 0, mismatches, nil
}
