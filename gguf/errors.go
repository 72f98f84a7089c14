package gguf

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is matched (via errors.Is) by every *FormatError: a file that
// breaks the GGUF format.
var ErrInvalid = errors.New("invalid GGUF data")

// ErrNotFound is wrapped by errors for a tensor name a file lacks.
var ErrNotFound = errors.New("tensor not found")

// ErrClosed is wrapped by errors for a File used after Close.
var ErrClosed = errors.New("gguf: use after Close")

// FormatError describes malformed GGUF data: which file, where, which key
// or tensor (when one is to blame) and what is wrong.
type FormatError struct {
	Path   string // the file, or "" when parsing bytes with no name
	Offset int64  // the byte offset in the file where the fault was found, -1 if none
	Key    string // the metadata key at fault, or ""
	Tensor string // the tensor at fault, or ""
	Msg    string // what is wrong
}

// Error reads `gguf: PATH: key "K": MSG (at byte N)`, leaving out empty
// parts.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("gguf: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString("key ")
		b.WriteString(quote(e.Key))
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(quote(e.Tensor))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Offset >= 0 {
		b.WriteString(" (at byte ")
		b.WriteString(strconv.FormatInt(e.Offset, 10))
		b.WriteString(")")
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *FormatError) Is(target error) bool { return target == ErrInvalid }

// quote quotes a name for an error message, shortening absurdly long ones.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}
