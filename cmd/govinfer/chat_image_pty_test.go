//go:build linux

package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// anyPrompt matches a line that starts with the chat prompt, attached
// images' label or not.
var anyPrompt = regexp.MustCompile(`^(\[\d+ images?: [^\]]*\] )?>>>`)

// doPrompt types keys and waits for the prompt want (the label and ">>>",
// trimmed) on the last line after a new one; it returns the screen from
// the line typed on to that prompt (excluded).
func (c *ptyChat) doPrompt(keys, want string) string {
	c.t.Helper()
	prompts := func(lines []string) []int {
		var at []int
		for i, l := range lines {
			if anyPrompt.MatchString(l) {
				at = append(at, i)
			}
		}
		return at
	}
	before := len(prompts(screenLines(c.text())))
	c.send(keys)
	text := c.waitFor(fmt.Sprintf("the prompt %q after %q", want, keys), func(text string) bool {
		lines := screenLines(text)
		return len(prompts(lines)) > before && lines[len(lines)-1] == want
	})
	lines := screenLines(text)
	return strings.Join(lines[prompts(lines)[before-1]:len(lines)-1], "\n")
}

// TestChatTerminalImages drives images in an interactive chat: /image, a
// dropped path (quoted, and pasted as a file:// URL), the prompt's label,
// /image's list, /image clear, a turn whose prompt holds the image, a file
// that is not an image, /clear, and a model without a vision tower.
func TestChatTerminalImages(t *testing.T) {
	files, png := imageFiles(t)
	dir := vlCheckpoint(t)
	m, err := llm.Open(dir, llm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := startChat(t, "--model", dir, "--think", "off", "--temperature", "0", "--max-tokens", "3", "--verbose")
	c.waitFor("the first prompt", func(s string) bool { return len(promptLines(screenLines(s))) == 1 })
	gradient := filepath.Join(vlImages, "gradient_64x48.png")
	out := c.doPrompt("/image "+gradient+"\r", "[1 image: gradient_64x48.png] >>>")
	if !strings.Contains(out, "(attached gradient_64x48.png (PNG, 64x48, 343 bytes)") {
		t.Errorf("/image:\n%s", out)
	}
	spaced := filepath.Join(files, "my cat's photo.png")
	out = c.doPrompt("'"+strings.ReplaceAll(spaced, "'", `'\''`)+"' \r", "[2 images: gradient_64x48.png, my cat's photo.png] >>>")
	if !strings.Contains(out, "(attached my cat's photo.png") {
		t.Errorf("a dropped path:\n%s", out)
	}
	out = c.doPrompt("/image\r", "[2 images: gradient_64x48.png, my cat's photo.png] >>>")
	if !strings.Contains(out, "1. gradient_64x48.png (PNG") || !strings.Contains(out, "2. my cat's photo.png (PNG") {
		t.Errorf("/image list:\n%s", out)
	}
	if out := c.doPrompt("/image clear\r", ">>>"); !strings.Contains(out, "(the 2 attached images dropped)") {
		t.Errorf("/image clear:\n%s", out)
	}
	// A path pasted as a file:// URL (bracketed paste).
	fileURL := (&url.URL{Scheme: "file", Path: filepath.Join(files, "cat.png")}).String()
	c.doPrompt("\x1b[200~"+fileURL+"\x1b[201~\r", "[1 image: cat.png] >>>")
	// The turn's prompt holds the image; the prompt has no label after it.
	ref := chatReference(t, m, llm.Bool(false), 3, llm.Message{Role: "user", Content: "What is this?", Images: []llm.Image{{Data: png}}})
	out = c.doPrompt("What is this?\r", ">>>")
	if want := fmt.Sprintf("prompt: %d tokens", ref.promptTokens); !strings.Contains(out, want) {
		t.Errorf("the turn with the image: no %q:\n%s", want, out)
	}
	// A file that is not an image: a note, nothing attached.
	if out := c.doPrompt("/image "+filepath.Join(files, "notes.txt")+"\r", ">>>"); !strings.Contains(out, "is not an image") {
		t.Errorf("/image notes.txt:\n%s", out)
	}
	if out := c.doPrompt("/image\r", ">>>"); !strings.Contains(out, "(no image attached: /image PATH attaches one; the conversation holds 1)") {
		t.Errorf("/image after the turn:\n%s", out)
	}
	c.doPrompt("/image "+gradient+"\r", "[1 image: gradient_64x48.png] >>>")
	if out := c.doPrompt("/clear\r", ">>>"); !strings.Contains(out, "(conversation cleared)") {
		t.Errorf("/clear:\n%s", out)
	}
	if out := c.doPrompt("/image\r", ">>>"); !strings.Contains(out, "(no image attached: /image PATH attaches one)") {
		t.Errorf("/image after /clear:\n%s", out)
	}
	if out := c.doPrompt("/help\r", ">>>"); !strings.Contains(out, "/image PATH") || !strings.Contains(out, "/image clear") {
		t.Errorf("/help:\n%s", out)
	}
	c.send("/bye\r")
	if code := c.waitExit(); code != 0 {
		t.Errorf("/bye: exit %d", code)
	}

	// A model without a vision tower says so at once.
	c = startChat(t, "--model", servableCheckpoint(t))
	c.waitFor("the first prompt", func(s string) bool { return len(promptLines(screenLines(s))) == 1 })
	for _, keys := range []string{"/image " + gradient + "\r", gradient + "\r"} {
		if out := c.doPrompt(keys, ">>>"); !strings.Contains(out, "error: this model does not take images: its checkpoint has no vision tower") {
			t.Errorf("no tower, %q:\n%s", keys, out)
		}
	}
	c.send("/bye\r")
	if code := c.waitExit(); code != 0 {
		t.Errorf("/bye: exit %d", code)
	}
}
