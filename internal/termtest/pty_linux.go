package termtest

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal of the given size: the program under test
// gets tty (its standard streams), the test writes keys to and reads the
// screen from pty.
func OpenPTY(cols, rows int) (pty, tty *os.File, err error) {
	pty, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("termtest: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		pty.Close()
		return nil, nil, fmt.Errorf("termtest: %w", err)
	}
	fd := int(pty.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlocking the pseudo-terminal: %w", err))
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("numbering the pseudo-terminal: %w", err))
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); err != nil {
		tty.Close()
		return fail(fmt.Errorf("sizing the pseudo-terminal: %w", err))
	}
	return pty, tty, nil
}
