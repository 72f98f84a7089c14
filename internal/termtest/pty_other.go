//go:build !linux

package termtest

import (
	"errors"
	"os"
)

// OpenPTY opens a pseudo-terminal; this one exists on Linux only, elsewhere
// it returns an error (tests skip).
func OpenPTY(cols, rows int) (pty, tty *os.File, err error) {
	return nil, nil, errors.New("termtest: pseudo-terminals are opened on Linux only")
}
