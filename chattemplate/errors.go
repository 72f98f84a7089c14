package chattemplate

import "fmt"

// Error is a failure while parsing or rendering a template. Kind names the
// Python exception Jinja would raise (TemplateSyntaxError,
// TemplateAssertionError, TemplateError for raise_exception, UndefinedError,
// TypeError, SecurityError, ...). Error() reads "Kind: Message", which for
// raise_exception is the template's own message.
type Error struct {
	Kind    string
	Message string
	Line    int // 1-based template line, 0 when unknown
}

// Error implements error.
func (e *Error) Error() string {
	return e.Kind + ": " + e.Message
}

// Raised reports whether the error came from the template's own
// raise_exception call; the server should pass such messages to the client.
func (e *Error) Raised() bool { return e.Kind == "TemplateError" }

func syntaxErrorf(line int, format string, args ...any) error {
	return &Error{Kind: "TemplateSyntaxError", Message: fmt.Sprintf(format, args...), Line: line}
}

func typeErrorf(format string, args ...any) error {
	return &Error{Kind: "TypeError", Message: fmt.Sprintf(format, args...)}
}

func valueErrorf(format string, args ...any) error {
	return &Error{Kind: "ValueError", Message: fmt.Sprintf(format, args...)}
}

func runtimeErrorf(kind, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
