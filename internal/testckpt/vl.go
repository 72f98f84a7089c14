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
	src := filepath.Join(testdata, "models", "vl-tiny")
	for _, f := range []string{"config.json", "generation_config.json", "preprocessor_config.json", "model.safetensors"} {
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
	for s, id := range vlSpecial {
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
