package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/model"
)

// TestQuietProgress checks when the progress printer of generate and
// bench prints: nothing for a load under two seconds but its notes, a
// line a second after that and one at the end, and from the start when
// quantizing.
func TestQuietProgress(t *testing.T) {
	feed := func(mix string) string {
		var errOut bytes.Buffer
		p := quietProgress(stdio{err: &errOut}, "M", mix)
		for i := 1; i <= 3; i++ {
			p(model.Progress{Tensors: i, TotalTensors: 3, Bytes: int64(i) << 30, TotalBytes: 3 << 30})
		}
		p(model.Progress{Tensors: 3, TotalTensors: 3, Note: "kept in Q8_0"})
		return errOut.String()
	}
	if got := feed(""); got != "note: kept in Q8_0\n" {
		t.Fatalf("a quick load printed %q", got)
	}
	if got := feed("q8_0"); !strings.HasPrefix(got, "loading and quantizing (q8_0) M: 1/3 tensors, 1.07/3.22 GB") {
		t.Fatalf("a quantizing load printed %q", got)
	}
	after := progressAfter
	progressAfter = 0
	defer func() { progressAfter = after }()
	got := feed("")
	if lines := strings.Split(strings.TrimSpace(got), "\n"); len(lines) != 4 || // the first, the last twice, the note
		!strings.HasPrefix(lines[0], "loading M: 1/3 tensors") || !strings.HasPrefix(lines[1], "loading M: 3/3 tensors") {
		t.Fatalf("a slow load printed %q", got)
	}
}

// TestGenerateInterrupted checks that generate stops loading when its
// context is cancelled (the first SIGINT or SIGTERM), with exit status 1.
func TestGenerateInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	start := time.Now()
	code := dispatch(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut},
		[]string{"generate", "--model", "../../testdata/models/small", "--ids", "1,2,3", "-n", "3"})
	if code != exitError || !strings.Contains(errOut.String(), "interrupted while loading") || time.Since(start) > 10*time.Second {
		t.Fatalf("generate, interrupted: exit %d after %v, stdout %q, stderr %q", code, time.Since(start), out.String(), errOut.String())
	}
}
