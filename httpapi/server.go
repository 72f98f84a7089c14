// Package httpapi serves a model over vLLM's OpenAI-compatible HTTP API on
// fasthttp: chat and text completions (streamed as server-sent events or
// not), model listing, health, Prometheus metrics, tokenization and the
// render endpoints a router tokenizes with. It drains before it stops (see
// Drain) and can publish KV-cache events for prefix-aware routers
// (Config.KVEvents, package kvevents).
//
// The server serves an llm.Model: one the program opened (Start), or one
// it opens itself once it listens (StartLoading), answering 503 while the
// model loads. It only maps the wire format: requests become
// llm.ChatRequest and llm.CompletionRequest, run on the model (so
// concurrent requests share model steps, continuous batching), and the llm
// events become responses or server-sent events; metrics, KV events and
// the cache facts routers read come from llm too. Every response has the keys vLLM's has; errors are
// {"error": {"message", "type", "param", "code"}} and name the request field
// at fault, a 503 says when to retry (Retry-After) and every rejected
// request gets a log line. A client that disconnects, streaming or not,
// running or still queued, is noticed at once (watchDisconnect) and its
// request cancelled, freeing its sequence or its place in the queue.
//
// Connections are capped (Config.MaxConnections), idle and slow ones timed
// out, and running out of file descriptors pauses accepting instead of
// stopping the server.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govinfer/govinfer/httpapi/webui"
	"github.com/govinfer/govinfer/internal/version"
	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:8000"
	DefaultMaxBodyBytes   = 32 << 20 // a few-MB photo, base64 (4/3), fits
	DefaultMaxConnections = 1024
	DefaultIdleTimeout    = 60 * time.Second
	DefaultReadTimeout    = 30 * time.Second
	// retryAfter is the Retry-After of a 503, in seconds.
	retryAfter = "1"
)

// Config configures a Server: how it listens and answers. How the model
// runs (its batch and queue, context, state memory, images, speculative
// decoding) is the llm.Model's, set by llm.Options.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free one. Empty
	// means DefaultAddr.
	Addr string
	// ServedModelName is the model id clients use; empty means the model's
	// name (llm.Model.Name: the base name of its directory or file).
	ServedModelName string
	// APIKey, when set, must be sent as "Authorization: Bearer KEY" on
	// the /v1 endpoints.
	APIKey string
	// MaxBodyBytes bounds a request body (413 past it). Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int
	// AllowedMediaDomains are the hosts (exact names or IP addresses)
	// image URLs may be fetched from; none by default, so only data: URLs
	// are taken. Loopback and private addresses are refused unless listed
	// as addresses. MediaMaxBytes bounds a fetched image (zero means
	// DefaultMediaMaxBytes), MediaTimeout its fetch (zero means
	// DefaultMediaTimeout); redirects must stay on the same host.
	AllowedMediaDomains []string
	MediaMaxBytes       int
	MediaTimeout        time.Duration
	// Log receives one line per request; nil discards them.
	Log io.Writer
	// LogPrompts adds the prompt text to the request log lines.
	LogPrompts bool
	// KVEvents, when set, is the ZeroMQ endpoint the server publishes
	// its KV-cache events on (package kvevents), such as "tcp://*:5557".
	KVEvents string
	// KVEventsTopic is the events' topic; empty means
	// kvevents.Topic(PodID, the served model name).
	KVEventsTopic string
	// PodID names this replica in the default topic; empty means the
	// host name.
	PodID string
	// MaxConnections caps the open connections (fasthttp's Concurrency);
	// past it a new connection gets a 503 and is closed. Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// IdleTimeout closes a keep-alive connection idle that long;
	// ReadTimeout bounds reading a request, headers and body, so slow
	// clients cannot hold connections. Zero means the defaults.
	IdleTimeout, ReadTimeout time.Duration
	// ResponsesStoreMax and ResponsesStoreBytes bound the responses the
	// Responses API keeps for previous_response_id and GET (store: true),
	// in count and in bytes; the oldest go first. Zero means
	// DefaultResponsesStoreMax and DefaultResponsesStoreBytes; a negative
	// value keeps none.
	ResponsesStoreMax   int
	ResponsesStoreBytes int64
	// NoWebUI turns the chat page off (package webui): GET and HEAD / and
	// everything under webui.Prefix answer 404. Otherwise browsers (whose
	// Accept names text/html) get the chat page at /, other clients the JSON
	// description of the server.
	NoWebUI bool
	// ReasoningKey seals the reasoning handed to clients that keep it
	// themselves (the Responses API's encrypted_content, the Messages
	// API's thinking signatures), so that they can send it back and
	// nobody can forge it. Replicas and restarts that share it read each
	// other's; empty means a random key made at start.
	ReasoningKey []byte
	// Version is the govinfer version the server states: in /v1/models
	// (govinfer_version), GET /version, GET / and its start-up log lines.
	// Empty means internal/version's, which govinfer --version prints.
	Version string
	// EnableLoRA turns on loading and unloading LoRA adapters at run time
	// (POST /v1/load_lora_adapter and /v1/unload_lora_adapter, vLLM's,
	// and llama-server's POST /lora-adapters), behind the API key.
	// Adapters attached at open (llm.Options.LoRA) are served either way.
	EnableLoRA bool
}

