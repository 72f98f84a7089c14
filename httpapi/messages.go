package httpapi

import "github.com/valyala/fasthttp"

// The Anthropic Messages API (POST /v1/messages and
// /v1/messages/count_tokens); being written.

func (s *Server) handleMessages(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusNotImplemented, "not yet", "")
}

func (s *Server) handleCountTokens(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusNotImplemented, "not yet", "")
}
