package main

import (
	"strings"
	"testing"
)

// TestQuantizeFlag checks --quantize on generate and bench: each mix loads
// and runs with a progress line, an unknown one is a usage error.
func TestQuantizeFlag(t *testing.T) {
	for _, mix := range []string{"q8_0", "q4_k_m"} {
		code, out, errOut := run(t, "", "generate", "--model", "../../testdata/models/small", "--ids", "1,2,3", "-n", "3", "--quantize", mix)
		if code != exitOK || len(strings.Split(strings.TrimSpace(out), ",")) != 3 {
			t.Fatalf("generate --quantize %s: exit %d, stdout %q, stderr %q", mix, code, out, errOut)
		}
		if !strings.Contains(errOut, "loading and quantizing ("+mix+")") {
			t.Errorf("generate --quantize %s: no progress line in %q", mix, errOut)
		}
	}
	code, out, errOut := run(t, "", "bench", "--model", "../../testdata/models/small", "--prompt", "8", "--gen", "2", "--repeat", "1", "--quantize", "q4_k_m", "--json")
	if code != exitOK || !strings.Contains(out, "decode_bytes_per_token") {
		t.Fatalf("bench --quantize: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{{"generate", "--ids", "1"}, {"bench"}} {
		code, _, errOut := run(t, "", append(args, "--model", "../../testdata/models/small", "--quantize", "q3")...)
		if code != exitUsage || !strings.Contains(errOut, "--quantize") {
			t.Errorf("%s --quantize q3: exit %d, stderr %q", args[0], code, errOut)
		}
	}
}
