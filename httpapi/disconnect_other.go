//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package httpapi

import "net"

// watchDisconnect does not watch on this platform: a streaming client's
// disconnect is noticed at the next write, a non-streaming one's not at
// all.
func watchDisconnect(net.Conn, func()) (stop func()) { return func() {} }
