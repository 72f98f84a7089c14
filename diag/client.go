package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxBodyBytes bounds how much of a non-streamed response body is read.
const maxBodyBytes = 64 << 20

// client talks to one OpenAI-compatible server.
type client struct {
	baseURL string
	apiKey  string
	timeout time.Duration // per request, streams included; 0 means none
	http    *http.Client
	// now reads the clock for stream timings (nil: time.Now); tests set a
	// scripted one, so that timing assertions do not depend on how soon
	// the client gets to read an event.
	now func() time.Time
}

// clock returns the current time from c.now, or time.Now.
func (c *client) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// HTTPError is a non-2xx answer from the server.
type HTTPError struct {
	// Endpoint is the path that was requested.
	Endpoint string
	// StatusCode is the HTTP status.
	StatusCode int
	// Body is the start of the response body.
	Body string
}

// Error names the endpoint, the status and the start of the body.
func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Endpoint, e.StatusCode, e.Body)
}

// errNotJSON marks a body that is not valid JSON.
var errNotJSON = errors.New("response is not valid JSON")

// do sends a request and returns the body of a 2xx answer. A non-2xx answer
// returns the body too (it is often an OpenAI-shaped error) with an
// *HTTPError.
func (c *client) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", method, path, c.explain(ctx, err))
	}
	if resp.StatusCode/100 != 2 {
		return data, &HTTPError{Endpoint: path, StatusCode: resp.StatusCode, Body: snippet(data)}
	}
	return data, nil
}

// withTimeout applies the per-request timeout to ctx.
func (c *client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeoutCause(ctx, c.timeout,
			fmt.Errorf("request timed out after %s", c.timeout))
	}
	return context.WithCancel(ctx)
}

// send builds and sends one request; the caller closes the response body.
func (c *client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, c.explain(ctx, err))
	}
	return resp, nil
}

// explain replaces a bare context error with the context's cause (such as
// the per-request timeout) so messages say what happened.
func (c *client) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			return fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return err
}

// snippet returns the start of a body for error messages.
func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// modelInfo is one entry of GET /v1/models.
type modelInfo struct {
	ID          string `json:"id"`
	MaxModelLen int    `json:"max_model_len"`
}

// models lists the served models.
func (c *client) models(ctx context.Context) ([]modelInfo, error) {
	data, err := c.do(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []modelInfo `json:"data"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("/v1/models: %w: %v", errNotJSON, err)
	}
	return list.Data, nil
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model              string          `json:"model,omitempty"`
	Messages           []message       `json:"messages"`
	MaxTokens          int             `json:"max_tokens"`
	Temperature        float64         `json:"temperature"`
	Tools              []tool          `json:"tools,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	StreamOptions      *streamOptions  `json:"stream_options,omitempty"`
	ChatTemplateKwargs map[string]bool `json:"chat_template_kwargs,omitempty"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type tool struct {
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatResponse is the part of a chat completion the judges read.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content          *string    `json:"content"`
			Reasoning        *string    `json:"reasoning"`
			ReasoningContent *string    `json:"reasoning_content"`
			ToolCalls        []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string         `json:"finish_reason"`
		TokenIDs     []int           `json:"token_ids"`
		Logprobs     json.RawMessage `json:"logprobs"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type toolCall struct {
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// content returns the first choice's content ("" when absent).
func (r *chatResponse) content() string {
	if len(r.Choices) == 0 || r.Choices[0].Message.Content == nil {
		return ""
	}
	return *r.Choices[0].Message.Content
}

// finishReason returns the first choice's finish_reason ("" when absent).
func (r *chatResponse) finishReason() string {
	if len(r.Choices) == 0 || r.Choices[0].FinishReason == nil {
		return ""
	}
	return *r.Choices[0].FinishReason
}

// chatResult is one non-streamed chat completion.
type chatResult struct {
	raw     json.RawMessage // the body, when it is valid JSON
	parsed  chatResponse
	seconds float64
}

// chat sends a non-streamed chat completion. The raw body is returned
// whenever it is valid JSON, even with an error (an HTTP error body).
func (c *client) chat(ctx context.Context, req chatRequest) (chatResult, error) {
	start := time.Now()
	data, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", req)
	res := chatResult{seconds: time.Since(start).Seconds()}
	if json.Valid(data) {
		res.raw = json.RawMessage(data)
	}
	if err != nil {
		return res, err
	}
	if res.raw == nil {
		return res, fmt.Errorf("/v1/chat/completions: %w: %s", errNotJSON, snippet(data))
	}
	if err := json.Unmarshal(data, &res.parsed); err != nil {
		return res, fmt.Errorf("/v1/chat/completions: unexpected response shape: %w", err)
	}
	if len(res.parsed.Choices) == 0 {
		return res, fmt.Errorf("/v1/chat/completions: response has no choices: %s", snippet(data))
	}
	return res, nil
}

// tokenize counts the tokens of a chat prompt through vLLM's POST /tokenize.
// It returns an *HTTPError with status 404 or 405 when the server has no such
// endpoint.
func (c *client) tokenize(ctx context.Context, model string, msgs []message) (int, error) {
	body := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": true,
		"chat_template_kwargs":  noThinking(),
	}
	if model != "" {
		body["model"] = model
	}
	data, err := c.do(ctx, http.MethodPost, "/tokenize", body)
	if err != nil {
		return 0, err
	}
	var out struct {
		Count  *int  `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("/tokenize: %w: %v", errNotJSON, err)
	}
	if out.Count != nil {
		return *out.Count, nil
	}
	if out.Tokens != nil {
		return len(out.Tokens), nil
	}
	return 0, fmt.Errorf("/tokenize: response has neither count nor tokens: %s", snippet(data))
}

// noThinking returns the chat_template_kwargs that disable Qwen3.5 thinking.
func noThinking() map[string]bool { return map[string]bool{"enable_thinking": false} }
