package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/httpapi/webui"
)

// request sends a GET or HEAD with an Accept header and returns the response
// and its body.
func request(t *testing.T, s *Server, method, path, accept string, h ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"

// TestWebUIRoutes checks what / and /ui/ answer with the chat page on: the
// page to browsers, JSON to other clients, the page's files with their
// types, the CSP and validators, and no key needed for any of them.
func TestWebUIRoutes(t *testing.T) {
	s := startServer(t, Config{APIKey: "secret"})

	resp, page := request(t, s, "GET", "/", browserAccept)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || resp.Header.Get("Content-Security-Policy") != webui.CSP {
		t.Fatalf("GET / as a browser: %d %q CSP %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
	}
	if !strings.Contains(resp.Header.Get("Vary"), "Accept") {
		t.Errorf("GET /: Vary %q, want Accept", resp.Header.Get("Vary"))
	}
	html := string(page)
	for _, bad := range []string{" style=", "<style", "javascript:", "http://", "https://"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page holds %q: nothing inline and nothing from elsewhere", bad)
		}
	}
	if m := regexp.MustCompile(`\son[a-z]+=`).FindString(html); m != "" {
		t.Errorf("the page holds an inline handler %q", m)
	}
	// Every script is a file of the server's, and every reference resolves.
	for _, m := range regexp.MustCompile(`<script([^>]*)>([^<]*)</script>`).FindAllStringSubmatch(html, -1) {
		if strings.TrimSpace(m[2]) != "" || !strings.Contains(m[1], `src="/ui/`) {
			t.Errorf("inline or foreign script: %s", m[0])
		}
	}
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(html, -1)
	if len(refs) < 8 {
		t.Fatalf("the page references %d files of /ui/", len(refs))
	}
	for _, r := range refs {
		if resp, _ := request(t, s, "GET", r[1], ""); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", r[1], resp.StatusCode)
		}
	}

	for _, c := range []struct{ path, ctype string }{
		{"/ui/app.js", "text/javascript; charset=utf-8"},
		{"/ui/app.css", "text/css; charset=utf-8"},
		{"/ui/vendor/katex/fonts/KaTeX_Main-Regular.woff2", "font/woff2"},
		{"/ui/vendor/VERSIONS.md", "text/plain; charset=utf-8"},
		{"/ui/vendor/dompurify/LICENSE", "text/plain; charset=utf-8"},
	} {
		resp, body := request(t, s, "GET", c.path, "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || len(body) == 0 ||
			resp.Header.Get("Content-Security-Policy") != webui.CSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %q (%d bytes) CSP %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), resp.Header.Get("Content-Security-Policy"))
		}
		etag := resp.Header.Get("ETag")
		if resp, body := request(t, s, "GET", c.path, "", "If-None-Match", etag); etag == "" || resp.StatusCode != 304 || len(body) != 0 {
			t.Errorf("GET %s with If-None-Match %s: %d, %d bytes; want 304", c.path, etag, resp.StatusCode, len(body))
		}
	}
	// KaTeX's style sheet names only fonts that are there.
	_, css := request(t, s, "GET", "/ui/vendor/katex/katex.min.css", "")
	fonts := regexp.MustCompile(`url\((fonts/[^)]+)\)`).FindAllStringSubmatch(string(css), -1)
	if len(fonts) == 0 {
		t.Error("katex.min.css names no fonts")
	}
	for _, f := range fonts {
		if resp, _ := request(t, s, "HEAD", "/ui/vendor/katex/"+f[1], ""); resp.StatusCode != 200 {
			t.Errorf("katex.min.css names %s: %d", f[1], resp.StatusCode)
		}
	}

	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/ui/", 404}, {"GET", "/ui/index.html", 404}, {"GET", "/ui/nothing.js", 404},
		{"GET", "/ui/../go.mod", 404}, {"POST", "/ui/app.js", 405}, {"HEAD", "/ui/app.js", 200},
	} {
		if resp, _ := request(t, s, c.method, c.path, ""); resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}

	// Programs get the JSON description, HEAD / (Claude Code's probe) a 200,
	// and the API keeps its key.
	for _, accept := range []string{"", "application/json", "*/*", "application/json, text/html"} {
		resp, body := request(t, s, "GET", "/", accept)
		var root struct{ Server string }
		if err := json.Unmarshal(body, &root); resp.StatusCode != 200 || err != nil || root.Server != "govinfer" {
			t.Errorf("GET / with Accept %q: %d %.80s", accept, resp.StatusCode, body)
		}
	}
	for _, accept := range []string{"", browserAccept} {
		if resp, _ := request(t, s, "HEAD", "/", accept); resp.StatusCode != 200 {
			t.Errorf("HEAD / with Accept %q: %d", accept, resp.StatusCode)
		}
	}
	if resp, _ := request(t, s, "GET", "/v1/models", ""); resp.StatusCode != 401 {
		t.Errorf("GET /v1/models without the key: %d, want 401", resp.StatusCode)
	}
}

// TestNoWebUI: with the page off, / and its files are not found, whatever
// the client accepts; the API is unchanged.
func TestNoWebUI(t *testing.T) {
	s := startServer(t, Config{NoWebUI: true})
	for _, c := range []struct{ method, path, accept string }{
		{"GET", "/", browserAccept}, {"GET", "/", ""}, {"GET", "/", "application/json"}, {"HEAD", "/", ""},
		{"HEAD", "/", browserAccept}, {"GET", "/ui/app.js", ""}, {"HEAD", "/ui/app.css", ""},
		{"GET", "/ui/vendor/katex/fonts/KaTeX_Main-Regular.woff2", ""},
	} {
		if resp, _ := request(t, s, c.method, c.path, c.accept); resp.StatusCode != 404 {
			t.Errorf("%s %s (Accept %q) with NoWebUI: %d, want 404", c.method, c.path, c.accept, resp.StatusCode)
		}
	}
	if status, _ := get(t, s, "/v1/models"); status != 200 {
		t.Errorf("GET /v1/models with NoWebUI: %d", status)
	}
}

func TestWantsHTML(t *testing.T) {
	for accept, want := range map[string]bool{
		"": false, "*/*": false, "application/json": false, "text/html": true, browserAccept: true,
		"application/json, text/html": false, "TEXT/HTML; q=0.9": true, "application/xhtml+xml": true,
	} {
		if got := wantsHTML([]byte(accept)); got != want {
			t.Errorf("wantsHTML(%q) = %v, want %v", accept, got, want)
		}
	}
}
