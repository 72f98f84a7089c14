package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
)

// TestBenchAgentDisk runs bench --agent-replay with the disk tier on the
// test checkpoint: restarted between turns, every later turn resumes from
// disk; with more sessions than memory holds, the disk tier supplies what
// memory lost and no write is dropped.
func TestBenchAgentDisk(t *testing.T) {
	dir := t.TempDir()
	if err := testckpt.Write(dir, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "bench", "--model", dir, "--agent-replay", "--restart", "--turns", "3", "--gen", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res diskReplayResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != 3 || res.WriteBytes == 0 || res.ReadBytes == 0 || res.Real9B.StateBytes == 0 {
		t.Fatalf("result %+v", res)
	}
	for _, tr := range res.Turns[1:] {
		if tr.DiskHitTokens == 0 || tr.CachedTokens != tr.MemoryCachedTokens || tr.TTFTCold == 0 {
			t.Errorf("after a restart: %+v", tr)
		}
	}
	code, out, errOut = run(t, "", "bench", "--model", dir, "--agent-replay", "--sessions", "4", "--turns", "3", "--gen", "2", "--no-cache-turns", "3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	res = diskReplayResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != 12 || res.Dropped != 0 {
		t.Fatalf("result %+v", res)
	}
	disk := 0
	for _, tr := range res.Turns {
		if tr.CachedTokens < tr.MemoryCachedTokens {
			t.Errorf("the disk tier resumed less than memory alone: %+v", tr)
		}
		disk += tr.DiskHitTokens
	}
	if disk == 0 {
		t.Error("no turn resumed from disk")
	}
	// On the CPU backend memory is host memory already: a host tier is
	// refused, saying so.
	code, _, errOut = run(t, "", "bench", "--model", dir, "--agent-replay", "--sessions", "2", "--turns", "1", "--gen", "1", "--prefix-cache-host", "1MiB")
	if code == 0 || !strings.Contains(errOut, "host memory already") {
		t.Errorf("--prefix-cache-host on the CPU backend: exit %d, %s", code, errOut)
	}
}
