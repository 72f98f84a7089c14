package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/engine"
)

// TestChatSpeculative serves vl-tiny (which carries an MTP head) with and
// without --speculative-config: a greedy chat answers the same text,
// usage details the accepted and rejected draft tokens, and /metrics
// counts them; a checkpoint without mtp.* weights fails to load.
func TestChatSpeculative(t *testing.T) {
	dir := vlCheckpoint(t)
	body := map[string]any{"model": "test-model", "max_tokens": 12, "temperature": 0, "ignore_eos": true,
		"messages": []any{map[string]any{"role": "user", "content": "Count from one to ten."}}}
	type details struct {
		Accepted *int `json:"accepted_prediction_tokens"`
		Rejected *int `json:"rejected_prediction_tokens"`
	}
	var res [2]struct {
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int     `json:"completion_tokens"`
			Details          details `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	var metrics string
	for i, spec := range []engine.Speculative{{}, {Method: "mtp", Tokens: 2}} {
		s := startServer(t, Config{ModelDir: dir, Speculative: spec})
		code, data := post(t, s, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("spec %+v: status %d: %s", spec, code, data)
		}
		if err := json.Unmarshal(data, &res[i]); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			_, m := get(t, s, "/metrics")
			metrics = string(m)
		}
		s.Close()
	}
	plain, spec := res[0], res[1]
	if plain.Choices[0].Message != spec.Choices[0].Message || plain.Usage.CompletionTokens != spec.Usage.CompletionTokens {
		t.Errorf("speculative answer %+v (%d tokens), plain %+v (%d tokens)", spec.Choices[0].Message, spec.Usage.CompletionTokens,
			plain.Choices[0].Message, plain.Usage.CompletionTokens)
	}
	if d := plain.Usage.Details; d.Accepted != nil || d.Rejected != nil {
		t.Errorf("plain usage has prediction tokens: %+v", d)
	}
	d := spec.Usage.Details
	if d.Accepted == nil || d.Rejected == nil {
		t.Fatalf("speculative usage lacks prediction tokens")
	}
	drafted := *d.Accepted + *d.Rejected
	if drafted <= 0 || drafted%2 != 0 || *d.Accepted < 0 || *d.Rejected < 0 {
		t.Errorf("accepted %d, rejected %d: want non-negative counts of whole rounds of 2", *d.Accepted, *d.Rejected)
	}
	for _, want := range []string{
		fmt.Sprintf(`vllm:spec_decode_num_draft_tokens_total{model_name="test-model"} %d`, drafted),
		fmt.Sprintf(`vllm:spec_decode_num_accepted_tokens_total{model_name="test-model"} %d`, *d.Accepted),
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The test checkpoint of checkpoint(t) has no MTP head.
	s, err := Start(context.Background(), Config{ModelDir: checkpoint(t), Addr: "127.0.0.1:0", Speculative: engine.Speculative{Method: "mtp", Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitReady(context.Background()); err == nil || !strings.Contains(err.Error(), "mtp") {
		t.Errorf("loading without mtp.* weights: %v, want an error naming mtp", err)
	} else {
		t.Log(err)
	}
}
