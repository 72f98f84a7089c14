package llm

import (
	"bytes"
	"testing"
)

// TestStateKey: every field of the disk tier's key changes its bytes, and
// a key without an mmproj file or adapter is the format files on disk were
// written under (so their directories stay valid).
func TestStateKey(t *testing.T) {
	base := stateKey{checkpoint: [32]byte{1}, quantize: "q8_0"}
	want := "checkpoint 01" + string(bytes.Repeat([]byte("00"), 31)) + "\nquantize q8_0\nlora \n"
	if got := string(base.bytes()); got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	for name, k := range map[string]stateKey{
		"checkpoint": {checkpoint: [32]byte{2}, quantize: "q8_0"},
		"quantize":   {checkpoint: [32]byte{1}},
		"mmproj":     {checkpoint: [32]byte{1}, quantize: "q8_0", hasMMProj: true},
		"lora":       {checkpoint: [32]byte{1}, quantize: "q8_0", lora: "a 00ff 1"},
	} {
		if bytes.Equal(k.bytes(), base.bytes()) {
			t.Errorf("another %s gives the same key", name)
		}
	}
}
