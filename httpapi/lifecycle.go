package httpapi

import (
	"bufio"
	"context"
	"time"

	"github.com/valyala/fasthttp"
)

// A server's life, as a load balancer or router sees it:
//
//   - loading (StartLoading, until the model is open): /health answers
//     503 (type unavailable_error), /v1/models answers, the other API
//     endpoints 503;
//   - ready: /health answers 200 {"status":"ok"};
//   - failed (StartLoading's model did not load): /health and the API
//     answer 503 until Close, and WaitReady returns why. The server stays
//     up in this state for a program that wants it; govinfer serve does
//     not: it exits with status 1 at once, the error on standard error, so
//     that an orchestrator restarts it;
//   - draining (Drain): /health answers 503, new API requests 503 with
//     Retry-After while the requests already running or queued finish,
//     streams included; /v1/models and /metrics still answer.
//
// Every 503 of these states has type unavailable_error, as llama.cpp's
// server answers while loading. The log gets one line when loading
// starts and one when it ends (ready or failed), and no line for the
// /health polls answered 503 meanwhile; every other 4xx and 503 gets a
// "rejected" line with its reason.

// drainRetryAfter is the Retry-After of requests refused while draining,
// in seconds: a router sends them to another replica at once.
const drainRetryAfter = "1"

// drainPoll is how often Drain looks at the requests in flight.
const drainPoll = 10 * time.Millisecond

// streamingKey marks, among a request's user values, a response whose body
// a stream writer produces after the handler returns.
const streamingKey = "govinfer.streaming"

// unavailableType is the error type of the lifecycle's 503s.
const unavailableType = "unavailable_error"

// writeUnavailable answers a 503 of type unavailable_error.
func writeUnavailable(ctx *fasthttp.RequestCtx, message string) {
	type inner struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    int    `json:"code"`
	}
	b, _ := marshal(struct {
		Error inner `json:"error"`
	}{inner{message, unavailableType, nil, fasthttp.StatusServiceUnavailable}})
	ctx.Response.Reset()
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	ctx.SetContentType("application/json")
	ctx.SetUserValue(errorReasonKey, message)
	if anthropicPath(ctx) {
		b = anthropicErrorBody(fasthttp.StatusServiceUnavailable, message)
	}
	ctx.SetBody(b)
}

// writeNotReady answers a request made before the model is loaded, or
// after it failed to load.
func (s *Server) writeNotReady(ctx *fasthttp.RequestCtx) {
	select {
	case <-s.ready:
		if s.loadErr != nil {
			writeUnavailable(ctx, "model failed to load: "+s.loadErr.Error())
			return
		}
	default:
	}
	writeUnavailable(ctx, "the model is still loading")
}

// writeDraining refuses a request made while the server drains.
func writeDraining(ctx *fasthttp.RequestCtx) {
	writeUnavailable(ctx, "the server is shutting down; retry on another replica")
	ctx.Response.Header.Set("Retry-After", drainRetryAfter)
}

func (s *Server) handleHealth(ctx *fasthttp.RequestCtx) {
	switch {
	case s.draining.Load():
		writeUnavailable(ctx, "the server is shutting down")
	case !s.loaded.Load():
		s.writeNotReady(ctx)
	default:
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	}
}

// admit lets an API request through the lifecycle's gates, counting it in
// flight, or answers it with a 503 and returns false. /v1/models answers
// in every state.
func (s *Server) admit(ctx *fasthttp.RequestCtx, path string) bool {
	always := path == "/v1/models"
	if !always && !s.loaded.Load() {
		s.writeNotReady(ctx)
		return false
	}
	s.active.Add(1)
	if !always && s.draining.Load() {
		s.active.Add(-1)
		writeDraining(ctx)
		return false
	}
	return true
}

// release ends an admitted request, unless its body is still streaming
// (then the stream writer of streamBody ends it).
func (s *Server) release(ctx *fasthttp.RequestCtx) {
	if ctx.UserValue(streamingKey) == nil {
		s.active.Add(-1)
	}
}

// streamBody sets the response body to what sw writes after the handler
// returns; the request stays in flight until sw returns.
func (s *Server) streamBody(ctx *fasthttp.RequestCtx, sw func(*bufio.Writer)) {
	ctx.SetUserValue(streamingKey, true)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.active.Add(-1)
		sw(w)
	})
}

// InFlight returns the requests running in the engine, those waiting in
// its queue, and the API requests not yet answered in full (a stream until
// its last event).
func (s *Server) InFlight() (running, waiting, requests int) {
	if s.loaded.Load() {
		st := s.lm.Stats()
		running, waiting = st.Running, st.Waiting
	}
	return running, waiting, int(s.active.Load())
}

// Drain starts refusing new requests (503 with Retry-After; /health 503),
// announces that this replica's prefix cache is to be forgotten
// (AllBlocksCleared), and waits until the requests running or queued have
// finished and their responses are written, or ctx ends (then it returns
// ctx's error). Close afterwards aborts what is left and stops the server.
func (s *Server) Drain(ctx context.Context) error {
	if !s.draining.Swap(true) {
		s.events.AllCleared()
	}
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		if r, w, n := s.InFlight(); r == 0 && w == 0 && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }
