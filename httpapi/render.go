package httpapi

import (
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// renderResult is one prompt's tokens, as vLLM's render endpoints answer
// them (the key routers read).
type renderResult struct {
	TokenIDs []int `json:"token_ids"`
}

// handleChatRender answers POST /v1/chat/completions/render: the token ids
// /v1/chat/completions would prefill for the same body (same template,
// tools, chat_template_kwargs, add_generation_prompt), as one object
// {"token_ids": [...]}. A router tokenizes with it.
func (s *Server) handleChatRender(ctx *fasthttp.RequestCtx) {
	r, aerr := s.parseChat(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	_, ids, err := s.lm.ChatPrompt(r.req)
	if err != nil {
		writeAPIError(ctx, llmError(err))
		return
	}
	writeJSON(ctx, renderResult{TokenIDs: nonNil(ids)})
}

// handleCompletionsRender answers POST /v1/completions/render: the token
// ids /v1/completions would prefill for each prompt of the same body, as
// an array with one {"token_ids": [...]} per prompt (vLLM's shape, which
// the llm-d router decodes).
func (s *Server) handleCompletionsRender(ctx *fasthttp.RequestCtx) {
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	if aerr == nil {
		_, _, aerr = parseParams(o)
	}
	var out []renderResult
	if aerr == nil {
		var ps []llm.Prompt
		ps, _, aerr = s.parsePrompts(o)
		for _, p := range ps {
			out = append(out, renderResult{TokenIDs: nonNil(s.lm.PromptIDs(p))})
		}
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	writeJSON(ctx, out)
}

// nonNil returns ids, or an empty slice for nil (JSON [] rather than null).
func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}