// Defaults of the Responses API's store (Config.ResponsesStoreMax,
// Config.ResponsesStoreBytes).
const (
	DefaultResponsesStoreMax   = 1000
	DefaultResponsesStoreBytes = 256 << 20
)

// Server is a running API server.
type Server struct {
	cfg    Config
	name   string
	ln     net.Listener
	srv    *fasthttp.Server
	ctx    context.Context // cancelled by Close; parent of request contexts
	cancel context.CancelFunc
	served chan error

	ready   chan struct{} // closed once the model is loaded (or failed)
	loadErr error
	loaded  atomic.Bool

	draining atomic.Bool  // Drain was called
	active   atomic.Int64 // admitted API requests not answered in full
	events   *kvevents.Publisher
	// loadingMaxLen is max_model_len as /v1/models shows it before the
	// model is loaded (0 when unknown).
	loadingMaxLen int

	// Set before ready is closed, read-only afterwards.
	lm          *llm.Model
	maxModelLen int
	started     time.Time // when the server began listening
	ownsModel   bool      // StartLoading opened lm: Close closes it
	unobserve   func()    // ends the KV events' observation of lm
	created     int64

	sealer    *reasoningSealer // reasoning handed to clients
	responses *responseStore   // the Responses API's stored responses
	media     *media           // resolves image URLs

	requests     atomic.Uint64 // request ids
	loraRequests sync.Map      // adapter name -> *atomic.Uint64 (govinfer:lora_requests_total)
	httpCount    sync.Map      // status code -> *atomic.Uint64
	closeOnce    sync.Once
	logMu        sync.Mutex
}

// Start listens on cfg.Addr and serves lm, a model the program opened
// (llm.Open), at once. The model stays the program's: Close ends the
// server's requests on it but does not close it, and the program may use
// it beside the server. Cancelling ctx closes the server.
func Start(ctx context.Context, lm *llm.Model, cfg Config) (*Server, error) {
	if lm == nil {
		return nil, errors.New("httpapi: no model")
	}
	s, err := listen(ctx, cfg, cmp.Or(cfg.ServedModelName, lm.Name()), lm.MaxModelLen())
	if err != nil {
		return nil, err
	}
	s.serve(lm)
	return s, nil
}

