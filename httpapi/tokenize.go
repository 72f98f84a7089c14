package httpapi

import "github.com/valyala/fasthttp"

// handleTokenize answers vLLM's /tokenize: a prompt, or messages rendered
// with the chat template.
func (s *Server) handleTokenize(ctx *fasthttp.RequestCtx) {
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	var ids []int
	if o.has("messages") {
		r, aerr := s.parseChat(ctx.PostBody())
		if aerr != nil {
			writeAPIError(ctx, aerr)
			return
		}
		_, chatIDs, err := s.lm.ChatPrompt(r.req)
		if err != nil {
			writeAPIError(ctx, llmError(err))
			return
		}
		ids = chatIDs
	} else {
		p, ok, err := o.str("prompt")
		if err != nil {
			writeAPIError(ctx, err)
			return
		}
		if !ok {
			writeAPIError(ctx, badRequest("prompt", "prompt or messages is required"))
			return
		}
		ids = s.lm.Tokenizer().Encode(p)
	}
	if ids == nil {
		ids = []int{}
	}
	writeJSON(ctx, struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
		TokenStrs   any   `json:"token_strs"`
	}{len(ids), s.maxModelLen, ids, nil})
}

func (s *Server) handleDetokenize(ctx *fasthttp.RequestCtx) {
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	var ids []int
	if aerr == nil {
		if !o.has("tokens") {
			aerr = badRequest("tokens", "tokens is required")
		} else {
			ids, aerr = o.intList("tokens")
		}
	}
	if aerr == nil {
		for i, id := range ids {
			if id < 0 || id >= s.lm.Tokenizer().VocabSize() {
				aerr = badRequest("tokens", "tokens[%d] = %d is not a token id", i, id)
				break
			}
		}
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	writeJSON(ctx, struct {
		Prompt string `json:"prompt"`
	}{s.lm.Tokenizer().Decode(ids, false)})
}
