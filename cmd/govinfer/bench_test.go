package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

func TestBenchJSON(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	code, out, errOut := run(t, "", "bench", "--model", dir, "--prompt", "16", "--gen", "4", "--repeat", "2", "--mem-mib", "16", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.PrefillTokensPerSecond <= 0 || res.DecodeTokensPerSecond <= 0 || res.DecodeGBPerSecond <= 0 ||
		res.MemoryReadGBPerSecond <= 0 || res.DecodeBytesPerToken <= 0 || res.Prompt != 16 || res.Gen != 4 {
		t.Errorf("implausible result: %+v", res)
	}
	if code, _, _ := run(t, "", "bench", "--model", dir, "--prompt", "0"); code != exitUsage {
		t.Errorf("--prompt 0: exit %d, want %d", code, exitUsage)
	}
}