// StartLoading listens on cfg.Addr at once and opens the checkpoint in dir
// in the background, as llm.Open(dir, o) does. Until the model is loaded
// /health and the API endpoints answer 503, and /v1/models states the
// model with the max_model_len of its configuration (llm.MaxModelLenOf);
// a model that fails to load leaves them at 503 (WaitReady returns why)
// until Close. The server owns the model: Close closes it. Cancelling ctx
// closes the server.
func StartLoading(ctx context.Context, dir string, o llm.Options, cfg Config) (*Server, error) {
	if dir == "" {
		return nil, errors.New("httpapi: no model directory")
	}
	maxLen, err := llm.MaxModelLenOf(dir, o)
	if err != nil {
		maxLen = 0 // unknown until loaded; the load says why
	}
	// The default name is llm.Model.Name's.
	s, err := listen(ctx, cfg, cmp.Or(cfg.ServedModelName, filepath.Base(filepath.Clean(dir))), maxLen)
	if err != nil {
		return nil, err
	}
	s.logf("loading model=%q addr=%s version=%s: /health answers 503 until it is ready", s.name, s.Addr(), s.cfg.Version)
	go s.load(dir, o)
	return s, nil
}

// listen starts a server that answers as loading until serve hands it a
// model (or load fails).
func listen(ctx context.Context, cfg Config, name string, loadingMaxLen int) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Version == "" {
		cfg.Version = version.String()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxConnections < 0 || cfg.IdleTimeout < 0 || cfg.ReadTimeout < 0 {
		return nil, errors.New("httpapi: max connections and timeouts must not be negative")
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	sealer, err := newReasoningSealer(cfg.ReasoningKey)
	if err != nil {
		return nil, err
	}
	if cfg.ResponsesStoreMax == 0 {
		cfg.ResponsesStoreMax = DefaultResponsesStoreMax
	}
	if cfg.ResponsesStoreBytes == 0 {
		cfg.ResponsesStoreBytes = DefaultResponsesStoreBytes
	}
	events, err := startEvents(cfg, name)
	if err != nil {
		return nil, err
	}
	tcp, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		events.Close()
		return nil, fmt.Errorf("httpapi: listening on %s: %w", cfg.Addr, err)
	}
	ln := &patientListener{Listener: tcp, log: cfg.Log}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, name: name, ln: ln, ctx: sctx, cancel: cancel,
		served: make(chan error, 1), ready: make(chan struct{}),
		created: time.Now().Unix(), started: time.Now(), events: events, loadingMaxLen: loadingMaxLen,
		sealer: sealer, media: newMedia(cfg), responses: newResponseStore(cfg.ResponsesStoreMax, cfg.ResponsesStoreBytes),
	}
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleParseError,
		MaxRequestBodySize: cfg.MaxBodyBytes,
		Name:               "govinfer",
		Concurrency:        cfg.MaxConnections,
		ReadTimeout:        cfg.ReadTimeout,
		IdleTimeout:        cfg.IdleTimeout,
		CloseOnShutdown:    true,
		Logger:             serverLogger{cfg.Log},
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-sctx.Done():
		}
	}()
	return s, nil
}

// load opens the checkpoint (llm.Open) and serves it.
func (s *Server) load(dir string, o llm.Options) {
	lm, err := llm.OpenContext(s.ctx, dir, o)
	if err == nil && s.ctx.Err() != nil {
		lm.Close()
		err = fmt.Errorf("closed while loading")
	}
	if err != nil {
		s.loadErr = fmt.Errorf("httpapi: %w", err)
		s.logf("failed model=%q reason=%q: /health and the API answer 503", s.name, err.Error())
		close(s.ready)
		return
	}
	s.ownsModel = true
	s.serve(lm)
}

// serve makes the server answer on lm, publishing its prefix cache's
// changes as KV events when they are on.
func (s *Server) serve(lm *llm.Model) {
	s.lm, s.maxModelLen = lm, lm.MaxModelLen()
	if s.events != nil {
		s.events.AllCleared() // what lm cached in memory before is not announced; its disk tier's is (ObservePrefixCache)
		s.unobserve = lm.ObservePrefixCache(newPrefixEvents(s.events))
	}
	s.loaded.Store(true)
	close(s.ready)
	line := fmt.Sprintf("ready model=%q addr=%s version=%s max_model_len=%d backend=%q", s.name, s.Addr(), s.cfg.Version, s.maxModelLen, lm.BackendName())
	if s.ownsModel {
		line += fmt.Sprintf(" load_s=%.1f", time.Since(s.started).Seconds())
	}
	s.logf("%s", line)
}

