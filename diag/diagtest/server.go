// Package diagtest provides a scripted fake OpenAI-compatible chat server for
// testing the diag runner and its command: it answers the diag checks right
// or wrong, or misbehaves (malformed bodies, slowness, HTTP 500s, dropped
// streams, answers that change under concurrency), in vLLM's response shape.
package diagtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Mode selects how the fake server answers chat completions.
type Mode int

// The fake server's modes.
const (
	// Right answers every diag check correctly.
	Right Mode = iota
	// Wrong answers every check with a well-formed wrong answer.
	Wrong
	// Malformed answers chat completions with HTTP 200 and a body that is
	// not JSON (streams included).
	Malformed
	// Slow answers right, but only after Config.Delay.
	Slow
	// ServerError answers chat completions with HTTP 500 and an
	// OpenAI-shaped error.
	ServerError
	// DropStream answers non-streamed requests right and cuts every stream
	// after a few chunks by dropping the connection.
	DropStream
	// Interfering answers right when a request is alone and wrong when
	// requests overlap, as a server without request isolation might.
	Interfering
)

// Config describes a fake server.
type Config struct {
	// Mode selects the behaviour of chat completions.
	Mode Mode
	// ModelID is the served model id (default "diagtest/fake").
	ModelID string
	// MaxModelLen is reported by /v1/models and enforced on prompts
	// (default 4096).
	MaxModelLen int
	// Tokenize serves vLLM's POST /tokenize when true; otherwise the
	// endpoint is 404 and clients must probe usage.prompt_tokens.
	Tokenize bool
	// Delay is the wait of Slow mode.
	Delay time.Duration
	// VaryDecode makes every stream's text differ from the last one's.
	VaryDecode bool
	// APIKey, when set, is required as a bearer token.
	APIKey string
}

// Server is a running fake server.
type Server struct {
	*httptest.Server
	cfg      Config
	inflight atomic.Int32
	streams  atomic.Int32
	requests atomic.Int32
}

// Requests returns how many chat completion requests the server has received.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// NewServer starts a fake server on a loopback port; Close it when done.
func NewServer(cfg Config) *Server {
	if cfg.ModelID == "" {
		cfg.ModelID = "diagtest/fake"
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 4096
	}
	s := &Server{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	if cfg.Tokenize {
		mux.HandleFunc("POST /tokenize", s.tokenize)
	}
	s.Server = httptest.NewServer(s.auth(mux))
	return s
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
			writeError(w, http.StatusUnauthorized, "invalid api key")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.cfg.ModelID, "object": "model", "created": 1700000000, "owned_by": "diagtest",
		"max_model_len": s.cfg.MaxModelLen,
	}}})
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	MaxTokens int           `json:"max_tokens"`
	Stream    bool          `json:"stream"`
	Tools     []any         `json:"tools"`
}

// countTokens is the fake tokenizer: one token per white-space separated
// word plus a fixed template overhead per message and for the generation
// prompt.
func countTokens(msgs []chatMessage) int {
	n := 5
	for _, m := range msgs {
		n += 4 + len(strings.Fields(m.Content))
	}
	return n
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []chatMessage `json:"messages"`
		Prompt   string        `json:"prompt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	n := countTokens(req.Messages)
	if req.Messages == nil {
		n = len(strings.Fields(req.Prompt))
	}
	writeJSON(w, map[string]any{"count": n, "max_model_len": s.cfg.MaxModelLen, "tokens": make([]int, n)})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	inflight := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages: must not be empty")
		return
	}
	if req.Model != "" && req.Model != s.cfg.ModelID {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	prompt := countTokens(req.Messages)
	if prompt+req.MaxTokens > s.cfg.MaxModelLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. "+
			"However, you requested %d tokens (%d in the messages, %d in the completion). "+
			"Please reduce the length of the messages or completion.",
			s.cfg.MaxModelLen, prompt+req.MaxTokens, prompt, req.MaxTokens))
		return
	}
	switch s.cfg.Mode {
	case Malformed:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id": "chatcmpl-broken", "choices": [`)
		return
	case ServerError:
		writeError(w, http.StatusInternalServerError, "internal error: the engine fell over")
		return
	case Slow:
		select {
		case <-time.After(s.cfg.Delay):
		case <-r.Context().Done():
			return
		}
	}
	right := true
	switch s.cfg.Mode {
	case Wrong:
		right = false
	case Interfering:
		time.Sleep(30 * time.Millisecond) // let concurrent requests overlap
		right = inflight == 1 && s.inflight.Load() == 1
	}
	if req.Stream {
		s.stream(w, req, prompt)
		return
	}
	content, calls := answerFor(req.Messages[len(req.Messages)-1].Content, len(req.Tools) > 0, right)
	writeJSON(w, completion(s.cfg.ModelID, content, calls, prompt))
}

