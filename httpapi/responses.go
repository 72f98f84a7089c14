package httpapi

import "github.com/valyala/fasthttp"

// The Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}); being written.

type responseStore struct{}

func newResponseStore(maxCount int, maxBytes int64) *responseStore { return &responseStore{} }

func (s *Server) handleResponses(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusNotImplemented, "not yet", "")
}

func (s *Server) routeResponse(ctx *fasthttp.RequestCtx, id string) {
	writeError(ctx, fasthttp.StatusNotImplemented, "not yet", "")
}