// WaitReady waits until the model is loaded and returns the loading error,
// if any.
func (s *Server) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return s.loadErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Model returns the model the server serves, or nil before it is loaded.
func (s *Server) Model() *llm.Model {
	if !s.loaded.Load() {
		return nil
	}
	return s.lm
}

// Close stops accepting connections, cancels the requests in flight and
// waits for their handlers; it closes the model StartLoading opened, not
// one handed to Start.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.cancel()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = s.srv.ShutdownWithContext(sctx)
		// Shutdown closes the listener only once Serve has taken it; a
		// Close right after Start must stop Serve too.
		s.ln.Close()
		<-s.served
		<-s.ready
		if s.unobserve != nil {
			s.unobserve()
		}
		if s.ownsModel {
			err = errors.Join(err, s.lm.Close())
		}
		err = errors.Join(err, s.events.Close())
	})
	return err
}

// handleParseError answers requests fasthttp could not read.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		s.count(fasthttp.StatusRequestEntityTooLarge)
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", s.cfg.MaxBodyBytes), "")
		ctx.SetConnectionClose()
		s.logRejected(ctx, fasthttp.StatusRequestEntityTooLarge)
		return
	}
	s.count(fasthttp.StatusBadRequest)
	writeError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request: "+err.Error(), "")
	s.logRejected(ctx, fasthttp.StatusBadRequest)
}

func (s *Server) count(status int) {
	v, _ := s.httpCount.LoadOrStore(status, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

// handle routes a request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			writeError(ctx, fasthttp.StatusInternalServerError, fmt.Sprintf("internal error: %v", r), "")
		}
		status := ctx.Response.StatusCode()
		s.count(status)
		// /health polled while loading (or after a failed load) is not
		// logged: the state change is, once.
		polled := status == fasthttp.StatusServiceUnavailable && string(ctx.Path()) == "/health" && !s.loaded.Load() && !s.draining.Load()
		if (status >= 400 && status < 500 && status != statusClientClosed || status == fasthttp.StatusServiceUnavailable) && !polled {
			s.logRejected(ctx, status)
		}
	}()
	path := string(ctx.Path()) // without the query string (Claude Code posts to /v1/messages?beta=true)
	if path == "/" && (ctx.IsGet() || ctx.IsHead()) {
		s.handleRoot(ctx) // Claude Code warms its connection with HEAD /
		return
	}
	if path == "/favicon.ico" {
		handleFavicon(ctx)
		return
	}
	if strings.HasPrefix(path, webui.Prefix) && !s.cfg.NoWebUI {
		s.handleWebUI(ctx, path)
		return
	}
	if rest, ok := strings.CutPrefix(path, "/v1/responses/"); ok && rest != "" {
		s.routeResponse(ctx, rest)
		return
	}
	if rest, ok := strings.CutPrefix(path, "/v1/models/"); ok && rest != "" {
		if string(ctx.Method()) != fasthttp.MethodGet {
			writeError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("%s takes GET, not %s", path, ctx.Method()), "")
			ctx.Response.Header.Set("Allow", fasthttp.MethodGet) // after writeError, which resets the headers
			return
		}
		if s.cfg.APIKey != "" && !s.authorized(ctx) {
			writeUnauthorized(ctx)
			return
		}
		if !s.loaded.Load() {
			s.writeNotReady(ctx)
			return
		}
		s.handleModel(ctx, rest)
		return
	}
	type route struct {
		method string
		auth   bool
		h      func(*fasthttp.RequestCtx)
	}
	routes := map[string]route{
		"/health":              {fasthttp.MethodGet, false, s.handleHealth},
		"/metrics":             {fasthttp.MethodGet, false, s.handleMetrics},
		"/version":             {fasthttp.MethodGet, false, s.handleVersion},
		"/v1/models":           {fasthttp.MethodGet, true, s.handleModels},
		"/v1/chat/completions": {fasthttp.MethodPost, true, s.handleChat},
		"/v1/completions":      {fasthttp.MethodPost, true, s.handleCompletions},
		"/tokenize":            {fasthttp.MethodPost, true, s.handleTokenize},
		"/detokenize":          {fasthttp.MethodPost, true, s.handleDetokenize},
		"/v1/responses":        {fasthttp.MethodPost, true, s.handleResponses},
		"/v1/messages":         {fasthttp.MethodPost, true, s.handleMessages},
	}
	routes["/v1/messages/count_tokens"] = route{fasthttp.MethodPost, true, s.handleCountTokens}
	routes["/v1/chat/completions/render"] = route{fasthttp.MethodPost, true, s.handleChatRender}
	routes["/v1/completions/render"] = route{fasthttp.MethodPost, true, s.handleCompletionsRender}
	if s.cfg.EnableLoRA {
		routes["/v1/load_lora_adapter"] = route{fasthttp.MethodPost, true, s.handleLoadLoRA}
		routes["/v1/unload_lora_adapter"] = route{fasthttp.MethodPost, true, s.handleUnloadLoRA}
	}
	if path == "/lora-adapters" {
		method := fasthttp.MethodGet
		if s.cfg.EnableLoRA && ctx.IsPost() {
			method = fasthttp.MethodPost
		}
		routes[path] = route{method, true, s.handleLoRAAdapters}
	}
	r, ok := routes[path]
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no endpoint %s", path), "")
		return
	}
	if string(ctx.Method()) != r.method {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", path, r.method, ctx.Method()), "")
		ctx.Response.Header.Set("Allow", r.method) // after writeError, which resets the headers
		return
	}
	if r.auth && s.cfg.APIKey != "" && !s.authorized(ctx) {
		writeUnauthorized(ctx)
		return
	}
	if path != "/health" && path != "/metrics" && path != "/version" {
		if !s.admit(ctx, path) {
			return
		}
		defer s.release(ctx)
	}
	r.h(ctx)
}

