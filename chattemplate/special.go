package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SpecialTokens are the special-token strings a chat template sees as
// bos_token, eos_token and pad_token; "" is None.
type SpecialTokens struct {
	BOS, EOS, PAD string
}

// LoadSpecialTokens reads bos_token, eos_token and pad_token from a
// checkpoint's tokenizer_config.json (each a string or an added-token
// object with "content"); a missing file gives none. For a GGUF file they
// are the tokens of its bos, eos and padding ids.
func LoadSpecialTokens(dir string) (SpecialTokens, error) {
	if md, ok, err := ggufMetadata(dir); err != nil {
		return SpecialTokens{}, fmt.Errorf("chattemplate: %w", err)
	} else if ok {
		return specialFromGGUF(dir, md)
	}
	var st SpecialTokens
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	get := func(key string) (string, error) {
		raw, ok := cfg[key]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, nil
		}
		var added struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &added); err != nil {
			return "", fmt.Errorf("%s: %q is neither a string nor a token object", path, key)
		}
		return added.Content, nil
	}
	if st.BOS, err = get("bos_token"); err != nil {
		return st, err
	}
	if st.EOS, err = get("eos_token"); err != nil {
		return st, err
	}
	st.PAD, err = get("pad_token")
	return st, err
}
