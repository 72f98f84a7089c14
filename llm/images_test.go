package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/vulkan"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

var (
	vlOnce  sync.Once
	vlModel *llm.Model
	vlDir   string
	vlErr   error
)

// openVL returns a model on vl-tiny's weights with a tokenizer of its ids
// (testckpt.WriteVL), shared by the tests.
func openVL(t *testing.T) *llm.Model {
	t.Helper()
	vlOnce.Do(func() {
		if vlDir, vlErr = os.MkdirTemp("", "llm-vl-"); vlErr != nil {
			return
		}
		if vlErr = testckpt.WriteVL(vlDir, "../testdata"); vlErr != nil {
			return
		}
		vlModel, vlErr = llm.Open(vlDir, llm.Options{MaxModelLen: 1024, MaxImages: 3})
	})
	if vlErr != nil {
		t.Fatal(vlErr)
	}
	return vlModel
}

// vlCase is a multimodal golden case of vl-tiny.
type vlCase struct {
	Name         string            `json:"name"`
	Messages     []json.RawMessage `json:"messages"`
	Images       []string          `json:"images"`
	Thinking     bool              `json:"enable_thinking"`
	RenderedText string            `json:"rendered_text"`
	InputIDs     []int             `json:"input_ids"`
	Greedy       []int             `json:"greedy_tokens"`
}

func vlGoldens(t *testing.T) (map[string]string, []vlCase) {
	t.Helper()
	var g struct {
		Images map[string]struct {
			File string `json:"file"`
		} `json:"images"`
		Cases []vlCase `json:"mm_cases"`
	}
	data, err := os.ReadFile("../testdata/models/vl-tiny/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for name, im := range g.Images {
		files[name] = filepath.Join("../testdata/models/vl-tiny", im.File)
	}
	return files, g.Cases
}

func readImage(t *testing.T, path string) llm.Image {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return llm.Image{Data: data}
}

// TestChatImagesMatchGolden runs vl-tiny's multimodal golden conversations
// through Chat, the messages as JSON with their image items' files as
// ChatRequest.Images: the prompt is the goldens' (pads expanded), greedy
// decoding gives the golden tokens, and prompt_tokens counts the image
// tokens.
func TestChatImagesMatchGolden(t *testing.T) {
	checkImageGoldens(t, openVL(t))
}

// TestChatImagesVulkan is TestChatImagesMatchGolden with the text model and
// the vision tower each on a Vulkan backend of its own (lavapipe in CI).
func TestChatImagesVulkan(t *testing.T) {
	be, err := vulkan.New(vulkan.Options{})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan backend: %v", err)
	}
	defer be.Close()
	openVL(t) // writes the checkpoint
	made := 0
	lm, err := llm.Open(vlDir, llm.Options{Backend: be, MaxModelLen: 1024, MaxImages: 3,
		VisionBackend: func() (compute.Backend, error) {
			made++
			return vulkan.New(vulkan.Options{})
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	if made != 1 {
		t.Fatalf("VisionBackend called %d times, want once", made)
	}
	checkImageGoldens(t, lm)
}

// checkImageGoldens runs vl-tiny's multimodal golden cases through lm.
func checkImageGoldens(t *testing.T, lm *llm.Model) {
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
			text, ids, err := lm.ChatPrompt(req)
			if err != nil {
				t.Fatal(err)
			}
			if text != c.RenderedText {
				t.Errorf("prompt %q, want %q", text, c.RenderedText)
			}
			if !slices.Equal(ids, c.InputIDs) {
				t.Fatalf("ids %v, want %v", ids, c.InputIDs)
			}
			st, err := lm.Chat(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			out := collect(t, st)
			if !slices.Equal(out[0].tokens, c.Greedy) {
				t.Errorf("greedy tokens %v, want %v", out[0].tokens, c.Greedy)
			}
			if u := st.Usage(); u.PromptTokens != len(c.InputIDs) {
				t.Errorf("prompt_tokens %d, want %d", u.PromptTokens, len(c.InputIDs))
			}
		})
	}
}

