package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every size flag reads units one way: K, M, G, T as powers of 1000 and
// KiB, MiB, GiB, TiB as powers of 1024, each with or without B.
func TestSizeFlag(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"1K", 1000}, {"1KB", 1000}, {"1KiB", 1024}, {"1G", 1e9}, {"1GB", 1e9}, {"1gb", 1e9},
		{"1GiB", 1 << 30}, {"1Gi", 1 << 30}, {"1.5MiB", 3 << 19}, {"2 TB", 2e12},
	} {
		fs := newFlagSet(stdio{}, "test", "test")
		n := sizeFlag(fs.FlagSet, "bytes", int64(7), "a size")
		if err := fs.Parse([]string{"--bytes", c.in}); err != nil || *n != c.want {
			t.Errorf("--bytes %s: %d, %v; want %d", c.in, *n, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"lots", "want bytes or a number with a unit"},
		{"8XB", `unknown unit "XB"`},
		{"-1MiB", "must not be negative"},
		{"0", "at least one byte"},
		{"", "empty size"},
	} {
		fs := newFlagSet(stdio{}, "test", "test")
		sizeFlag(fs.FlagSet, "bytes", 7, "a size")
		err := fs.Parse([]string{"--bytes", c.in})
		if err == nil || !strings.Contains(err.Error(), `invalid value "`+c.in+`" for flag --bytes: `) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--bytes %q: %v; want %q", c.in, err, c.want)
		}
	}
}

// serve's size flags all take units, say so in --help with their defaults
// in units, and refuse garbage before loading anything.
func TestServeSizeFlags(t *testing.T) {
	code, out, _ := serve(context.Background(), "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"-max-body-bytes size", "(default 32MiB)", "-media-max-bytes size", "(default 20MiB)",
		"-responses-store-bytes size", "1GB or 1G = 10^9 bytes, 1GiB = 2^30", "8GB = 8*10^9"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-body-bytes", "lots"}, `invalid value "lots" for flag --max-body-bytes: want bytes or a number with a unit`},
		{[]string{"--media-max-bytes", "5XB"}, `unknown unit "XB"`},
		{[]string{"--responses-store-bytes", "0"}, "at least one byte"},
		{[]string{"--state-memory", "8XB"}, `--state-memory: state memory "8XB": unknown unit "XB"`},
		{[]string{"--state-memory", "1.5"}, "a fraction must be in (0, 1]"},
	} {
		code, _, errOut := serve(context.Background(), append([]string{"--model", "x"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d, %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

// A state memory below 256 tokens of one sequence is refused at start with
// the minimum in bytes and in binary units; that minimum serves.
func TestServeStateMemoryMinimum(t *testing.T) {
	dir := servableCheckpoint(t)
	code, _, errOut := serve(context.Background(), "--model", dir, "--port", "0", "--threads", "1", "--state-memory", "1KiB")
	m := regexp.MustCompile(`state memory of 1024 bytes \(1\.0 KiB\) is below this model's minimum of (\d+) bytes \(\d+\.\d [KMG]iB\), the state of one sequence of 256 tokens .*--state-memory`).FindStringSubmatch(errOut.String())
	if code != exitError || m == nil {
		t.Fatalf("--state-memory 1KiB: exit %d, %q", code, errOut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out, log syncBuffer
	go func() {
		done <- runServe(ctx, stdio{in: strings.NewReader(""), out: &out, err: &log}, []string{"--model", dir, "--port", "0", "--threads", "1", "--state-memory", m[1]})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "serving on") {
		select {
		case code := <-done:
			t.Fatalf("--state-memory %s (the minimum): exit %d, %s", m[1], code, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("--state-memory %s (the minimum): not serving; %s", m[1], log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(log.String(), "holds 256 tokens of state") {
		t.Errorf("the minimum state memory: %s", log.String())
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("exit %d", code)
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n <= 1024 {
		t.Errorf("the minimum is %d bytes", n)
	}
}
