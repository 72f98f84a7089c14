package chattemplate

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/govinfer/govinfer/gguf"
)

// GGUF metadata keys read here.
const (
	keyGGUFTemplate = "tokenizer.chat_template"
	keyGGUFTokens   = "tokenizer.ggml.tokens"
)

// ggufMetadata returns the metadata of the GGUF model at path (a .gguf file
// or a directory holding one, as gguf.Locate finds it), or ok false when
// path is not one.
func ggufMetadata(path string) (md *gguf.Metadata, ok bool, err error) {
	file, ok, err := gguf.Locate(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil || !ok {
		return nil, false, err
	}
	f, err := gguf.Open(file)
	if err != nil {
		return nil, false, err
	}
	defer f.Close() // the metadata is parsed out of the mapping
	return f.Metadata(), true, nil
}

// templateFromGGUF parses tokenizer.chat_template.
func templateFromGGUF(path string, md *gguf.Metadata) (*Template, error) {
	src, err := md.String(keyGGUFTemplate)
	if errors.Is(err, gguf.ErrNoKey) {
		return nil, fmt.Errorf("chattemplate: no chat template in %s (no %s)", path, keyGGUFTemplate)
	}
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", path, err)
	}
	t, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, keyGGUFTemplate, err)
	}
	return t, nil
}

// specialFromGGUF names the tokens of the bos, eos and padding ids.
func specialFromGGUF(path string, md *gguf.Metadata) (SpecialTokens, error) {
	var st SpecialTokens
	tokens, err := md.Strings(keyGGUFTokens)
	if err != nil {
		return st, fmt.Errorf("chattemplate: %s: %w", path, err)
	}
	for _, ref := range []struct {
		key string
		dst *string
	}{{"tokenizer.ggml.bos_token_id", &st.BOS}, {"tokenizer.ggml.eos_token_id", &st.EOS}, {"tokenizer.ggml.padding_token_id", &st.PAD}} {
		if !md.Has(ref.key) {
			continue
		}
		id, err := md.Int(ref.key)
		if err != nil {
			return st, fmt.Errorf("chattemplate: %s: %w", path, err)
		}
		if id < 0 || id >= int64(len(tokens)) {
			return st, fmt.Errorf("chattemplate: %s: %s %d names no token", path, ref.key, id)
		}
		*ref.dst = tokens[id]
	}
	return st, nil
}