// authorized reports whether a request carries the API key: as a bearer
// token (OpenAI's clients) or in x-api-key (Anthropic's).
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if k := ctx.Request.Header.Peek("X-Api-Key"); len(k) > 0 && subtle.ConstantTimeCompare(k, []byte(s.cfg.APIKey)) == 1 {
		return true
	}
	h := ctx.Request.Header.Peek("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || string(h[:len(prefix)]) != prefix {
		return false
	}
	return subtle.ConstantTimeCompare(h[len(prefix):], []byte(s.cfg.APIKey)) == 1
}

// writeUnauthorized refuses a request without the API key.
func writeUnauthorized(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusUnauthorized, "missing or invalid API key (send Authorization: Bearer KEY or x-api-key: KEY)", "")
}

// marshal encodes v as JSON without HTML escaping (as Python's json does).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "encoding the response: "+err.Error(), "")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// handleRoot answers GET and HEAD / in every state: browsers, whose Accept
// names text/html, get the chat page (unless Config.NoWebUI), and other
// clients what the server is and serves, as JSON. Clients probe the base URL
// (Claude Code sends HEAD / before its first request).
func (s *Server) handleRoot(ctx *fasthttp.RequestCtx) {
	if s.cfg.NoWebUI {
		writeError(ctx, fasthttp.StatusNotFound, "no endpoint / (the chat page is off: --no-webui)", "")
		return
	}
	ctx.Response.Header.Set("Vary", "Accept")
	if wantsHTML(ctx.Request.Header.Peek("Accept")) {
		serveFile(ctx, webui.Index())
		return
	}
	writeJSON(ctx, struct {
		Server    string   `json:"server"`
		Version   string   `json:"version"`
		Model     string   `json:"model"`
		Ready     bool     `json:"ready"`
		WebUI     string   `json:"webui"`
		Endpoints []string `json:"endpoints"`
	}{"govinfer", s.cfg.Version, s.name, s.loaded.Load() && !s.draining.Load(), "GET / with Accept: text/html", []string{
		"POST /v1/chat/completions", "POST /v1/completions", "POST /v1/responses", "GET /v1/responses/{id}",
		"DELETE /v1/responses/{id}", "POST /v1/messages", "POST /v1/messages/count_tokens", "GET /v1/models",
		"GET /health", "GET /metrics", "GET /version", "POST /tokenize", "POST /detokenize",
	}})
}

