package httpapi

import (
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestFloodOfIdleConnections opens more connections than the process may
// have files: the server runs out of descriptors while accepting, and must
// answer again once they close (fasthttp alone stops serving on the
// accept error).
func TestFloodOfIdleConnections(t *testing.T) {
	s := startServer(t, Config{MaxConnections: 1 << 20})
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(fds) + 48)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower the open-file limit: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
		}
	}
	defer restore()
	var conns []net.Conn
	for range 200 {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			break // this process is out of descriptors too
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond) // the server's accepts fail meanwhile
	for _, c := range conns {
		c.Close()
	}
	restore()
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		resp, err := client.Get("http://" + s.Addr() + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Logf("%d connections opened; the server answers again", len(conns))
				return
			}
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the server no longer answers after a flood of %d connections: %v", len(conns), lastErr)
}

// TestMaxConnections checks that connections past the cap are refused
// with a 503 while the ones within it are served.
func TestMaxConnections(t *testing.T) {
	s := startServer(t, Config{MaxConnections: 2})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + s.Addr() + "/health")
	if err == nil {
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode != 503 {
		t.Fatalf("a connection past the cap of 2: status %d, want 503", resp.StatusCode)
	}
}
