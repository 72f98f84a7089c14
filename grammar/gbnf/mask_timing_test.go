package gbnf

import (
	"os"
	"testing"

	"github.com/govinfer/govinfer/grammar/grammartest"
)

// TestJSONMaskTimes walks testdata/json.gbnf with tokens drawn uniformly from
// each mask, three times from a fresh grammar, and reports the mask times.
func TestJSONMaskTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	v := grammartest.Qwen3Vocab(t, "../../testdata/tokenizer/qwen3")
	src, err := os.ReadFile("testdata/json.gbnf")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	grammartest.LogTimes(t, grammartest.MaskTimes(t, g, v, 3, 200), g.States())
}

// TestJSONMasks checks the masks of random walks through
// testdata/json.gbnf (a recursive grammar) against each token accepted
// one by one.
func TestJSONMasks(t *testing.T) {
	v := grammartest.Qwen3Vocab(t, "../../testdata/tokenizer/qwen3")
	src, err := os.ReadFile("testdata/json.gbnf")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	grammartest.CheckMasks(t, g, v, 3, 25)
}
