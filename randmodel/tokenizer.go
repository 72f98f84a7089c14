package randmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// tokenizerFiles are the files CopyTokenizer copies from a tokenizer
// directory, when present; tokenizer.json is required.
var tokenizerFiles = [...]string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}

// TokenizerInfo is what a checkpoint built around a tokenizer needs to know.
type TokenizerInfo struct {
	// Vocab is the number of ids the tokenizer can produce (largest id + 1).
	Vocab int
	// EOS are the ids of <|im_end|> and <|endoftext|>, those present.
	EOS []int
	// Vision holds the ids of <|image_pad|>, <|video_pad|>,
	// <|vision_start|> and <|vision_end|> (zero where absent).
	Vision VisionIDs
}

// ReadTokenizer reads the vocabulary size and end-of-sequence ids of a
// Hugging Face tokenizer.json.
func ReadTokenizer(path string) (TokenizerInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return TokenizerInfo{}, fmt.Errorf("randmodel: %w", err)
	}
	return parseTokenizer(data, path)
}

// parseTokenizer is ReadTokenizer of the contents of a tokenizer.json,
// named path in its errors.
func parseTokenizer(data []byte, path string) (TokenizerInfo, error) {
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return TokenizerInfo{}, fmt.Errorf("randmodel: %s: %w", path, err)
	}
	var info TokenizerInfo
	for _, id := range tj.Model.Vocab {
		info.Vocab = max(info.Vocab, id+1)
	}
	special := map[string]int{}
	for _, a := range tj.AddedTokens {
		info.Vocab = max(info.Vocab, a.ID+1)
		special[a.Content] = a.ID
	}
	if info.Vocab == 0 {
		return TokenizerInfo{}, fmt.Errorf("randmodel: %s: empty vocabulary", path)
	}
	for _, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := special[name]; ok {
			info.EOS = append(info.EOS, id)
		}
	}
	info.Vision = VisionIDs{ImagePad: special["<|image_pad|>"], VideoPad: special["<|video_pad|>"],
		VisionStart: special["<|vision_start|>"], VisionEnd: special["<|vision_end|>"]}
	return info, nil
}

// CopyTokenizer copies tokenizer.json, tokenizer_config.json and
// chat_template.jinja (those present; tokenizer.json is required) from src
// to dst. A non-empty chatTemplate names a template file that replaces the
// one in src.
func CopyTokenizer(dst, src, chatTemplate string) error {
	for _, name := range tokenizerFiles {
		from := filepath.Join(src, name)
		if name == "chat_template.jinja" && chatTemplate != "" {
			from = chatTemplate
		}
		err := copyFile(filepath.Join(dst, name), from)
		if errors.Is(err, os.ErrNotExist) && name != "tokenizer.json" && from != chatTemplate {
			continue
		}
		if err != nil {
			return fmt.Errorf("randmodel: copying %s: %w", name, err)
		}
	}
	return nil
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