// handleVersion answers GET /version as vLLM's server does,
// {"version": "..."}, in every state and without the API key.
func (s *Server) handleVersion(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, struct {
		Version string `json:"version"`
	}{s.cfg.Version})
}

// wantsHTML reports whether an Accept header asks for HTML before JSON, as
// browsers' do; no header, */* or application/json mean JSON.
func wantsHTML(accept []byte) bool {
	for _, part := range strings.Split(string(accept), ",") {
		media, _, _ := strings.Cut(part, ";")
		switch strings.ToLower(strings.TrimSpace(media)) {
		case "text/html", "application/xhtml+xml":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// handleWebUI serves the chat page's files under webui.Prefix (no key
// needed: the page asks for it).
func (s *Server) handleWebUI(ctx *fasthttp.RequestCtx, path string) {
	if !ctx.IsGet() && !ctx.IsHead() {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("%s takes GET, not %s", path, ctx.Method()), "")
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return
	}
	f, ok := webui.Lookup(path)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no file %s", path), "")
		return
	}
	serveFile(ctx, f)
}

// serveFile answers with an embedded file of the chat page, under its
// Content-Security-Policy; browsers revalidate it (ETag) on every load, so
// a new binary's page is never mixed with an old one's cached files.
func serveFile(ctx *fasthttp.RequestCtx, f webui.File) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", webui.CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.ETag)
	if string(ctx.Request.Header.Peek("If-None-Match")) == f.ETag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(f.ContentType)
	ctx.SetBody(f.Body)
}

// modelCard is a model as /v1/models lists it.
type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
	// InputModalities are "text", and "image" when the model takes images.
	InputModalities []string `json:"input_modalities"`
	// GovinferVersion is the server's version (Config.Version).
	GovinferVersion string `json:"govinfer_version"`
}

func (s *Server) card() modelCard {
	maxLen := s.loadingMaxLen // answered while loading too
	if s.loaded.Load() {
		maxLen = s.maxModelLen
	}
	modalities := []string{"text"}
	if s.loaded.Load() && s.lm.HasVision() {
		modalities = append(modalities, "image")
	}
	return modelCard{s.name, "model", s.created, "govinfer", maxLen, modalities, s.cfg.Version}
}

func (s *Server) handleModels(ctx *fasthttp.RequestCtx) {
	data := []any{s.card()}
	if s.loaded.Load() {
		data = append(data, s.loraCards()...)
	}
	writeJSON(ctx, struct {
		Object string `json:"object"`
		Data   []any  `json:"data"`
	}{"list", data})
}

// handleModel answers GET /v1/models/{id} (the id may hold slashes).
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, id string) {
	if a, ok := s.lm.LoRA(id); ok && id != s.name {
		writeJSON(ctx, s.loraCard(a))
		return
	}
	if id != s.name {
		writeAPIError(ctx, modelNotFound(id))
		return
	}
	writeJSON(ctx, s.card())
}

// checkModel verifies a request's "model" field: the served model or an
// attached LoRA adapter.
func (s *Server) checkModel(o object) *apiError {
	name, ok, err := o.str("model")
	if err != nil {
		return err
	}
	if ok && !s.knownModel(name) {
		return modelNotFound(name)
	}
	return nil
}

