package diag

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSSEReader(t *testing.T) {
	stream := ": keep-alive\n\n" +
		"data: {\"a\":1}\n\n" +
		"event: message\r\nid: 7\r\ndata:{\"b\":2}\r\n\r\n" +
		"data: line one\ndata: line two\n\n" +
		"retry: 100\n\n" +
		"data: [DONE]\n\n"
	r := newSSEReader(strings.NewReader(stream))
	want := []string{`{"a":1}`, `{"b":2}`, "line one\nline two", "[DONE]"}
	for _, w := range want {
		got, err := r.next()
		if err != nil || got != w {
			t.Fatalf("next = %q, %v; want %q", got, err, w)
		}
	}
	if _, err := r.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
}

func TestSSEReaderCutStream(t *testing.T) {
	for _, stream := range []string{"data: {\"a\":1}\n", "data: {\"a\":", "data: {\"a\":1}\n\ndata: {\"b\""} {
		r := newSSEReader(strings.NewReader(stream))
		var err error
		for err == nil {
			_, err = r.next()
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: %v, want io.ErrUnexpectedEOF", stream, err)
		}
	}
}

// streamServer serves one scripted event stream with a pause between events.
func streamServer(t *testing.T, events []string, pause time.Duration) *client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			time.Sleep(pause)
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return &client{baseURL: srv.URL, http: srv.Client(), timeout: 10 * time.Second}
}

func delta(content string) string {
	return fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, content)
}

// TestDecodeRunTiming checks which events the stream timings are taken at,
// on a scripted clock that advances by step at every reading: one reading
// when the request is sent, then one per event.
func TestDecodeRunTiming(t *testing.T) {
	const step = 20 * time.Millisecond
	events := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		delta("Hello"), delta(" there"), delta(" world"),
		`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}`,
		"[DONE]",
	}
	c := streamServer(t, events, time.Millisecond)
	var tick time.Duration
	t0 := time.Now()
	c.now = func() time.Time { tick += step; return t0.Add(tick) }
	run, err := c.decodeRun(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if run.Text != "Hello there world" {
		t.Errorf("text %q", run.Text)
	}
	if string(run.Usage) != `{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}` {
		t.Errorf("usage %s, want the server's object verbatim", run.Usage)
	}
	// The first non-empty delta is the second event, two steps after the
	// request; the finish is the fifth, three steps after that.
	if want := float64(2 * step / time.Millisecond); run.TTFTMillis != want {
		t.Errorf("ttft %.1f ms, want %.1f ms (two events)", run.TTFTMillis, want)
	}
	if want := (3 * step).Seconds(); math.Abs(run.DecodeSeconds-want) > 1e-9 {
		t.Errorf("decode %.3f s, want %.3f s (three events)", run.DecodeSeconds, want)
	}
	if want := 3 / run.DecodeSeconds; math.Abs(run.DecodeTokensPerSecond-want) > 1e-9 {
		t.Errorf("decode tok/s %v, want (4-1)/decode_seconds = %v", run.DecodeTokensPerSecond, want)
	}
	if run.TimingScope != TimingScope {
		t.Errorf("timing scope %q", run.TimingScope)
	}
}

func TestDecodeRunWithoutUsageCountsDeltas(t *testing.T) {
	events := []string{delta("a"), delta("b"), delta(""), delta("c"),
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, "[DONE]"}
	c := streamServer(t, events, 5*time.Millisecond)
	run, err := c.decodeRun(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if string(run.Usage) != "null" {
		t.Errorf("usage %s, want null", run.Usage)
	}
	if want := 2 / run.DecodeSeconds; math.Abs(run.DecodeTokensPerSecond-want) > 1e-9 {
		t.Errorf("decode tok/s %v, want (3-1)/decode_seconds = %v", run.DecodeTokensPerSecond, want)
	}
}

func TestDecodeRunBrokenStreams(t *testing.T) {
	cases := map[string][]string{
		"no finish":   {delta("a"), delta("b"), "[DONE]"},
		"no [DONE]":   {delta("a")},
		"bad chunk":   {delta("a"), `{"choices":[`},
		"no text":     {`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, "[DONE]"},
		"bad usage":   {delta("a"), `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":"x"}}`, "[DONE]"},
		"empty reply": {},
		"error event": {delta("a"), `{"error":{"message":"out of memory","code":500}}`},
	}
	for name, events := range cases {
		c := streamServer(t, events, 0)
		if run, err := c.decodeRun(context.Background(), "m"); err == nil {
			t.Errorf("%s: no error, run %+v", name, run)
		}
	}
}
