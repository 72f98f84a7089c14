package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/llm"
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
		s := startServerDir(t, dir, Config{}, llm.Options{Speculative: spec})
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
	s, err := StartLoading(context.Background(), checkpoint(t), llm.Options{Speculative: engine.Speculative{Method: "mtp", Tokens: 2}},
		Config{Addr: "127.0.0.1:0"})
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

// TestSpeculativeUsage checks the draft counts in the usage of
// /v1/completions (completion_tokens_details, only where speculation ran)
// and of /v1/responses (output_tokens_details), and that /v1/messages,
// whose usage has no field for them, answers the same text either way.
func TestSpeculativeUsage(t *testing.T) {
	dir := vlCheckpoint(t)
	bodies := map[string]map[string]any{
		"/v1/completions": {"model": "test-model", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true},
		"/v1/responses":   {"model": "test-model", "input": "Count from one to ten.", "max_output_tokens": 12, "temperature": 0},
		"/v1/messages": {"model": "test-model", "max_tokens": 12, "temperature": 0,
			"messages": []any{map[string]any{"role": "user", "content": "Count from one to ten."}}},
	}
	type counts struct {
		Accepted *int `json:"accepted_prediction_tokens"`
		Rejected *int `json:"rejected_prediction_tokens"`
	}
	var got [2]map[string]json.RawMessage // path → usage
	var texts [2]map[string]string
	for i, spec := range []engine.Speculative{{}, {Method: "mtp", Tokens: 3}} {
		s := startServerDir(t, dir, Config{}, llm.Options{Speculative: spec})
		got[i], texts[i] = map[string]json.RawMessage{}, map[string]string{}
		for path, body := range bodies {
			code, data := post(t, s, path, body)
			if code != 200 {
				t.Fatalf("%s spec %+v: status %d: %s", path, spec, code, data)
			}
			var res struct {
				Usage   json.RawMessage `json:"usage"`
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
				Content []struct {
					Text     string `json:"text"`
					Thinking string `json:"thinking"`
				} `json:"content"`
			}
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			got[i][path] = res.Usage
			texts[i][path] = fmt.Sprint(res.Choices, res.Content) // not the signatures, which differ
		}
		s.Close()
	}
	for path := range bodies {
		if texts[0][path] != texts[1][path] {
			t.Errorf("%s: speculative answer %s, plain %s", path, texts[1][path], texts[0][path])
		}
	}
	var plainComp, specComp struct {
		Details *counts `json:"completion_tokens_details"`
	}
	json.Unmarshal(got[0]["/v1/completions"], &plainComp)
	json.Unmarshal(got[1]["/v1/completions"], &specComp)
	if plainComp.Details != nil {
		t.Errorf("plain completion usage has details: %s", got[0]["/v1/completions"])
	}
	var plainResp, specResp struct {
		Details counts `json:"output_tokens_details"`
	}
	json.Unmarshal(got[0]["/v1/responses"], &plainResp)
	json.Unmarshal(got[1]["/v1/responses"], &specResp)
	if plainResp.Details.Accepted != nil || plainResp.Details.Rejected != nil {
		t.Errorf("plain response usage has prediction tokens: %s", got[0]["/v1/responses"])
	}
	for path, c := range map[string]*counts{"/v1/completions": specComp.Details, "/v1/responses": &specResp.Details} {
		if c == nil || c.Accepted == nil || c.Rejected == nil || *c.Accepted < 0 || *c.Rejected < 0 || (*c.Accepted+*c.Rejected)%3 != 0 || *c.Accepted+*c.Rejected == 0 {
			t.Errorf("%s: speculative usage %s: want accepted and rejected counts of whole rounds of 3", path, got[1][path])
		}
	}
	if strings.Contains(string(got[1]["/v1/messages"]), "prediction") {
		t.Errorf("messages usage names prediction tokens: %s", got[1]["/v1/messages"])
	}
}
