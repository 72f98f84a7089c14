package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

// vlImages is the folder of vl-tiny's test images.
var vlImages = filepath.Join("..", "..", "testdata", "models", "vl-tiny", "images")

// vlCheckpoint writes a checkpoint with a vision tower (vl-tiny's weights
// with a tokenizer of its ids) and returns its directory.
func vlCheckpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testckpt.WriteVL(dir, filepath.Join("..", "..", "testdata")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// imageFiles writes files for the path tests into a new directory: images
// with and without spaces in their names, an image without an extension,
// a text file, and a text file named as a PNG.
func imageFiles(t *testing.T) (dir string, png []byte) {
	t.Helper()
	dir = t.TempDir()
	png = readFile(t, filepath.Join(vlImages, "gradient_64x48.png"))
	writeFile(t, filepath.Join(dir, "cat.png"), png)
	writeFile(t, filepath.Join(dir, "my cat's photo.png"), png)
	writeFile(t, filepath.Join(dir, "noext"), png)
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("just some text\n"))
	writeFile(t, filepath.Join(dir, "fake.png"), []byte("not a png at all\n"))
	writeFile(t, filepath.Join(dir, "truncated.png"), png[:60])
	if err := os.Mkdir(filepath.Join(dir, "folder.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, png
}

func TestImagePathLine(t *testing.T) {
	dir, _ := imageFiles(t)
	cat := filepath.Join(dir, "cat.png")
	spaced := filepath.Join(dir, "my cat's photo.png")
	escaped := strings.NewReplacer(" ", `\ `, "'", `\'`).Replace(spaced)
	fileURL := (&url.URL{Scheme: "file", Path: spaced}).String()
	cases := []struct {
		name, line string
		want       []string // nil: the line is text
	}{
		{"plain path", cat, []string{cat}},
		{"trailing space (macOS drop)", cat + " ", []string{cat}},
		{"single quotes", "'" + cat + "'", []string{cat}},
		{"double quotes", `"` + spaced + `"`, []string{spaced}},
		{"spaces, as it is", spaced, []string{spaced}},
		{"escaped spaces", escaped + " ", []string{spaced}},
		{"GNOME quoting", "'" + strings.ReplaceAll(spaced, "'", `'\''`) + "' ", []string{spaced}},
		{"file URL", fileURL, []string{spaced}},
		{"file URL with localhost", "file://localhost" + (&url.URL{Path: cat}).EscapedPath(), []string{cat}},
		{"two files", "'" + cat + "' " + escaped, []string{cat, spaced}},
		{"image without an extension", filepath.Join(dir, "noext"), []string{filepath.Join(dir, "noext")}},
		{"image name, not an image", filepath.Join(dir, "fake.png"), []string{filepath.Join(dir, "fake.png")}},
		{"a text file", filepath.Join(dir, "notes.txt"), nil},
		{"a missing file", filepath.Join(dir, "missing.png"), nil},
		{"a folder", filepath.Join(dir, "folder.png"), nil},
		{"an image and a missing file", cat + " " + filepath.Join(dir, "missing.png"), nil},
		{"words around a path", "describe " + cat, nil},
		{"unclosed quote", "'" + cat, nil},
		{"empty", "  ", nil},
		{"two lines", cat + "\n" + cat, nil},
		{"a command", "/image", nil},
		{"text", "What is in the picture?", nil},
	}
	for _, c := range cases {
		got, ok := imagePathLine(c.line)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("%s: imagePathLine(%q) = %q, %v; want %q", c.name, c.line, got, ok, c.want)
		}
	}
	// ~/ is the home directory.
	t.Setenv("HOME", dir)
	if got, ok := imagePathLine("~/cat.png"); !ok || !slices.Equal(got, []string{cat}) {
		t.Errorf("~/cat.png: %q, %v", got, ok)
	}
}

func TestShellWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`a b`, []string{"a", "b"}},
		{`a\ b  c`, []string{"a b", "c"}},
		{`'a b'"c d"e`, []string{"a bc de"}},
		{`"a\"b\\c\d"`, []string{`a"b\c\d`}},
		{`'it'\''s'`, []string{"it's"}},
		{`''`, []string{""}},
	} {
		if got, ok := shellWords(c.in); !ok || !slices.Equal(got, c.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, bad := range []string{`'a`, `"a`, `a\`} {
		if got, ok := shellWords(bad); ok {
			t.Errorf("shellWords(%q) = %q, want a failure", bad, got)
		}
	}
}

func TestReadChatImage(t *testing.T) {
	dir, png := imageFiles(t)
	img, err := readChatImage(filepath.Join(dir, "cat.png"))
	if err != nil || !bytes.Equal(img.data, png) || img.name != "cat.png" || img.format != "png" || img.width != 64 || img.height != 48 {
		t.Errorf("cat.png: %v, %+v", err, img)
	}
	if got := img.describe(); got != "cat.png (PNG, 64x48, 343 bytes)" {
		t.Errorf("describe: %q", got)
	}
	for _, c := range []struct{ file, want string }{
		{"missing.png", "cannot read " + filepath.Join(dir, "missing.png") + ": no such file or directory"},
		{"notes.txt", filepath.Join(dir, "notes.txt") + " is not an image: its contents are not PNG, JPEG, WebP or GIF"},
		{"fake.png", filepath.Join(dir, "fake.png") + " is not an image"},
		{"truncated.png", filepath.Join(dir, "truncated.png") + ": not a readable PNG image"},
		{"folder.png", filepath.Join(dir, "folder.png") + " is a directory"},
	} {
		_, err := readChatImage(filepath.Join(dir, c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want %q", c.file, err, c.want)
		}
	}
}

func TestImageLabel(t *testing.T) {
	imgs := []chatImage{{name: "a.png"}, {name: "b.jpg"}, {name: "c.gif"}, {name: "d.webp"}}
	for n, want := range []string{"", "[1 image: a.png]", "[2 images: a.png, b.jpg]", "[3 images: a.png, b.jpg, c.gif]", "[4 images: a.png, b.jpg, c.gif, ...]"} {
		if got := imageLabel(imgs[:n]); got != want {
			t.Errorf("%d images: %q, want %q", n, got, want)
		}
	}
}

// TestChatSessionImages drives the session layer on a model with a vision
// tower: an attached image goes with the next message (the model's prompt
// holds its tokens), stays in the conversation for later turns, and the
// limits and bad files are refused when attached.
func TestChatSessionImages(t *testing.T) {
	m, err := llm.Open(vlCheckpoint(t), llm.Options{MaxImages: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.HasVision() {
		t.Fatal("the VL checkpoint has no vision tower")
	}
	off := llm.Bool(false)
	o := &chatOptions{think: off, params: llm.Params{Temperature: llm.F64(0), MaxTokens: 3}}
	s := &chatSession{m: m, opts: o}
	file := filepath.Join(vlImages, "gradient_64x48.png")
	png := readFile(t, file)
	img, err := s.attach(file)
	if err != nil || len(s.pending) != 1 || img.name != "gradient_64x48.png" {
		t.Fatalf("attach: %v, %d pending", err, len(s.pending))
	}
	// A bad file is refused and leaves the attached one.
	if _, err := s.attach(filepath.Join(vlImages, "nope.png")); err == nil || len(s.pending) != 1 {
		t.Errorf("a missing file: %v, %d pending", err, len(s.pending))
	}
	withImage := llm.Message{Role: "user", Content: "What is this?", Images: []llm.Image{{Data: png}}}
	if got := s.userMessage("What is this?"); got.Content != withImage.Content || len(got.Images) != 1 || !bytes.Equal(got.Images[0].Data, png) {
		t.Errorf("user message %+v", got)
	}
	ref := chatReference(t, m, off, 3, withImage)
	textOnly := chatReference(t, m, off, 3, user("What is this?"))
	if ref.promptTokens <= textOnly.promptTokens+1 {
		t.Fatalf("the image adds no tokens (%d with, %d without): the test would prove nothing", ref.promptTokens, textOnly.promptTokens)
	}
	var out bytes.Buffer
	r := s.ask(context.Background(), "What is this?", &answerWriter{out: &out})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := fmt.Sprintf("prompt: %d tokens", ref.promptTokens); !strings.HasPrefix(r.stats, want) {
		t.Errorf("stats %q, want %q (the image's tokens)", r.stats, want)
	}
	if r.content != ref.content || len(s.pending) != 0 || len(s.history) != 2 || len(s.history[0].Images) != 1 || !bytes.Equal(s.history[0].Images[0].Data, png) {
		t.Errorf("after the turn: content %q (want %q), %d pending, history %+v", r.content, ref.content, len(s.pending), s.history)
	}
	// The next turn's prompt holds the image again.
	ref2 := chatReference(t, m, off, 3, withImage, llm.Message{Role: "assistant", Content: ref.content}, user("And?"))
	if r := s.ask(context.Background(), "And?", &answerWriter{out: &out}); r.err != nil || !strings.HasPrefix(r.stats, fmt.Sprintf("prompt: %d tokens", ref2.promptTokens)) {
		t.Errorf("second turn: %v, stats %q, want %d prompt tokens", r.err, r.stats, ref2.promptTokens)
	}
	// MaxImages 2: one more fits, a third does not.
	if _, err := s.attach(file); err != nil {
		t.Fatal(err)
	}
	if _, err := s.attach(file); err == nil || !strings.Contains(err.Error(), "at most 2 images") {
		t.Errorf("a third image: %v", err)
	}
	if s.imageCount() != 2 {
		t.Errorf("imageCount %d, want 2", s.imageCount())
	}
	// A model without a tower refuses at once.
	_, tm := chatModel(t)
	ts := &chatSession{m: tm, opts: &chatOptions{}}
	if _, err := ts.attach(file); err == nil || !strings.Contains(err.Error(), "no vision tower") || len(ts.pending) != 0 {
		t.Errorf("no tower: %v", err)
	}
}

// TestChatOneShotImage runs chat --image: the answer is the in-process
// model's for the message with the image, and --verbose's prompt token
// count holds the image's tokens; with the question on standard input too.
func TestChatOneShotImage(t *testing.T) {
	dir := vlCheckpoint(t)
	m, err := llm.Open(dir, llm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	file := filepath.Join(vlImages, "stripes_90x60.png")
	off := llm.Bool(false)
	ref := chatReference(t, m, off, 4, llm.Message{Role: "user", Content: "What is this?", Images: []llm.Image{{Data: readFile(t, file)}}})
	textOnly := chatReference(t, m, off, 4, user("What is this?"))
	if ref.promptTokens <= textOnly.promptTokens+1 {
		t.Fatalf("the image adds no tokens: the test would prove nothing")
	}
	wantOut := strings.TrimLeft(ref.content, "\n")
	if wantOut != "" {
		wantOut += "\n"
	}
	flags := []string{"chat", "--model", dir, "--think", "off", "--temperature", "0", "--max-tokens", "4", "--verbose", "--image", file}
	for name, c := range map[string]struct{ stdin, question string }{
		"argument": {"", "What is this?"},
		"stdin":    {"What is this?\n", ""},
	} {
		args := flags
		if c.question != "" {
			args = append(slices.Clone(flags), c.question)
		}
		code, out, errOut := run(t, c.stdin, args...)
		if code != exitOK || out != wantOut {
			t.Errorf("%s: exit %d, stdout %q, want %q; stderr %s", name, code, out, wantOut, errOut)
		}
		if want := fmt.Sprintf("prompt: %d tokens", ref.promptTokens); !strings.Contains(errOut, want) {
			t.Errorf("%s: stderr lacks %q (the image's tokens; %d without it):\n%s", name, want, textOnly.promptTokens, errOut)
		}
	}
}

func TestChatImageErrors(t *testing.T) {
	files, _ := imageFiles(t)
	img := filepath.Join(vlImages, "gradient_64x48.png")
	text := servableCheckpoint(t) // no vision_config: no tower
	vl := vlCheckpoint(t)
	many := []string{"--model", vl}
	for range 9 {
		many = append(many, "--image", img)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tower", []string{"--model", text, "--image", img, "hi"}, exitError, "--image: the model at " + text + " has no vision tower: it does not take images"},
		{"missing image", []string{"--model", vl, "--image", filepath.Join(files, "missing.png"), "hi"}, exitUsage, "--image: cannot read"},
		{"not an image", []string{"--model", vl, "--image", filepath.Join(files, "notes.txt"), "hi"}, exitUsage, "is not an image"},
		{"empty name", []string{"--model", vl, "--image", "", "hi"}, exitUsage, "empty file name"},
		{"too many", append(many, "hi"), exitUsage, "9 images; the model takes at most 8"},
	} {
		code, out, errOut := run(t, "", append([]string{"chat"}, c.args...)...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", c.name, code, out, errOut, c.code, c.want)
		}
		if strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: want a one-line error, got %q", c.name, errOut)
		}
	}
	if code, out, _ := run(t, "", "chat", "--help"); code != exitOK || !strings.Contains(out, "-image FILE") || !strings.Contains(out, "/image PATH") {
		t.Errorf("--help does not tell of images: exit %d\n%s", code, out)
	}
}
