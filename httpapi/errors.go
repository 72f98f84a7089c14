package httpapi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/govinfer/govinfer/llm"

	"github.com/valyala/fasthttp"
)

// apiError is an error answered to the client in OpenAI's shape.
type apiError struct {
	status  int
	message string
	param   string // the request field at fault, or ""
	// overloaded marks a full queue: a 503, or Anthropic's 529
	// overloaded_error on the Messages API.
	overloaded bool
}

func (e *apiError) Error() string { return e.message }

// badRequest returns a 400 naming the field at fault.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: fasthttp.StatusBadRequest, message: fmt.Sprintf(format, args...), param: param}
}

// errorType is the "type" of an error response for an HTTP status, as vLLM
// names them.
func errorType(status int) string {
	switch status {
	case fasthttp.StatusBadRequest:
		return "BadRequestError"
	case fasthttp.StatusUnauthorized:
		return "AuthenticationError"
	case fasthttp.StatusNotFound:
		return "NotFoundError"
	case fasthttp.StatusMethodNotAllowed:
		return "MethodNotAllowedError"
	case fasthttp.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	case fasthttp.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

// errorBody is the JSON of an error response.
func errorBody(status int, message, param string) []byte {
	type inner struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	var p *string
	if param != "" {
		p = &param
	}
	b, _ := marshal(struct {
		Error inner `json:"error"`
	}{inner{message, errorType(status), p, status}})
	return b
}

// errorReasonKey is the user value under which writeError keeps the
// message, for the log line of a rejected request.
const errorReasonKey = "govinfer.error"

// writeError answers ctx with an error response; a 503 (or 529) says when
// to retry. On the Messages API the error has Anthropic's shape.
func writeError(ctx *fasthttp.RequestCtx, status int, message, param string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if status == fasthttp.StatusServiceUnavailable || status == statusOverloaded {
		ctx.Response.Header.Set("Retry-After", retryAfter)
	}
	if anthropicPath(ctx) {
		ctx.SetBody(anthropicErrorBody(status, message))
	} else {
		ctx.SetBody(errorBody(status, message, param))
	}
	ctx.SetUserValue(errorReasonKey, message)
}

func writeAPIError(ctx *fasthttp.RequestCtx, e *apiError) {
	status := e.status
	if e.overloaded && anthropicPath(ctx) {
		status = statusOverloaded
	}
	writeError(ctx, status, e.message, e.param)
}

// statusOverloaded is Anthropic's status for an overloaded server, which
// its clients retry.
const statusOverloaded = 529

// anthropicPath reports whether ctx is a request of the Messages API
// (/v1/messages, /v1/messages/count_tokens), whose errors have Anthropic's
// shape.
func anthropicPath(ctx *fasthttp.RequestCtx) bool {
	p := ctx.Path()
	return string(p) == "/v1/messages" || strings.HasPrefix(string(p), "/v1/messages/")
}

// anthropicErrorType is the error type Anthropic's API gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case fasthttp.StatusBadRequest, fasthttp.StatusMethodNotAllowed:
		return "invalid_request_error"
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusForbidden:
		return "permission_error"
	case fasthttp.StatusNotFound:
		return "not_found_error"
	case fasthttp.StatusRequestEntityTooLarge:
		return "request_too_large"
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case statusOverloaded, fasthttp.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicError is an error in Anthropic's shape, as a response body and
// as the error event of a stream.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicErrorBody is the JSON of an error in Anthropic's shape:
// {"type": "error", "error": {"type": ..., "message": ...}}.
func anthropicErrorBody(status int, message string) []byte {
	e := anthropicError{Type: "error"}
	e.Error.Type, e.Error.Message = anthropicErrorType(status), message
	b, _ := marshal(e)
	return b
}

// llmError answers an error of llm: a bad parameter or too long a context
// is a 400 naming the field, a full queue or a closing model a 503, the
// rest a 500.
func llmError(err error) *apiError {
	var pe *llm.ParamError
	var ce *llm.ContextLengthError
	switch {
	case errors.As(err, &pe):
		return badRequest(pe.Param, "%s", pe.Message)
	case errors.Is(err, llm.ErrUnknownLoRA):
		var le *llm.LoRAError
		errors.As(err, &le)
		return modelNotFound(le.Name)
	case errors.As(err, &ce):
		return badRequest(ce.Param(), "%s", ce.Error())
	case errors.Is(err, llm.ErrQueueFull):
		return &apiError{status: fasthttp.StatusServiceUnavailable, message: "the server is overloaded: the request queue is full, retry later", overloaded: true}
	case errors.Is(err, llm.ErrClosed):
		return &apiError{status: fasthttp.StatusServiceUnavailable, message: "the server is shutting down"}
	}
	return &apiError{status: fasthttp.StatusInternalServerError, message: err.Error()}
}
