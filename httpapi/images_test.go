package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

var (
	vlOnce sync.Once
	vlDir  string
	vlErr  error
)

// vlCheckpoint returns vl-tiny's weights with a tokenizer of its ids
// (testckpt.WriteVL): a model with a vision tower.
func vlCheckpoint(t *testing.T) string {
	t.Helper()
	vlOnce.Do(func() {
		if vlDir, vlErr = os.MkdirTemp("", "httpapi-vl-"); vlErr == nil {
			vlErr = testckpt.WriteVL(vlDir, "../testdata")
		}
	})
	if vlErr != nil {
		t.Fatal(vlErr)
	}
	return vlDir
}

func imageFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("../testdata/models/vl-tiny/images/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func dataURL(b []byte) string { return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b) }

// chatWithImage is a chat body with a text part and an image_url part.
func chatWithImage(url string) map[string]any {
	return map[string]any{"model": "test-model", "max_tokens": 2, "temperature": 0, "messages": []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is in the image?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}},
		}},
	}}
}

// TestImagesEndpoints covers images on chat completions, Responses and
// Messages on vl-tiny (12 tokens for gradient_64x48).
func TestImagesEndpoints(t *testing.T) {
	png := imageFile(t, "gradient_64x48.png")
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/img.png":
			w.Write(png)
		case "/elsewhere":
			http.Redirect(w, r, "http://localhost:1/img.png", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer files.Close()
	s := startServerDir(t, vlCheckpoint(t), Config{AllowedMediaDomains: []string{"127.0.0.1"}}, llm.Options{MaxModelLen: 1024, MaxImages: 2})

	var textOnly int
	{
		body := chatWithImage("")
		body["messages"] = []any{map[string]any{"role": "user", "content": "What is in the image?"}}
		code, out := post(t, s, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("text chat: %d %s", code, out)
		}
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		json.Unmarshal(out, &r)
		textOnly = r.Usage.PromptTokens
	}
	for _, url := range []string{dataURL(png), files.URL + "/img.png"} {
		code, out := post(t, s, "/v1/chat/completions", chatWithImage(url))
		if code != 200 {
			t.Fatalf("chat with %.40s: %d %s", url, code, out)
		}
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		// The image adds <|vision_start|>, 12 pads and <|vision_end|>.
		if r.Usage.PromptTokens != textOnly+14 {
			t.Errorf("prompt_tokens %d, want %d (text) + 14", r.Usage.PromptTokens, textOnly)
		}
	}

	bad := []struct {
		name, url, param string
	}{
		{"malformed base64", "data:image/png;base64,@@@", "messages[0].content[1].image_url.url"},
		{"not base64", "data:image/png,abc", "messages[0].content[1].image_url.url"},
		{"media type", "data:text/plain;base64,aGVsbG8=", "messages[0].content[1].image_url.url"},
		{"corrupt", dataURL(png[:50]), "messages[0].content[1]"},
		{"disallowed host", "https://example.com/img.png", "messages[0].content[1].image_url.url"},
		{"redirect elsewhere", files.URL + "/elsewhere", "messages[0].content[1].image_url.url"},
		{"file scheme", "file:///etc/passwd", "messages[0].content[1].image_url.url"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			code, out := post(t, s, "/v1/chat/completions", chatWithImage(b.url))
			if code != 400 || !strings.Contains(string(out), b.param) {
				t.Errorf("%d %s; want 400 naming %s", code, out, b.param)
			}
		})
	}
	t.Run("too many", func(t *testing.T) {
		body := chatWithImage(dataURL(png))
		parts := body["messages"].([]any)[0].(map[string]any)["content"].([]any)
		parts = append(parts, parts[1], parts[1])
		body["messages"].([]any)[0].(map[string]any)["content"] = parts
		code, out := post(t, s, "/v1/chat/completions", body)
		if code != 400 || !strings.Contains(string(out), "messages[0].content[3]") {
			t.Errorf("%d %s; want 400 naming messages[0].content[3]", code, out)
		}
	})

	t.Run("responses", func(t *testing.T) {
		code, out := post(t, s, "/v1/responses", map[string]any{"model": "test-model", "max_output_tokens": 2, "input": []any{
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "What is in the image?"},
				map[string]any{"type": "input_image", "image_url": dataURL(png)},
			}},
		}})
		if code != 200 || !strings.Contains(string(out), `"input_tokens"`) {
			t.Fatalf("%d %s", code, out)
		}
		code, out = post(t, s, "/v1/responses", map[string]any{"model": "test-model", "input": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "file_id": "file-1"}}},
		}})
		if code != 400 || !strings.Contains(string(out), "file_id") {
			t.Errorf("file_id: %d %s", code, out)
		}
	})
	t.Run("messages", func(t *testing.T) {
		block := func(src map[string]any) map[string]any {
			return map[string]any{"model": "test-model", "max_tokens": 2, "messages": []any{
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "image", "source": src},
					map[string]any{"type": "text", "text": "What is in the image?"},
				}},
			}}
		}
		for _, src := range []map[string]any{
			{"type": "base64", "media_type": "image/png", "data": base64.StdEncoding.EncodeToString(png)},
			{"type": "url", "url": files.URL + "/img.png"},
		} {
			code, out := post(t, s, "/v1/messages", block(src))
			if code != 200 {
				t.Fatalf("%v: %d %s", src["type"], code, out)
			}
		}
		code, out := post(t, s, "/v1/messages", block(map[string]any{"type": "url", "url": "https://example.com/a.png"}))
		if code != 400 || !strings.Contains(string(out), "messages.0.content.0.source.url") {
			t.Errorf("disallowed url: %d %s", code, out)
		}
	})
	t.Run("models", func(t *testing.T) {
		resp, err := http.Get("http://" + s.Addr() + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Data []struct {
				InputModalities []string `json:"input_modalities"`
			}
		}
		json.NewDecoder(resp.Body).Decode(&r)
		if len(r.Data) != 1 || strings.Join(r.Data[0].InputModalities, ",") != "text,image" {
			t.Errorf("models %+v", r)
		}
	})
}
