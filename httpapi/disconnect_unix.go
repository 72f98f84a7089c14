//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpapi

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// watchDisconnect calls gone once the client of conn has closed the
// connection, until the returned stop is called (stop waits for the
// watcher to end). fasthttp reads nothing while a request is handled and
// gives a handler no signal when its client leaves, so the watcher waits
// for the socket to become readable and peeks at it (MSG_PEEK): an end of
// file or a reset means the client is gone; data (a pipelined request) is
// left for fasthttp and ends the watch. Connections without a file
// descriptor (in-memory ones) are not watched.
func watchDisconnect(conn net.Conn, gone func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	// fasthttp's read deadline for the request would end the wait early.
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		closed := false
		buf := make([]byte, 1)
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
				return false // nothing yet: wait until the socket is readable
			case err != nil || n == 0:
				closed = true
			}
			return true
		})
		if closed && err == nil {
			gone()
		}
	}()
	return func() {
		conn.SetReadDeadline(time.Unix(1, 0)) // wakes the watcher
		<-done
		conn.SetReadDeadline(time.Time{})
	}
}
