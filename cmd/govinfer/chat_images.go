package main

import (
	"errors"
	"fmt"
	goio "io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/llm"
)

// chatImage is an image file attached to a chat message, read and checked
// when it was attached.
type chatImage struct {
	path string // as given
	name string // the file's base name, as the prompt shows it
	data []byte
	// format, width and height are what decoding found.
	format        imageproc.Format
	width, height int
}

// imageExtensions are the file name endings taken as images when a line
// is only a file's path: such a file is attached (or refused with a note
// when it is not a supported image) rather than sent as text.
var imageExtensions = map[string]bool{
	".png": true, ".jpg": true, ".jpeg": true, ".jpe": true, ".jfif": true, ".gif": true, ".webp": true,
	".bmp": true, ".tif": true, ".tiff": true, ".heic": true, ".heif": true, ".avif": true, ".svg": true, ".ico": true,
}

// readChatImage reads the image file path and checks that it is a PNG,
// JPEG, WebP or GIF file (by its first bytes) that decodes. Its errors are
// one line, naming the file.
func readChatImage(path string) (chatImage, error) {
	img := chatImage{path: path, name: filepath.Base(path)}
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return img, fmt.Errorf("cannot read %s: %v", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return img, fmt.Errorf("%s is a directory, not an image file", path)
	}
	// The signature first: a large file that is no image is not read whole.
	head := make([]byte, 16)
	n, err := goio.ReadFull(f, head)
	if err != nil && !errors.Is(err, goio.ErrUnexpectedEOF) && !errors.Is(err, goio.EOF) {
		return img, fmt.Errorf("cannot read %s: %v", path, err)
	}
	if img.format = imageproc.SniffFormat(head[:n]); img.format == "" {
		return img, fmt.Errorf("%s is not an image: its contents are not PNG, JPEG, WebP or GIF", path)
	}
	rest, err := goio.ReadAll(f)
	if err != nil {
		return img, fmt.Errorf("cannot read %s: %v", path, err)
	}
	img.data = append(head[:n:n], rest...)
	rgb, err := imageproc.Decode(img.data)
	if err != nil {
		return img, fmt.Errorf("%s: not a readable %s image: %v", path, strings.ToUpper(string(img.format)), err)
	}
	img.width, img.height = rgb.Width, rgb.Height
	return img, nil
}

// describe is a line about the image for /image.
func (img chatImage) describe() string {
	return fmt.Sprintf("%s (%s, %dx%d, %s)", img.name, strings.ToUpper(string(img.format)), img.width, img.height, byteSize(len(img.data)))
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// llmImages returns the images' bytes as a message carries them.
func llmImages(imgs []chatImage) []llm.Image {
	if len(imgs) == 0 {
		return nil
	}
	out := make([]llm.Image, len(imgs))
	for i, img := range imgs {
		out[i] = llm.Image{Data: img.data}
	}
	return out
}

// imageLabel is what the prompt shows of the attached images, e.g.
// "[1 image: cat.png]" ("" for none).
func imageLabel(imgs []chatImage) string {
	if len(imgs) == 0 {
		return ""
	}
	var names []string
	for i, img := range imgs {
		if i == 3 {
			names = append(names, "...")
			break
		}
		names = append(names, img.name)
	}
	noun := "images"
	if len(imgs) == 1 {
		noun = "image"
	}
	return fmt.Sprintf("[%d %s: %s]", len(imgs), noun, strings.Join(names, ", "))
}

// imagePathLine reports whether line is nothing but the paths of existing
// image files, as a terminal pastes files dropped on it, and returns them.
// A path may be quoted with ' or ", have its spaces and other characters
// escaped with backslashes, be a file:// URL, or start with ~/; several
// are separated by spaces. A file counts as an image when its first bytes
// are a PNG, JPEG, WebP or GIF signature, or its name ends as an image
// file's does (.png, .jpg, .heic, ...: attaching such a file that is not a
// supported image gives a note rather than sending its path as text).
// Anything else (a file that is not an image, a missing one, words) is
// text.
func imagePathLine(line string) ([]string, bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.ContainsAny(line, "\n\r") {
		return nil, false
	}
	// The line as it is first: a file name may hold quotes or backslashes.
	if p, ok := imageFile(line); ok {
		return []string{p}, true
	}
	words, ok := shellWords(line)
	if !ok || len(words) == 0 {
		return nil, false
	}
	var paths []string
	for _, w := range words {
		p, ok := imageFile(w)
		if !ok {
			return nil, false
		}
		paths = append(paths, p)
	}
	return paths, true
}

// imageFile resolves a pasted path (a file:// URL, ~/ for the home
// directory) and reports whether it names an existing regular file that
// is an image by its first bytes or its name.
func imageFile(p string) (string, bool) {
	p = resolvePath(p)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	if imageExtensions[strings.ToLower(filepath.Ext(p))] {
		return p, true
	}
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	head := make([]byte, 16)
	n, _ := goio.ReadFull(f, head)
	return p, imageproc.SniffFormat(head[:n]) != ""
}

// resolvePath turns a file:// URL into its path and a leading ~/ into
// the home directory; other paths are returned as they are.
func resolvePath(p string) string {
	if rest, ok := cutPrefixFold(p, "file://"); ok {
		u, err := url.Parse("file://" + rest)
		if err == nil && (u.Host == "" || u.Host == "localhost") && u.Path != "" {
			return u.Path
		}
	} else if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// shellWords splits s into words as a POSIX shell does for quotes and
// backslashes (no expansions): '...' is literal, "..." keeps a backslash
// except before $, `, " and \, and a backslash outside quotes escapes the
// next character. It fails on an unclosed quote or a trailing backslash.
func shellWords(s string) ([]string, bool) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, false
			}
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, false
			}
			w.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, false
			}
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, true
}

// errNoVision says that the model takes no images.
var errNoVision = errors.New("this model does not take images: its checkpoint has no vision tower")

// imageCount is the number of images in the conversation and attached to
// the next message.
func (s *chatSession) imageCount() int {
	n := len(s.pending)
	for _, m := range s.history {
		n += len(m.Images)
	}
	return n
}

// attach reads the image file path and attaches it to the next message.
func (s *chatSession) attach(path string) (chatImage, error) {
	if !s.m.HasVision() {
		return chatImage{}, errNoVision
	}
	if most := s.m.MaxImages(); s.imageCount() >= most {
		return chatImage{}, fmt.Errorf("the model takes at most %d images in a conversation (one request): /clear starts a new one", most)
	}
	img, err := readChatImage(path)
	if err != nil {
		return img, err
	}
	s.pending = append(s.pending, img)
	return img, nil
}
