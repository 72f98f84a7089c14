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

// ContextLengthError is a prompt that leaves no token for an answer: it
// fills the model's maximum length or, under a state memory budget, all
// the state one sequence can hold. (An answer asked longer than the room
// left is lowered to it, not refused.)
type ContextLengthError struct {
	// MaxModelLen is the model's limit; Prompt and Completion the tokens
	// requested (Completion is the one token an answer needs at least).
	MaxModelLen, Prompt, Completion int
	// StateTokens, when positive, is the most tokens the state memory
	// (StateMemory bytes) holds for one sequence, below MaxModelLen.
	StateTokens int
	StateMemory int64
}

func (e *ContextLengthError) Error() string {
	if e.StateTokens > 0 && e.Prompt < e.MaxModelLen {
		return fmt.Sprintf("The prompt is %d tokens, which leaves no room for an answer in the state memory of %s: it holds %d tokens of one sequence (the model's maximum context length is %d tokens). Please reduce the length of the messages or raise --state-memory.",
			e.Prompt, formatBytes(e.StateMemory), e.StateTokens, e.MaxModelLen)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		e.MaxModelLen, e.Prompt+e.Completion, e.Prompt, e.Completion)
}

// Param returns the request field the OpenAI API blames: "messages".
func (e *ContextLengthError) Param() string { return "messages" }
