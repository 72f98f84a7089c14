package safetensors

import (
	"errors"
	"strconv"
	"strings"
)

// ErrNotFound is wrapped by errors for a tensor name a checkpoint lacks.
var ErrNotFound = errors.New("tensor not found")

// ErrInvalid is matched (via errors.Is) by every *FormatError: a file or
// index that breaks the safetensors format.
var ErrInvalid = errors.New("invalid safetensors data")

// ErrClosed is wrapped by errors for a File or Checkpoint used after Close.
var ErrClosed = errors.New("safetensors: use after Close")

// FormatError describes malformed safetensors data: which file, which tensor
// (if one is to blame) and what is wrong with it.
type FormatError struct {
	Path   string // the file, or "" when parsing bytes with no name
	Tensor string // the tensor at fault, or "" for file-level problems
	Msg    string // what is wrong
}

// Error reads "safetensors: PATH: tensor "NAME": MSG", leaving out empty parts.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(quote(e.Tensor))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
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
