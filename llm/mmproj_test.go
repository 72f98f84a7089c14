package llm_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/convert"
	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/model/vision"
)

// TestGGUFWithMMProjMatchesGolden opens vl-tiny converted to GGUF files (the
// text model in BF16 by package convert, the tower as a BF16 mmproj file by
// vision.WriteGGUF) with Options.MMProj and runs the multimodal golden
// conversations: the prompts and greedy tokens are the goldens'. Without
// MMProj the GGUF model takes no images.
func TestGGUFWithMMProjMatchesGolden(t *testing.T) {
	ck := t.TempDir()
	if err := testckpt.WriteVL(ck, "../testdata"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, mmproj := filepath.Join(dir, "vl.gguf"), filepath.Join(dir, "mmproj-vl.gguf")
	ctx := context.Background()
	if _, err := convert.Write(ctx, ck, model, convert.Options{Type: convert.TypeBF16}); err != nil {
		t.Fatal(err)
	}
	if _, err := vision.WriteGGUF(ctx, ck, mmproj, vision.WriteGGUFOptions{Type: vision.GGUFTypeBF16}); err != nil {
		t.Fatal(err)
	}
	lm, err := llm.Open(model, llm.Options{MaxModelLen: 1024, MaxImages: 3, MMProj: mmproj})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	if !lm.HasVision() || lm.MaxImages() != 3 {
		t.Fatalf("HasVision %v, MaxImages %d", lm.HasVision(), lm.MaxImages())
	}
	files, cases := vlGoldens(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			req := llm.ChatRequest{Thinking: llm.Bool(c.Thinking), Params: greedy(len(c.Greedy))}
			req.IgnoreEOS, req.Logprobs = true, true // every token, undecodable ones too
			for _, raw := range c.Messages {
				v, err := jsonvalue.Decode(raw)
				if err != nil {
					t.Fatal(err)
				}
				req.Messages = append(req.Messages, llm.MessageJSON(v))
			}
			for _, name := range c.Images {
				req.Images = append(req.Images, readImage(t, files[name]))
			}
			_, ids, err := lm.ChatPrompt(req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, c.InputIDs) {
				t.Fatalf("ids %v, want %v", ids, c.InputIDs)
			}
			st, err := lm.Chat(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if out := collect(t, st); !slices.Equal(out[0].tokens, c.Greedy) {
				t.Errorf("greedy tokens %v, want %v", out[0].tokens, c.Greedy)
			}
		})
	}
	// Without MMProj: no tower, and an image is the request's fault.
	plain, err := llm.Open(model, llm.Options{MaxModelLen: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.HasVision() {
		t.Error("a GGUF model without MMProj has a vision tower")
	}
	req := llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "hi", Images: []llm.Image{readImage(t, files["gray_44x36"])}}}}
	var pe *llm.ParamError
	if _, err := plain.Chat(ctx, req); !errors.As(err, &pe) {
		t.Errorf("image for a model without a tower: %v", err)
	}
	// A projector of another width is refused when the model opens.
	if _, err := llm.Open(filepath.Join("..", "testdata", "gguf", "ksmall-bf16.gguf"), llm.Options{MMProj: mmproj}); err == nil {
		t.Error("ksmall (hidden 256) took vl-tiny's mmproj (64)")
	}
}
