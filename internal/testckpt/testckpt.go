// Package testckpt writes the small random checkpoint the server and Go API
// tests run on: Qwen3.5 layout with tiny widths, a vocabulary covering the
// real Qwen3 tokenizer of testdata, that tokenizer and the real Qwen3.5
// chat template.
package testckpt

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/govinfer/govinfer/randmodel"
	"github.com/govinfer/govinfer/tokenizer"
)

// Write writes the checkpoint into dir; testdata is the repository's
// testdata directory.
func Write(dir, testdata string) error {
	copies := map[string]string{
		"tokenizer/qwen3/tokenizer.json":        "tokenizer.json",
		"tokenizer/qwen3/tokenizer_config.json": "tokenizer_config.json",
		"chat/chat_template.jinja":              "chat_template.jinja",
	}
	for src, dst := range copies {
		data, err := os.ReadFile(filepath.Join(testdata, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			return err
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	var eos []int
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, ok := tok.TokenID(s)
		if !ok {
			return fmt.Errorf("tokenizer lacks %s", s)
		}
		eos = append(eos, id)
	}
	shape := randmodel.Shape{Name: "qwen3-vocab-test", Hidden: 64, Intermediate: 128, Layers: 4, Vocab: tok.VocabSize(),
		Heads: 4, KVHeads: 2, HeadDim: 32, LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyHeadDim: 16, LinearValueHeadDim: 16,
		Tied: true, MaxPositionEmbeddings: 8192}
	return randmodel.Write(dir, shape, randmodel.Options{Seed: 42, EOS: eos})
}
