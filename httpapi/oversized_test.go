package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// postOversized posts a body past the server's limit and returns the
// answer. The server answers 413 and closes the connection as soon as it
// has read the headers, so the client's write of the rest may fail (a
// broken pipe or a reset, depending on timing, which makes net/http's
// client flaky here); the answer is read whatever the write did.
func postOversized(t testing.TB, s *Server, path string, body []byte) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, s.Addr(), len(body))
	req.Write(body)
	go io.Copy(conn, &req) // may fail once the server closes: the answer is already on its way
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to an oversized body: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}
