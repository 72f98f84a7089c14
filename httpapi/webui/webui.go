// Package webui is govinfer serve's chat page: one HTML page, its script and
// style, and the libraries it uses (marked, DOMPurify, highlight.js, KaTeX
// with its fonts; see vendor/VERSIONS.md), embedded in the binary, so that
// the page needs no build step and no network at run time.
//
// The server answers GET / with Index (to browsers, which accept text/html)
// and every other file under Prefix with Lookup. Every response carries CSP,
// which lets the page load scripts, styles and fonts from the server only,
// run no inline script or style, show images from the server and from data:
// and blob: URLs only (the page's attachments), and talk to the server's own
// OpenAI endpoints only.
package webui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"
)

// Prefix is the path under which the page's files are served.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of the page and its files: everything
// from the server itself, nothing inline, no plugins, no frames, no forms
// posted anywhere; images also from data: and blob: URLs, which the page
// makes of the images attached to a message. The page's own code sets styles through the CSSOM only
// (KaTeX renders into the DOM, not through innerHTML), which CSP allows.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'"

//go:embed index.html app.js app.css vendor
var files embed.FS

// File is one embedded file, ready to serve.
type File struct {
	Body        []byte
	ContentType string
	// ETag is a strong validator of Body (quoted).
	ETag string
}

var byPath = load()

func load() map[string]File {
	m := map[string]File{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[p] = File{Body: b, ContentType: contentType(p), ETag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("webui: reading the embedded files: " + err.Error())
	}
	return m
}

// contentType is the media type of an embedded file, by its extension.
func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".woff2":
		return "font/woff2"
	case ".svg":
		return "image/svg+xml"
	case ".json":
		return "application/json"
	default: // LICENSE, VERSIONS.md
		return "text/plain; charset=utf-8"
	}
}

// Index returns the page itself, served at /.
func Index() File { return byPath["index.html"] }

// Lookup returns the file served at urlPath (which starts with Prefix), and
// false when there is none. The page itself is served at / only.
func Lookup(urlPath string) (File, bool) {
	name, ok := strings.CutPrefix(urlPath, Prefix)
	if !ok || name == "index.html" {
		return File{}, false
	}
	f, ok := byPath[name]
	return f, ok
}

// Size returns the bytes the page adds to the binary: the sum of the
// embedded files' sizes.
func Size() int {
	n := 0
	for _, f := range byPath {
		n += len(f.Body)
	}
	return n
}
