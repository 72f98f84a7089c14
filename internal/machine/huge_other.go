//go:build !linux

package machine

// NewHugeReadBuffer returns nil: transparent huge pages are asked of Linux
// only.
func NewHugeReadBuffer(size int) (b *ReadBuffer, share float64) { return nil, 0 }
