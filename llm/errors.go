package llm

import "fmt"

// ParamError is a request field with a value out of its range. Param names
// it as the OpenAI API does ("temperature", "messages[2].role"); it is ""
// when no one field is at fault.
type ParamError struct {
	Param   string
	Message string
}

func (e *ParamError) Error() string { return e.Message }

func paramErr(param, format string, args ...any) *ParamError {
	return &ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ContextLengthError is a prompt plus completion budget beyond the model's
// maximum length.
type ContextLengthError struct {
	// MaxModelLen is the model's limit; Prompt and Completion the tokens
	// requested.
	MaxModelLen, Prompt, Completion int
}

func (e *ContextLengthError) Error() string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		e.MaxModelLen, e.Prompt+e.Completion, e.Prompt, e.Completion)
}

// Param returns the request field the OpenAI API blames: "messages".
func (e *ContextLengthError) Param() string { return "messages" }
