package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// govinferBinary builds the govinfer binary once per test run.
func govinferBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "govinfer-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "govinfer")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// process is a govinfer serve process.
type process struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	exited chan struct{}
	code   int
	end    time.Time
}

// startServe runs "govinfer serve" on dir with args and waits until it
// serves.
func startServe(t *testing.T, dir string, args ...string) *process {
	t.Helper()
	args = append([]string{"serve", "--model", dir, "--port", "0", "--served-model-name", "m", "--threads", "1"}, args...)
	p := &process{cmd: exec.Command(govinferBinary(t), args...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), "http://"); i >= 0 {
				urls <- strings.Fields(sc.Text()[i:])[0]
			}
		}
		p.cmd.Wait()
		p.code, p.end = p.cmd.ProcessState.ExitCode(), time.Now()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	select {
	case p.url = <-urls:
	case <-p.exited:
		t.Fatalf("serve exited %d: %s", p.code, p.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start: %s", p.stderr)
	}
	return p
}

func (p *process) signal(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

func (p *process) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("still running after %v: %s", d, p.stderr)
	}
}

// gauge reads a gauge of the process's /metrics.
func (p *process) gauge(name string) float64 {
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && strings.HasPrefix(f[0], name+"{") {
			var v float64
			fmt.Sscan(f[1], &v)
			return v
		}
	}
	return -1
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 30s", what)
		}
	}
}

// result is what a client got.
type result struct {
	status int
	body   string
	end    time.Time
}

// request posts body to path and sends the whole response on the
// returned channel.
func (p *process) request(path string, body map[string]any) <-chan result {
	out := make(chan result, 1)
	raw, _ := json.Marshal(body)
	go func() {
		resp, err := http.Post(p.url+path, "application/json", bytes.NewReader(raw))
		if err != nil {
			out <- result{status: -1, body: err.Error(), end: time.Now()}
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- result{status: resp.StatusCode, body: string(data), end: time.Now()}
	}()
	return out
}

func chatRequest(maxTokens int, stream bool) map[string]any {
	return map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "go on"}},
		"max_tokens": maxTokens, "temperature": 0, "ignore_eos": true, "stream": stream}
}

// TestServeDrainsOnSIGTERM is the drain timeline: SIGTERM while four
// streams run and two requests wait; /health and new requests get 503, all
// six finish in full, the process exits 0, one log line per phase.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p := startServe(t, servableCheckpoint(t), "--max-num-seqs", "4", "--max-model-len", "4096", "--shutdown-timeout", "120")
	var streams, queued []<-chan result
	for range 4 {
		streams = append(streams, p.request("/v1/chat/completions", chatRequest(1500, true)))
	}
	waitUntil(t, "4 running", func() bool { return p.gauge("vllm:num_requests_running") == 4 })
	for range 2 {
		queued = append(queued, p.request("/v1/chat/completions", chatRequest(200, false)))
	}
	waitUntil(t, "2 waiting", func() bool { return p.gauge("vllm:num_requests_waiting") == 2 })

	sigterm := time.Now()
	p.signal(t)
	waitUntil(t, "health 503", func() bool {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	healthAt := time.Since(sigterm)
	refused := <-p.request("/v1/completions", map[string]any{"model": "m", "prompt": "late", "max_tokens": 1})
	if refused.status != 503 || !strings.Contains(refused.body, "unavailable_error") {
		t.Errorf("a request after SIGTERM: %d %s", refused.status, refused.body)
	}
	if running := p.gauge("vllm:num_requests_running"); running != 4 {
		t.Errorf("%v running right after SIGTERM, want the 4 streams", running)
	}

	p.wait(t, 120*time.Second)
	if p.code != 0 {
		t.Errorf("exit code %d", p.code)
	}
	var timeline []string
	for i, c := range streams {
		r := <-c
		if r.status != 200 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") || !strings.Contains(r.body, `"finish_reason":"length"`) {
			t.Errorf("stream %d: %d ...%s", i, r.status, r.body[max(0, len(r.body)-200):])
		}
		timeline = append(timeline, fmt.Sprintf("stream %d: 200, 1500 tokens, [DONE] at +%.2fs", i, r.end.Sub(sigterm).Seconds()))
	}
	for i, c := range queued {
		r := <-c
		if r.status != 200 || !strings.Contains(r.body, `"completion_tokens":200`) {
			t.Errorf("queued %d: %d %s", i, r.status, r.body)
		}
		timeline = append(timeline, fmt.Sprintf("queued %d: 200, 200 tokens at +%.2fs", i, r.end.Sub(sigterm).Seconds()))
	}
	t.Logf("drain timeline from SIGTERM: /health 503 within %.3fs; a new request 503; %s; process exited 0 at +%.2fs",
		healthAt.Seconds(), strings.Join(timeline, "; "), p.end.Sub(sigterm).Seconds())
	log := p.stderr.String()
	for _, phase := range []string{"shutting down: draining", "with 4 running and 2 queued requests", "drained in", "stopped after"} {
		if !strings.Contains(log, phase) {
			t.Errorf("log lacks %q:\n%s", phase, log)
		}
	}
}

// TestServeShutdownTimeoutAndSecondSignal: with --shutdown-timeout 0 a
// SIGTERM aborts at once (the stream still ends with an error event and
// [DONE]) and the process exits 0; with a long timeout a second SIGTERM
// exits at once.
func TestServeShutdownTimeoutAndSecondSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := servableCheckpoint(t)
	t.Run("timeout 0", func(t *testing.T) {
		p := startServe(t, dir, "--max-model-len", "4096", "--shutdown-timeout", "0")
		stream := p.request("/v1/chat/completions", chatRequest(4000, true))
		waitUntil(t, "running", func() bool { return p.gauge("vllm:num_requests_running") == 1 })
		start := time.Now()
		p.signal(t)
		p.wait(t, 30*time.Second)
		if p.code != 0 {
			t.Errorf("exit code %d: %s", p.code, p.stderr)
		}
		r := <-stream
		if !strings.HasSuffix(r.body, "data: [DONE]\n\n") || !strings.Contains(r.body, `"error"`) {
			t.Errorf("aborted stream: %d ...%s", r.status, r.body[max(0, len(r.body)-300):])
		}
		if !strings.Contains(p.stderr.String(), "shutdown timeout after") {
			t.Errorf("log: %s", p.stderr)
		}
		t.Logf("exited %.2fs after SIGTERM", p.end.Sub(start).Seconds())
	})
	t.Run("second signal", func(t *testing.T) {
		p := startServe(t, dir, "--max-model-len", "4096", "--shutdown-timeout", "600")
		p.request("/v1/chat/completions", chatRequest(4000, true))
		waitUntil(t, "running", func() bool { return p.gauge("vllm:num_requests_running") == 1 })
		p.signal(t)
		waitUntil(t, "draining", func() bool { return strings.Contains(p.stderr.String(), "draining") })
		start := time.Now()
		p.signal(t)
		p.wait(t, 10*time.Second)
		if p.code == 0 || !strings.Contains(p.stderr.String(), "second signal") {
			t.Errorf("exit code %d after a second signal: %s", p.code, p.stderr)
		}
		t.Logf("exited %.3fs after the second signal", p.end.Sub(start).Seconds())
	})
}
