package lineedit

import (
	"bytes"
	"context"
	"io"
)

// interruptKey is the byte Ctrl-C sends in raw mode.
const interruptKey = 0x03

// Input reads a terminal's bytes on a goroutine of its own, so that a reader
// can stop waiting when a context ends without losing what was typed: the
// bytes stay for the next reader. One reader at a time.
type Input struct {
	ch      chan chunk
	done    chan struct{}
	pending []byte
	err     error // the read error, once pending is drained
}

type chunk struct {
	b   []byte
	err error
}

// NewInput starts reading r. Close stops delivering (a Read in progress on r
// cannot be stopped; it ends with the process or when r is closed).
func NewInput(r io.Reader) *Input {
	in := &Input{ch: make(chan chunk), done: make(chan struct{})}
	go in.pump(r)
	return in
}

func (in *Input) pump(r io.Reader) {
	for {
		buf := make([]byte, 512)
		n, err := r.Read(buf)
		if n > 0 {
			select {
			case in.ch <- chunk{b: buf[:n]}:
			case <-in.done:
				return
			}
		}
		if err != nil {
			select {
			case in.ch <- chunk{err: err}:
			case <-in.done:
			}
			return
		}
	}
}

// Close stops the reading goroutine once its current Read returns.
func (in *Input) Close() { close(in.done) }

// fill waits for more bytes; it returns the read error once everything
// before it was consumed, or ctx's error.
func (in *Input) fill(ctx context.Context) error {
	if in.err != nil {
		return in.err
	}
	select {
	case c := <-in.ch:
		in.pending = append(in.pending, c.b...)
		if c.err != nil {
			in.err = c.err
			if len(in.pending) == 0 {
				return c.err
			}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readByte returns the next byte.
func (in *Input) readByte(ctx context.Context) (byte, error) {
	for len(in.pending) == 0 {
		if err := in.fill(ctx); err != nil {
			return 0, err
		}
	}
	b := in.pending[0]
	in.pending = in.pending[1:]
	return b, nil
}

// WaitInterrupt waits until Ctrl-C is typed, and returns true, or until ctx
// ends or the input does, and returns false. Ctrl-C discards what was typed
// before it, as a terminal's interrupt does; anything else typed meanwhile
// stays for the next ReadLine.
func (in *Input) WaitInterrupt(ctx context.Context) bool {
	for {
		if i := bytes.IndexByte(in.pending, interruptKey); i >= 0 {
			in.pending = in.pending[i+1:]
			return true
		}
		if err := in.fill(ctx); err != nil {
			return false
		}
	}
}