// TestChatImageStructAndCache sends one_image as a struct message (the
// image before the text), then a second turn with the same image: it
// resumes from the prefix cache past the image, and the tower's output is
// reused.
func TestChatImageStructAndCache(t *testing.T) {
	lm := openVL(t)
	files, cases := vlGoldens(t)
	c := cases[0]
	if c.Name != "one_image" {
		t.Fatalf("first case is %s", c.Name)
	}
	img := readImage(t, files[c.Images[0]])
	first := llm.Message{Role: "user", Images: []llm.Image{img}, Content: "What is in the image?"}
	p := greedy(len(c.Greedy))
	p.IgnoreEOS, p.Logprobs = true, true
	st, err := lm.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{first}, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, st)
	if !slices.Equal(out[0].tokens, c.Greedy) {
		t.Errorf("greedy tokens %v, want %v", out[0].tokens, c.Greedy)
	}
	lastImage := 0
	for i, id := range c.InputIDs {
		if id == 996 {
			lastImage = i
		}
	}
	// The prefix cache keeps state at multiples of 64 tokens: a first turn
	// of 64 to 127 tokens puts one past the image and before the turns
	// differ.
	first.Content = "What is in the image? Describe its colors and shapes, please."
	st, err = lm.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{first}, Params: greedy(2)})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, st)
	second := []llm.Message{first, {Role: "assistant", Content: "A gradient."}, {Role: "user", Content: "And its colors?"}}
	st, err = lm.Chat(context.Background(), llm.ChatRequest{Messages: second, Params: greedy(4)})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, st)
	u := st.Usage()
	if u.CachedTokens <= lastImage {
		t.Errorf("second turn resumed %d cached tokens of %d; want more than %d (past the image)", u.CachedTokens, u.PromptTokens, lastImage)
	}
	t.Logf("second turn: %d prompt tokens, %d cached", u.PromptTokens, u.CachedTokens)
}

// TestChatImageErrors: bad images and counts are *ParamErrors naming the
// part; a prompt too long with its image tokens is a ContextLengthError.
func TestChatImageErrors(t *testing.T) {
	lm := openVL(t)
	files, _ := vlGoldens(t)
	good := readImage(t, files["gradient_64x48"])
	msg := func(parts string) llm.Message {
		v, err := jsonvalue.Decode([]byte(`{"role": "user", "content": [` + parts + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return llm.MessageJSON(v)
	}
	for _, tc := range []struct {
		name   string
		req    llm.ChatRequest
		param  string
		substr string
	}{
		{"corrupt", llm.ChatRequest{Messages: []llm.Message{msg(`{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}`)},
			Images: []llm.Image{{Data: good.Data[:40]}}}, "messages[0].content[1]", "corrupt"},
		{"not an image", llm.ChatRequest{Messages: []llm.Message{msg(`{"type": "input_image"}`)},
			Images: []llm.Image{{Data: []byte("hello")}}}, "messages[0].content[0]", "format"},
		{"too many", llm.ChatRequest{Messages: []llm.Message{{Role: "user", Images: []llm.Image{good, good, good, good}, Content: "x"}}},
			"messages[0].content[3]", "at most 3"},
		{"missing bytes", llm.ChatRequest{Messages: []llm.Message{msg(`{"type": "image"}, {"type": "image"}`)},
			Images: []llm.Image{good}}, "messages", "image"},
		{"extra bytes", llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "x"}}, Images: []llm.Image{good}}, "messages", "image"},
		{"pad text", llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "<|image_pad|>"}}}, "messages", "image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lm.Chat(context.Background(), tc.req)
			var pe *llm.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want a *ParamError", err, err)
			}
			if pe.Param != tc.param || !strings.Contains(pe.Message, tc.substr) {
				t.Errorf("param %q message %q, want %q containing %q", pe.Param, pe.Message, tc.param, tc.substr)
			}
		})
	}
	t.Run("context", func(t *testing.T) {
		large := readImage(t, files["large_300x220"])
		// 54 tokens per image, 3 images, a text of ~900 bytes: over 1024
		// only with the image tokens.
		req := llm.ChatRequest{Messages: []llm.Message{{Role: "user", Images: []llm.Image{large, large, large}, Content: strings.Repeat("ab ", 300)}}}
		_, err := lm.Chat(context.Background(), req)
		var ce *llm.ContextLengthError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v (%T), want a *ContextLengthError", err, err)
		}
	})
}

// TestChatImageWithoutTower: the text-only test checkpoint refuses images.
func TestChatImageWithoutTower(t *testing.T) {
	lm := openModel(t)
	if lm.HasVision() {
		t.Fatal("the text-only checkpoint has vision")
	}
	_, err := lm.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{{Role: "user", Images: []llm.Image{{Data: []byte("x")}}, Content: "hi"}}})
	var pe *llm.ParamError
	if !errors.As(err, &pe) || pe.Param != "messages[0].content[0]" || !strings.Contains(pe.Message, "does not take images") {
		t.Fatalf("error %v, want a ParamError on messages[0].content[0] saying the model takes no images", err)
	}
}