// script pairs a prompt cue with its right and wrong answers.
type script struct{ cue, right, wrong string }

// scripts are the answers to the diag behaviour prompts, found by a cue in
// the prompt.
var scripts = [...]script{
	{"17 multiplied by 23", "391", "392"},
	{`"name"`, `{"name": "Ada", "age": 37}`, `{"name": "Ada", "age": "37"}`},
	{"Sort these integers", "[-2, 0, 5, 8]", "[0, -2, 5, 8]"},
	{"into French", "bonjour", "Bonjour!"},
	{"enero", "31", "treinta y uno"},
	{"日本の首都", "東京", "京都"},
	{"is_even", "def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return n & 1 == 0"},
	{"e-mail address", "mira@example.org", "Mira Lindqvist"},
	{"apples", "14", "12"},
	{"three colours", "violet", "Violet."},
}

var codeRE = regexp.MustCompile(`secret access code is (\d{4})`)

// answerFor returns the scripted content (nil for none) and tool calls.
func answerFor(prompt string, tools, right bool) (any, []any) {
	if tools {
		if !right {
			return "I cannot check the weather.", nil
		}
		return nil, []any{map[string]any{
			"id": "chatcmpl-tool-0123456789abcdef", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Oslo"}`},
		}}
	}
	if m := codeRE.FindStringSubmatch(prompt); m != nil {
		if right {
			return m[1], nil
		}
		return "I do not know.", nil
	}
	for _, sc := range scripts {
		if strings.Contains(prompt, sc.cue) {
			if right {
				return sc.right, nil
			}
			return sc.wrong, nil
		}
	}
	return "I am a scripted fake and have no answer to that.", nil
}

// completion builds a chat.completion in vLLM's shape (that of the seed).
func completion(model string, content any, calls []any, prompt int) map[string]any {
	finish := "stop"
	if calls != nil {
		finish = "tool_calls"
	} else {
		calls = []any{}
	}
	n := 1
	if s, ok := content.(string); ok {
		n = max(1, len(strings.Fields(s)))
	}
	return map[string]any{
		"id": "chatcmpl-0123456789abcdef", "object": "chat.completion", "created": time.Now().Unix(),
		"model": model,
		"choices": []any{map[string]any{
			"index": 0,
			"message": map[string]any{
				"role": "assistant", "content": content, "refusal": nil, "annotations": nil,
				"audio": nil, "function_call": nil, "tool_calls": calls, "reasoning": nil,
			},
			"logprobs": nil, "finish_reason": finish, "stop_reason": nil, "token_ids": nil,
		}},
		"service_tier": nil, "system_fingerprint": nil,
		"usage": map[string]any{
			"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n,
			"prompt_tokens_details": nil,
		},
		"prompt_logprobs": nil, "prompt_token_ids": nil, "kv_transfer_params": nil,
	}
}

// stream sends max_tokens words as chat.completion.chunk events, then the
// finish chunk, the usage chunk and [DONE].
func (s *Server) stream(w http.ResponseWriter, req chatRequest, prompt int) {
	n := s.streams.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model":   s.cfg.ModelID,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i := range req.MaxTokens {
		if s.cfg.Mode == DropStream && i == 5 {
			panic(http.ErrAbortHandler) // drops the connection mid-stream
		}
		word := fmt.Sprintf(" word%d", i%17)
		if i == 0 {
			word = "Decoding"
			if s.cfg.VaryDecode {
				word = fmt.Sprintf("Variant%d", n)
			}
		}
		send(chunk(map[string]any{"content": word}, nil))
		time.Sleep(100 * time.Microsecond)
	}
	send(chunk(map[string]any{}, "length"))
	send(map[string]any{
		"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": time.Now().Unix(),
		"model": s.cfg.ModelID, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "total_tokens": prompt + req.MaxTokens, "completion_tokens": req.MaxTokens},
	})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": http.StatusText(code), "param": nil, "code": code,
	}})
}
