package testckpt

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// vlSpecial are vl-tiny's in-vocabulary stand-ins of the Qwen3.5 special
// tokens (testdata/models/vl-tiny/README.md).
var vlSpecial = map[string]int{
	"<|endoftext|>": 984, "<|im_start|>": 985, "<|im_end|>": 986,
	"<|vision_start|>": 993, "<|vision_end|>": 994, "<|vision_pad|>": 995,
	"<|image_pad|>": 996, "<|video_pad|>": 997, "<think>": 1008, "</think>": 1009,
}

// WriteVL writes into dir a checkpoint that llm.Open takes with vl-tiny's
// weights (text model, vision tower, MTP head) and configs: vl-tiny has no
// tokenizer, so it gets one whose ids are vl-tiny's: the 256 byte-level
// tokens of the Qwen3 tokenizer of testdata (ids 0..255, without merges,
// so every byte is one token) and the special tokens at their stand-in
// ids, with the real Qwen3.5 chat template. The rendered chat prompts of
// vl-tiny's goldens tokenize to their input ids. The weights are linked,
// not copied, where the file system allows it.
func WriteVL(dir, testdata string) error {
	return writeByteLevel(dir, filepath.Join(testdata, "models", "vl-tiny"), testdata, vlSpecial,
		"config.json", "generation_config.json", "preprocessor_config.json", "model.safetensors")
}

// smallSpecial are the special tokens of WriteSmall's tokenizer, at ids
// of the top of small's vocabulary (its generation_config's EOS ids are
// 4093 and 4095).
var smallSpecial = map[string]int{
	"<|endoftext|>": 4095, "<|im_start|>": 4094, "<|im_end|>": 4093,
	"<|vision_start|>": 4085, "<|vision_end|>": 4086, "<|vision_pad|>": 4087,
	"<|image_pad|>": 4088, "<|video_pad|>": 4089, "<think>": 4090, "</think>": 4091,
}

// WriteSmall writes into dir a checkpoint that llm.Open takes with the
// small test model's weights and configs (testdata/models/small, which
// testdata/lora's adapters and goldens are for) and a byte-level
// tokenizer as WriteVL's, its special tokens at the top of the
// vocabulary (<|im_end|> 4093 and <|endoftext|> 4095, small's EOS ids).
func WriteSmall(dir, testdata string) error {
	return writeByteLevel(dir, filepath.Join(testdata, "models", "small"), testdata, smallSpecial,
		"config.json", "generation_config.json", "model.safetensors")
}

// writeByteLevel links (or copies) files of the checkpoint in src into
// dir and writes the chat template and a byte-level tokenizer with the
// special tokens at the given ids.
func writeByteLevel(dir, src, testdata string, special map[string]int, files ...string) error {
	for _, f := range files {
		from, err := filepath.Abs(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if os.Symlink(from, filepath.Join(dir, f)) != nil {
			data, err := os.ReadFile(from)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				return err
			}
		}
	}
	tpl, err := os.ReadFile(filepath.Join(testdata, "chat", "chat_template.jinja"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tpl, 0o644); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(testdata, "tokenizer", "qwen3", "tokenizer.json"))
	if err != nil {
		return err
	}
	var tok map[string]any
	if err := json.Unmarshal(data, &tok); err != nil {
		return err
	}
	m := tok["model"].(map[string]any)
	vocab := map[string]any{}
	for k, v := range m["vocab"].(map[string]any) {
		if v.(float64) < 256 {
			vocab[k] = v
		}
	}
	m["vocab"], m["merges"] = vocab, []any{}
	var added []any
	for s, id := range special {
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	tok["added_tokens"] = added
	out, err := json.Marshal(tok)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644); err != nil {
		return err
	}
	cfg := `{"add_bos_token": false, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 262144}`
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644)
}