// logRequest writes the one log line of a finished request.
func (s *Server) logRequest(id string, status, promptTokens, cachedTokens, completionTokens int, ttft, total time.Duration, finish, prompt string) {
	if s.cfg.Log == nil {
		return
	}
	rate := 0.0
	if gen := total - ttft; completionTokens > 1 && gen > 0 {
		rate = float64(completionTokens-1) / gen.Seconds()
	}
	line := fmt.Sprintf("%s %s status=%d prompt_tokens=%d cached_tokens=%d completion_tokens=%d ttft_ms=%.1f tokens_per_s=%.1f total_ms=%.1f finish=%s",
		time.Now().Format(time.RFC3339), id, status, promptTokens, cachedTokens, completionTokens,
		float64(ttft.Microseconds())/1e3, rate, float64(total.Microseconds())/1e3, finish)
	if s.cfg.LogPrompts {
		q, _ := json.Marshal(prompt)
		line += " prompt=" + string(q)
	}
	s.logMu.Lock()
	fmt.Fprintln(s.cfg.Log, line)
	s.logMu.Unlock()
}

// logRejected writes the log line of a rejected request: its status and
// reason, never its prompt.
func (s *Server) logRejected(ctx *fasthttp.RequestCtx, status int) {
	if s.cfg.Log == nil {
		return
	}
	reason, _ := ctx.UserValue(errorReasonKey).(string)
	if reason == "" {
		reason = bodyReason(ctx.Response.Body(), status)
	}
	if len(reason) > 300 {
		reason = reason[:300] + "..."
	}
	q, _ := json.Marshal(reason)
	s.logMu.Lock()
	fmt.Fprintf(s.cfg.Log, "%s rejected %s %s status=%d reason=%s\n", time.Now().Format(time.RFC3339), ctx.Method(), ctx.Path(), status, q)
	s.logMu.Unlock()
}

// bodyReason returns the reason of an error response that did not go
// through writeError: its error.message (OpenAI's and Anthropic's shapes
// both have one), else the status's text.
func bodyReason(body []byte, status int) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return fasthttp.StatusMessage(status)
}

// logf writes a line about the server itself (not a request) to the log.
func (s *Server) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	line := fmt.Sprintf(format, args...)
	s.logMu.Lock()
	fmt.Fprintf(s.cfg.Log, "%s server %s\n", time.Now().Format(time.RFC3339), line)
	s.logMu.Unlock()
}

// errClientGone is the cause of a request's context once its client has
// disconnected.
var errClientGone = errors.New("the client disconnected")

// watch returns the context of a request: cancelled, with cause
// errClientGone, once its client disconnects, or when the server closes.
// release stops the watch and cancels the context; call it once the
// response is written (for a stream, when the stream ends).
func (s *Server) watch(ctx *fasthttp.RequestCtx) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(s.ctx)
	stop := watchDisconnect(ctx.Conn(), func() { cancel(errClientGone) })
	return rctx, func() {
		stop()
		cancel(nil)
	}
}

// clientGone reports whether a request's client disconnected.
func clientGone(rctx context.Context) bool { return errors.Is(context.Cause(rctx), errClientGone) }

// statusClientClosed is the status logged for a request whose client
// disconnected (nginx's 499).
const statusClientClosed = 499

// patientListener keeps accepting when the process runs out of file
// descriptors (or the system of buffers): it waits, logs once a second and
// tries again, where fasthttp would stop serving on the error.
type patientListener struct {
	net.Listener
	log    io.Writer
	logged time.Time
}

func (l *patientListener) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil || !exhausted(err) {
			return c, err
		}
		if l.log != nil && time.Since(l.logged) > time.Second {
			l.logged = time.Now()
			fmt.Fprintf(l.log, "%s accept: %v; waiting for connections to close\n", time.Now().Format(time.RFC3339), err)
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// exhausted reports whether an accept failed for want of descriptors or
// memory, which frees up as connections close.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// serverLogger sends fasthttp's own messages to the request log.
type serverLogger struct{ w io.Writer }

func (l serverLogger) Printf(format string, args ...any) {
	if l.w != nil {
		fmt.Fprintf(l.w, "fasthttp: "+format+"\n", args...)
	}
}
