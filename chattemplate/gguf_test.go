package chattemplate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/gguf"
)

// TestGGUF loads the chat template and special tokens of llama.cpp's
// vocabulary-only file, which holds the Qwen3.5 template: every golden
// case renders as from chat_template.jinja.
func TestGGUF(t *testing.T) {
	path := filepath.Join("..", "testdata", "gguf", "qwen3-vocab.gguf")
	tmpl, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, cases := loadGolden(t)
	for _, c := range cases {
		got, err := renderCase(tmpl, c.Inputs)
		switch {
		case c.Rendered != nil && (err != nil || got != *c.Rendered):
			t.Errorf("%s: rendered %q, %v; want %q", c.Name, got, err, *c.Rendered)
		case c.Error != nil && err == nil:
			t.Errorf("%s: rendered, want an error", c.Name)
		}
	}
	st, err := LoadSpecialTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := (SpecialTokens{EOS: "<|im_end|>", PAD: "<|endoftext|>"}); st != want {
		t.Errorf("special tokens %+v, want %+v", st, want)
	}
	if _, err := Load(filepath.Join("..", "testdata", "gguf", "ksmall-bf16.gguf")); err != nil {
		t.Errorf("a model file's template: %v", err)
	}
}

// TestGGUFNoTemplate names the missing key.
func TestGGUFNoTemplate(t *testing.T) {
	_, err := templateFromGGUF("x.gguf", mustMetadata(t))
	if err == nil || !strings.Contains(err.Error(), "no chat template in x.gguf (no tokenizer.chat_template)") {
		t.Errorf("error %v", err)
	}
}

func mustMetadata(t *testing.T) *gguf.Metadata {
	t.Helper()
	md, err := gguf.NewMetadata(gguf.KV{Key: "general.architecture", Value: "qwen35"})
	if err != nil {
		t.Fatal(err)
	}
	return md
}
