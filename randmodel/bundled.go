package randmodel

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// bundled holds the tokenizer files WriteBundledTokenizer writes (see
// bundled/README.md): Qwen3's tokenizer.json, gzip-compressed (2.1 MB of
// the binary for 11.4 MB), its tokenizer_config.json and Qwen3.5's chat
// template.
//
//go:embed bundled/tokenizer.json.gz bundled/tokenizer_config.json bundled/chat_template.jinja
var bundled embed.FS

// BundledTokenizerName describes the bundled tokenizer and chat template.
const BundledTokenizerName = "the Qwen3 tokenizer and the Qwen3.5 chat template"

// bundledFile returns the bytes of a bundled file, uncompressed.
func bundledFile(name string) ([]byte, error) {
	if name != "tokenizer.json" {
		return bundled.ReadFile("bundled/" + name)
	}
	gz, err := bundled.ReadFile("bundled/tokenizer.json.gz")
	if err != nil {
		return nil, err
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// BundledTokenizer returns what a checkpoint needs to know of the bundled
// tokenizer (ReadTokenizer's answer for it).
func BundledTokenizer() (TokenizerInfo, error) {
	data, err := bundledFile("tokenizer.json")
	if err != nil {
		return TokenizerInfo{}, fmt.Errorf("randmodel: the bundled tokenizer: %w", err)
	}
	return parseTokenizer(data, "the bundled tokenizer.json")
}

// WriteBundledTokenizer writes the bundled tokenizer.json,
// tokenizer_config.json and chat_template.jinja into dir. A non-empty
// chatTemplate names a template file written in place of the bundled one.
func WriteBundledTokenizer(dir, chatTemplate string) error {
	for _, name := range tokenizerFiles {
		var data []byte
		var err error
		if name == "chat_template.jinja" && chatTemplate != "" {
			data, err = os.ReadFile(chatTemplate)
		} else {
			data, err = bundledFile(name)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("randmodel: writing %s: %w", name, err)
		}
	}
	return nil
}
