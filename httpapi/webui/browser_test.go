package webui_test

// The chat page in a real browser: Debian's chromium, driven over the
// DevTools protocol by github.com/chromedp/chromedp, against a server on a
// random checkpoint. It fails in CI (CI=true, where .ci/run installs
// chromium) and skips elsewhere only when no chromium is installed.
//
// GOVINFER_WEBUI_SHOTS=DIR writes screenshots (light, dark, phone) there.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/randmodel"
)

// chromium returns the browser's path, or skips the test where none is
// installed outside CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: CI must run the browser test (.ci/run installs Debian's chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium); CI runs this test")
	return ""
}

// syncBuffer is the server's log, written by its goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func serve(t *testing.T, dir string, maxLen int, log *syncBuffer) *httpapi.Server {
	t.Helper()
	s, err := httpapi.StartLoading(context.Background(), dir, llm.Options{MaxModelLen: maxLen},
		httpapi.Config{Addr: "127.0.0.1:0", ServedModelName: "test-model", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// browser starts a headless chromium (without its sandbox, which Chromium
// refuses to run as root, as CI runs) and returns the context of its tab;
// exceptions and CSP violations in the page fail the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	var mu sync.Mutex
	var problems []string
	done := make(chan struct{})
	messages := chromedp.Console(ctx) // starts the browser
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// DOMPurify parses the HTML it cleans in an inert document,
			// where Chromium reports the handlers and styles that the CSP
			// would block (and DOMPurify removes); anything else the CSP
			// blocks is the page's own fault.
			csp := strings.Contains(m.Text, "Content Security Policy") && !strings.HasSuffix(m.URL, "/purify.min.js")
			if m.Type == chromedp.ConsoleException || csp {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
		<-done
		for _, p := range problems {
			t.Errorf("the page: %s", p)
		}
	})
	return ctx
}

func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval runs a JavaScript expression in the page, with helpers.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return run(t, ctx, js, chromedp.Evaluate[T]("(() => {"+helpers+"return ("+js+");})()", chromedp.EvalAwaitPromise))
}

// wait polls a JavaScript predicate, with helpers, until it holds.
func wait(t *testing.T, ctx context.Context, what, js string, timeout time.Duration) {
	t.Helper()
	run(t, ctx, "waiting for "+what, chromedp.PollFunction[chromedp.Void]("() => {"+helpers+"return ("+js+");}",
		chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
}

// page helpers, prepended to the expressions that use them.
const helpers = `
const q = (s) => document.querySelector(s);
const qa = (s) => [...document.querySelectorAll(s)];
const setField = (id, v) => { const e = document.getElementById(id); if (e.type === 'checkbox') e.checked = v; else e.value = v;
  e.dispatchEvent(new Event('input', { bubbles: true })); };
const lastAnswer = () => qa('#messages .msg.assistant').pop();
`

func send(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	js, _ := json.Marshal(text)
	eval[bool](t, ctx, fmt.Sprintf(`(q('#input').value = %s), q('#send').click(), true`, js))
}

// payload holds what model output must never get to run, next to code,
// a table and math that must render.
const payload = "Some code:\n\n```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\n\n" +
	"<script>window.__pwned = 'script'</script>\n\n" +
	"<img src=x onerror=\"window.__pwned = 'img'\">\n\n" +
	"[a link](javascript:window.__pwned='link') and <a href=\"javascript:window.__pwned='a'\">another</a>\n\n" +
	"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"window.__pwned='svg'\"><script>window.__pwned='svgscript'</script></svg>\n\n" +
	"<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>\n\n" +
	"<div style=\"position:fixed;inset:0\" onclick=\"window.__pwned='div'\">overlay</div>\n\n" +
	"| a | b |\n| --- | --- |\n| 1 | 2 |\n\nEuler: $e^{i\\pi} + 1 = 0$\n\n$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n"

// noPwn checks that nothing of payload ran or is left in the page.
const noPwn = `(() => {
  const bad = [];
  if (typeof window.__pwned !== 'undefined') bad.push('ran: ' + window.__pwned);
  if (qa('#messages script, #messages svg, #messages iframe, #messages object, #messages embed').length) bad.push('dangerous elements');
  for (const e of qa('#messages *')) for (const a of e.attributes) {
    if (a.name.startsWith('on')) bad.push('handler ' + a.name + ' on ' + e.tagName);
    if (a.name === 'style' && !e.closest('.katex')) bad.push('style attribute on ' + e.tagName + ' ');
    if (/^\s*javascript:/i.test(a.value)) bad.push(a.name + '=' + a.value);
  }
  return bad.join('; ');
})()`

func TestBrowser(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	if err := testckpt.Write(dir, "../../testdata"); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	s := serve(t, dir, 8192, &log)
	url := "http://" + s.Addr() + "/"

	// The page loads and shows the model from /v1/models.
	run(t, ctx, "loading the page", chromedp.Navigate(url))
	wait(t, ctx, "the model's name", `q('#model-info').textContent.includes('test-model') && q('#model-info').textContent.includes('8192')`, 10*time.Second)
	// The random checkpoint has no vision tower: /v1/models lists no
	// "image", so the page offers no attach button, and an image pasted or
	// dropped is refused with a message.
	if offered := eval[bool](t, ctx, `!q('#attach-btn').hidden || !q('#attach-file').disabled`); offered {
		t.Error("the page offers image attachments, which the model does not list")
	}
	eval[bool](t, ctx, `(() => { const dt = new DataTransfer(); dt.items.add(new File(['x'], 'x.png', { type: 'image/png' }));
		q('#input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true })); return true; })()`)
	if !eval[bool](t, ctx, `!q('#notice').hidden && q('#notice').textContent.includes('takes no images') && q('#attachments').hidden`) {
		t.Error("an image pasted for a model without images was not refused with a message")
	}

	// Settings per conversation, then a short answer, streamed.
	run(t, ctx, "opening the settings", chromedp.Click(chromedp.ID("settings-btn")))
	eval[bool](t, ctx, `setField('set-thinking', false), setField('set-max_tokens', '16'), setField('set-temperature', '0'), setField('set-seed', '7'), true`)
	run(t, ctx, "typing", chromedp.SendKeys(chromedp.ID("input"), "Hello there"))
	run(t, ctx, "sending", chromedp.Click(chromedp.ID("send")))
	wait(t, ctx, "the first answer", `(() => { const a = lastAnswer(); return a && a.querySelector('.stats') && a.querySelector('.content').textContent.length > 0 && q('#stop').hidden; })()`, 20*time.Second)
	stats := eval[string](t, ctx, `lastAnswer().querySelector('.stats').textContent`)
	if !strings.Contains(stats, "answer tokens") || !strings.Contains(stats, "prompt tokens") || !strings.Contains(stats, "tok/s") {
		t.Errorf("the answer's stats: %q", stats)
	}
	t.Logf("first answer: %s", stats)
	// The finish reason shows in words: the answer stopped at max_tokens
	// or ended by itself.
	finish := eval[string](t, ctx, `govinfer.state.current.messages[1].stats.finish`)
	if want := map[string]string{"length": "stopped: reached the token limit", "stop": "finished"}[finish]; want == "" || !strings.Contains(stats, want) || strings.HasSuffix(stats, finish) {
		t.Errorf("finish reason %q shows as %q", finish, stats)
	}

	// A long answer streams in and the stop button cancels it on the server.
	eval[bool](t, ctx, `setField('set-max_tokens', '8000'), setField('set-temperature', '1'), true`)
	send(t, ctx, "Tell me a long story")
	wait(t, ctx, "the long answer streaming", `!q('#stop').hidden && lastAnswer().querySelector('.content').textContent.length > 40`, 20*time.Second)
	if running, _, _ := s.InFlight(); running != 1 {
		t.Errorf("%d sequences running while the answer streams, want 1", running)
	}
	run(t, ctx, "stopping", chromedp.Click(chromedp.ID("stop")))
	wait(t, ctx, "the stop to show", `q('#stop').hidden && lastAnswer().querySelector('.stats') && lastAnswer().querySelector('.stats').textContent.includes('stopped by you')`, 5*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, waiting, requests := s.InFlight()
		if strings.Contains(log.String(), "status=499") && running == 0 && waiting == 0 && requests == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not cancel the stopped request: %d running, %d waiting, %d open; log:\n%s", running, waiting, requests, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The conversation survives a reload, with its settings.
	run(t, ctx, "reloading", chromedp.Reload())
	wait(t, ctx, "the conversation after a reload", `qa('#conv-list li').length === 1 && q('#conv-list li').textContent === 'Hello there' &&
		qa('#messages .msg').length === 4 && q('#messages .msg.user').textContent.includes('Hello there') && q('#set-max_tokens').value === '8000' && !q('#set-thinking').checked`, 10*time.Second)

	// Markup a user types is shown as text.
	eval[bool](t, ctx, `setField('set-max_tokens', '2'), true`)
	send(t, ctx, payload)
	wait(t, ctx, "the answer to the payload", `q('#stop').hidden && qa('#messages .msg').length === 6`, 20*time.Second)
	if got := eval[string](t, ctx, `qa('#messages .msg.user').pop().querySelector('.bubble').textContent`); got != payload {
		t.Errorf("the user's message shows %q, want it as typed", got)
	}

	// Model output holding the payload renders sanitized: imported as an
	// answer, it goes through the page's Markdown path.
	conv, _ := json.Marshal(map[string]any{"title": "payload", "messages": []any{
		map[string]any{"role": "user", "content": "show me"},
		map[string]any{"role": "assistant", "content": payload, "reasoning": "thinking <b>hard</b>"},
	}})
	js, _ := json.Marshal(string(conv))
	if n := eval[int](t, ctx, fmt.Sprintf(`window.govinfer.importText(%s, 'payload.json')`, js)); n != 1 {
		t.Fatalf("importing a conversation: %d imported", n)
	}
	run(t, ctx, "letting handlers fire", chromedp.Sleep(300*time.Millisecond))
	if bad := eval[string](t, ctx, noPwn); bad != "" {
		t.Errorf("model output got through: %s", bad)
	}
	checks := map[string]string{
		"highlighted code":   `!!q('#messages .msg.assistant pre code.hljs .hljs-keyword')`,
		"a copy button":      `!!q('#messages pre button.copy')`,
		"a table":            `!!q('#messages .content table td')`,
		"inline math":        `!!q('#messages .content span.math .katex')`,
		"display math":       `!!q('#messages .content .math-display .katex-display')`,
		"reasoning as text":  `q('#messages details.reasoning .reasoning-text').textContent === 'thinking <b>hard</b>'`,
		"the link, harmless": `qa('#messages .content a').every((a) => !a.getAttribute('href') || a.rel.includes('noopener'))`,
	}
	for what, js := range checks {
		if !eval[bool](t, ctx, js) {
			t.Errorf("the rendered answer lacks %s (%s)", what, js)
		}
	}
	// Files that are not conversations are refused with a message.
	for _, bad := range []string{`not json`, `{"a": 1}`, `[1, 2]`, `{"messages": [{"role": "system", "content": 1}]}`} {
		js, _ := json.Marshal(bad)
		if n := eval[int](t, ctx, fmt.Sprintf(`window.govinfer.importText(%s, 'bad.json')`, js)); n != 0 {
			t.Errorf("importing %s: %d conversations", bad, n)
		}
		if !eval[bool](t, ctx, `!q('#notice').hidden && q('#notice').textContent.includes('bad.json')`) {
			t.Errorf("importing %s showed no message", bad)
		}
	}
	if n := eval[int](t, ctx, `qa('#conv-list li').length`); n != 2 {
		t.Errorf("%d conversations listed after the imports, want 2", n)
	}

	// Server errors show as they come: here a 400 (max_tokens over the
	// context is lowered, a negative one is refused).
	eval[bool](t, ctx, `setField('set-max_tokens', '-5'), true`)
	before := eval[int](t, ctx, `qa('#messages .msg').length`)
	send(t, ctx, "again")
	wait(t, ctx, "the error", `q('#stop').hidden && lastAnswer().querySelector('.error')`, 10*time.Second)
	if msg := eval[string](t, ctx, `lastAnswer().querySelector('.error').textContent`); !strings.Contains(msg, "HTTP 400") || !strings.Contains(msg, "max_tokens") {
		t.Errorf("the 400 shows as %q", msg)
	}
	// The next send that succeeds leaves no stale error: the failed,
	// empty answer leaves the conversation (it is not sent as a turn).
	eval[bool](t, ctx, `setField('set-max_tokens', '1'), true`)
	send(t, ctx, "once more")
	wait(t, ctx, "the answer after the error", `q('#stop').hidden && lastAnswer().querySelector('.stats') && qa('#messages .msg').length === `+fmt.Sprint(before+3), 20*time.Second)
	if bad := eval[string](t, ctx, `(() => {
		const out = [];
		if (q('#messages .error')) out.push('an error shown: ' + q('#messages .error').textContent);
		if (govinfer.state.current.messages.some((m) => m.error)) out.push('an error kept');
		const users = qa('#messages .msg.user').slice(-2).map((v) => v.textContent);
		if (!users[0].includes('again') || !users[1].includes('once more')) out.push('the questions: ' + users.join(' | '));
		if (!lastAnswer().querySelector('.stats').textContent.includes('stopped: reached the token limit') && !lastAnswer().querySelector('.stats').textContent.includes('finished')) out.push('the finish: ' + lastAnswer().querySelector('.stats').textContent);
		return out.join('; ');
	})()`); bad != "" {
		t.Errorf("after an error, a successful send: %s", bad)
	}

	// Screenshots and the phone layout (no sideways scrolling), light and dark.
	shots := os.Getenv("GOVINFER_WEBUI_SHOTS")
	if shots != "" {
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shot := func(name string) {
		if shots == "" {
			return
		}
		png := run(t, ctx, "screenshot", chromedp.CaptureScreenshot())
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eval[bool](t, ctx, `q('#messages').scrollTop = 0, true`)
	shot("light.png")
	scheme := func(s string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: s}}})
			return err
		})
	}
	run(t, ctx, "dark", scheme("dark"))
	if bg := eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(13, 17, 23)" {
		t.Errorf("dark theme: body background %s", bg)
	}
	shot("dark.png")
	run(t, ctx, "light", scheme("light"))
	run(t, ctx, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulatePortrait))
	run(t, ctx, "relayout", chromedp.Sleep(200*time.Millisecond))
	if wide := eval[string](t, ctx, `(() => {
		const w = document.documentElement.clientWidth;
		const out = [];
		if (document.documentElement.scrollWidth > w) out.push('page ' + document.documentElement.scrollWidth);
		if (q('#messages').scrollWidth > q('#messages').clientWidth) out.push('messages ' + q('#messages').scrollWidth);
		for (const e of qa('#top, #composer, #messages .msg')) if (e.getBoundingClientRect().right > w + 1) out.push(e.id || e.className);
		return out.join(', ');
	})()`); wide != "" {
		t.Errorf("on a phone (390 px) these scroll sideways: %s", wide)
	}
	// The list slides away in a 0.2 s transition that starts with the
	// resize; on a busy machine it ends later than the sleep above, so
	// wait for its end (it never ends if the list stays over the chat).
	wait(t, ctx, "the conversation list to leave the phone's screen (else it covers the chat)",
		`q('#sidebar').getBoundingClientRect().right <= 0`, 5*time.Second)
	shot("phone.png")
	run(t, ctx, "opening the list", chromedp.Click(chromedp.ID("open-side")))
	run(t, ctx, "sliding", chromedp.Sleep(300*time.Millisecond))
	shot("phone-list.png")
	if shots != "" {
		t.Logf("screenshots in %s", shots)
	}
}

// TestBrowserFirstToken measures, on the small random model, the time from
// GET / to the first answer token showing in the page: loading the page and
// its libraries, /v1/models, sending, prefill and the first step.
func TestBrowserFirstToken(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	info, err := randmodel.ReadTokenizer("../../testdata/tokenizer/qwen3/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	shape, err := randmodel.LookupShape("small")
	if err != nil {
		t.Fatal(err)
	}
	shape.Vocab = info.Vocab
	if err := randmodel.Write(dir, shape, randmodel.Options{Seed: 1, EOS: info.EOS}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.CopyTokenizer(dir, "../../testdata/tokenizer/qwen3", "../../testdata/chat/chat_template.jinja"); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	s := serve(t, dir, 4096, &log)
	run(t, ctx, "starting the browser", chromedp.Navigate("about:blank"))

	start := time.Now()
	run(t, ctx, "loading the page", chromedp.Navigate("http://"+s.Addr()+"/"))
	loaded := time.Since(start)
	wait(t, ctx, "the model", `q('#model-info').textContent.includes('test-model')`, 10*time.Second)
	ready := time.Since(start)
	eval[bool](t, ctx, `setField('set-max_tokens', '8'), (q('#input').value = 'Hello'), q('#send').click(), true`)
	wait(t, ctx, "the first token", `(() => { const a = lastAnswer(); return a && (a.querySelector('.content').textContent.length > 0 || a.querySelector('.reasoning-text').textContent.length > 0); })()`, 30*time.Second)
	first := time.Since(start)
	wait(t, ctx, "the answer", `q('#stop').hidden && lastAnswer().querySelector('.stats')`, 30*time.Second)
	stats := eval[string](t, ctx, `lastAnswer().querySelector('.stats').textContent`)
	t.Logf("small random model: GET / to first answer token %v (page loaded %v, model shown %v); the page's stats: %s",
		first.Round(time.Millisecond), loaded.Round(time.Millisecond), ready.Round(time.Millisecond), stats)
}

// TestBrowserAPIKey: under --api-key the page asks for the key, keeps it in
// the browser and then reaches /v1.
func TestBrowserAPIKey(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	if err := testckpt.Write(dir, "../../testdata"); err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.StartLoading(context.Background(), dir, llm.Options{MaxModelLen: 2048},
		httpapi.Config{Addr: "127.0.0.1:0", ServedModelName: "test-model", APIKey: "sesame"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "loading the page", chromedp.Navigate("http://"+s.Addr()+"/"))
	wait(t, ctx, "the key dialog", `q('#key-dialog').open && q('#model-info').textContent === 'API key needed'`, 10*time.Second)
	run(t, ctx, "typing the key", chromedp.SendKeys(chromedp.ID("key-input"), "sesame"))
	eval[bool](t, ctx, `q('#key-form').requestSubmit(), true`)
	wait(t, ctx, "the model with the key", `!q('#key-dialog').open && q('#model-info').textContent.includes('test-model')`, 10*time.Second)
	if k := eval[string](t, ctx, `localStorage.getItem('govinfer.apiKey')`); k != "sesame" {
		t.Errorf("the key kept in the browser: %q", k)
	}
	eval[bool](t, ctx, `setField('set-thinking', false), setField('set-max_tokens', '4'), (q('#input').value = 'hi'), q('#send').click(), true`)
	wait(t, ctx, "an answer with the key", `q('#stop').hidden && lastAnswer() && lastAnswer().querySelector('.stats') && !lastAnswer().querySelector('.error')`, 20*time.Second)
}

// writePNG writes a w × h PNG: a gradient, opaque or with a transparent
// corner.
func writePNG(t *testing.T, path string, w, h int, transparent bool) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := uint8(255)
			if transparent && x < w/4 && y < h/4 {
				a = 0
			}
			img.SetNRGBA(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, a})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserImages: on vl-tiny (a checkpoint with a vision tower) the page
// offers images; a picked one is downscaled to the page's pixel bound
// (JPEG, or PNG with transparency), shown as a thumbnail that can be
// removed, sent as an image_url part (the prompt grows by the image's
// tokens), shown in the conversation, kept across a reload and through an
// import; paste and drop attach too; nothing scrolls sideways on a phone.
func TestBrowserImages(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	if err := testckpt.WriteVL(dir, "../../testdata"); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	s := serve(t, dir, 4096, &log)
	run(t, ctx, "loading the page", chromedp.Navigate("http://"+s.Addr()+"/"))
	wait(t, ctx, "the model, taking images", `q('#model-info').textContent.includes('test-model') && !q('#attach-btn').hidden && !q('#attach-file').disabled`, 10*time.Second)
	settings := `setField('set-thinking', false), setField('set-max_tokens', '4'), setField('set-temperature', '0'), setField('set-seed', '7'), true`
	answered := `q('#stop').hidden && qa('#messages .msg.assistant').length === 1 && lastAnswer().querySelector('.stats') && !lastAnswer().querySelector('.error')`
	promptTokens := `govinfer.state.current.messages[1].stats.promptTokens`

	// The question alone, for its prompt tokens.
	eval[bool](t, ctx, settings)
	send(t, ctx, "What is this?")
	wait(t, ctx, "the answer without an image", answered, 20*time.Second)
	textOnly := eval[int](t, ctx, promptTokens)

	// Picked images: a 3-megapixel opaque one and a transparent one are
	// downscaled within the bound, keeping the aspect ratio, as JPEG and PNG.
	files := t.TempDir()
	big, clear := filepath.Join(files, "big.png"), filepath.Join(files, "clear.png")
	writePNG(t, big, 2000, 1500, false)
	writePNG(t, clear, 1200, 1200, true)
	run(t, ctx, "a new chat", chromedp.Click(chromedp.ID("new-chat")))
	eval[bool](t, ctx, settings)
	run(t, ctx, "picking two images", chromedp.SetUploadFiles(chromedp.ID("attach-file"), []string{big, clear}))
	wait(t, ctx, "two thumbnails", `qa('#attachments .thumb img').length === 2 && !q('#attachments').hidden`, 20*time.Second)
	var got []struct {
		Type string
		W, H int
		Len  int
	}
	raw := eval[string](t, ctx, `Promise.all(govinfer.state.pending.map((u) => new Promise((ok, bad) => {
		const i = new Image(); i.onload = () => ok({ Type: u.slice(5, u.indexOf(';')), W: i.naturalWidth, H: i.naturalHeight, Len: u.length });
		i.onerror = bad; i.src = u; }))).then(JSON.stringify)`)
	if err := json.Unmarshal([]byte(raw), &got); err != nil || len(got) != 2 {
		t.Fatalf("the pending images: %s (%v)", raw, err)
	}
	maxPixels := eval[int](t, ctx, `govinfer.MAX_PIXELS`)
	for i, want := range []struct {
		typ    string
		w, h   int
		aspect float64
	}{{"image/jpeg", 2000, 1500, 4.0 / 3}, {"image/png", 1200, 1200, 1}} {
		g := got[i]
		if g.Type != want.typ || g.W*g.H > maxPixels || g.W*g.H < maxPixels*98/100 ||
			math.Abs(float64(g.W)/float64(g.H)-want.aspect) > 0.01 {
			t.Errorf("a %d×%d image attached as %s %d×%d (%d bytes of data URL), want %s within %d pixels, aspect %.3f",
				want.w, want.h, g.Type, g.W, g.H, g.Len, want.typ, maxPixels, want.aspect)
		}
		t.Logf("a %d×%d PNG attached as %s %d×%d, data URL %d bytes", want.w, want.h, g.Type, g.W, g.H, g.Len)
	}
	// The remove buttons.
	run(t, ctx, "removing the second", chromedp.Click(chromedp.CSS("#attachments .thumb:nth-child(2) .remove")))
	wait(t, ctx, "one thumbnail", `qa('#attachments .thumb').length === 1 && govinfer.state.pending[0].startsWith('data:image/jpeg')`, 5*time.Second)
	run(t, ctx, "removing the first", chromedp.Click(chromedp.CSS("#attachments .thumb .remove")))
	wait(t, ctx, "no thumbnails", `q('#attachments').hidden && govinfer.state.pending.length === 0`, 5*time.Second)

	// One of vl-tiny's images, sent with the same question: the prompt
	// grows by the image's tokens (64×48 pixels, 16×16 a token on vl-tiny:
	// 12) and its vision start and end tokens.
	gradient, err := filepath.Abs("../../testdata/models/vl-tiny/images/gradient_64x48.png")
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "picking an image", chromedp.SetUploadFiles(chromedp.ID("attach-file"), []string{gradient}))
	wait(t, ctx, "its thumbnail", `qa('#attachments .thumb img').length === 1`, 10*time.Second)
	send(t, ctx, "What is this?")
	wait(t, ctx, "the answer to the image", answered, 30*time.Second)
	withImage := eval[int](t, ctx, promptTokens)
	if withImage-textOnly != 12+2 {
		t.Errorf("prompt tokens: %d with the image, %d without, want 14 more (12 image tokens, vision start and end); server log:\n%s", withImage, textOnly, log.String())
	}
	t.Logf("prompt tokens: %d without the image, %d with it; %s", textOnly, withImage, eval[string](t, ctx, `lastAnswer().querySelector('.stats').textContent`))
	shown := `(() => { const i = q('#messages .msg.user .images img'); return !!i && i.complete && i.naturalWidth === 64 && i.naturalHeight === 48 &&
		q('#messages .msg.user .text').textContent === 'What is this?' && q('#attachments').hidden; })()`
	wait(t, ctx, "the image in the conversation", shown, 5*time.Second)

	// Stored in the browser: after a reload it is there, and a
	// regeneration sends it again.
	if !eval[bool](t, ctx, `JSON.parse(localStorage.getItem('govinfer.conversations'))[0].messages[0].images[0].startsWith('data:image/jpeg;base64,')`) {
		t.Error("the image is not in the stored conversation")
	}
	run(t, ctx, "reloading", chromedp.Reload())
	wait(t, ctx, "the image after a reload", `!q('#attach-btn').hidden && `+shown, 10*time.Second)
	// A click opens it full size (a blob: URL: the CSP lets the page
	// neither fetch nor open a data: URL).
	eval[bool](t, ctx, `(window.open = (u) => { window.__opened = u; return null; }), q('#messages .msg.user .images img').click(), true`)
	if opened := eval[string](t, ctx, `String(window.__opened)`); !strings.HasPrefix(opened, "blob:") {
		t.Errorf("clicking the image opened %q, want a blob: URL", opened)
	}
	run(t, ctx, "regenerating", chromedp.Click(chromedp.CSS("#messages .msg.assistant .regen-btn")))
	wait(t, ctx, "the regenerated answer", `lastAnswer().querySelector('.stats') && `+answered, 30*time.Second)
	if n := eval[int](t, ctx, promptTokens); n != withImage {
		t.Errorf("the regenerated answer's prompt: %d tokens, want %d (with the image)", n, withImage)
	}

	// Export and import keep the images; an import holding something else
	// than an image's data URL is refused.
	exported := eval[string](t, ctx, `JSON.stringify(govinfer.state.current)`)
	js, _ := json.Marshal(exported)
	if n := eval[int](t, ctx, fmt.Sprintf(`window.govinfer.importText(%s, 'images.json')`, js)); n != 1 {
		t.Fatalf("importing a conversation with an image: %d imported", n)
	}
	wait(t, ctx, "the imported image", shown, 5*time.Second)
	for _, bad := range []string{`"javascript:alert(1)"`, `"data:text/html;base64,PGI+"`, `"data:image/svg+xml;base64,PHN2Zz4="`, `1`} {
		conv := `{"messages": [{"role": "user", "content": "x", "images": [` + bad + `]}]}`
		js, _ := json.Marshal(conv)
		if n := eval[int](t, ctx, fmt.Sprintf(`window.govinfer.importText(%s, 'bad.json')`, js)); n != 0 {
			t.Errorf("importing an image %s: %d conversations", bad, n)
		}
	}

	// Storage full (localStorage holds about 5 million characters; a photo,
	// downscaled, takes some 300,000): the page says so.
	eval[bool](t, ctx, `(() => { const set = Storage.prototype.setItem;
		Storage.prototype.setItem = () => { throw new DOMException('the quota has been exceeded', 'QuotaExceededError'); };
		try { setField('set-seed', '8'); } finally { Storage.prototype.setItem = set; }
		return true; })()`)
	if !eval[bool](t, ctx, `!q('#notice').hidden && q('#notice').textContent.includes('Could not save') && q('#notice').textContent.includes('images take room')`) {
		t.Errorf("a full storage shows %q", eval[string](t, ctx, `q('#notice').textContent`))
	}

	// Paste into the message box and drop on the page attach too.
	eval[bool](t, ctx, `(async () => {
		const c = document.createElement('canvas'); c.width = 40; c.height = 30;
		const g = c.getContext('2d'); g.fillStyle = '#c33'; g.fillRect(0, 0, 40, 30);
		const file = new File([await new Promise((ok) => c.toBlob(ok, 'image/png'))], 'pasted.png', { type: 'image/png' });
		const pasted = new DataTransfer(); pasted.items.add(file);
		q('#input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: pasted, bubbles: true, cancelable: true }));
		const dropped = new DataTransfer(); dropped.items.add(file);
		q('#messages').dispatchEvent(new DragEvent('dragover', { dataTransfer: dropped, bubbles: true, cancelable: true }));
		q('#messages').dispatchEvent(new DragEvent('drop', { dataTransfer: dropped, bubbles: true, cancelable: true }));
		return true;
	})()`)
	wait(t, ctx, "the pasted and the dropped image", `qa('#attachments .thumb img').length === 2 && govinfer.state.pending.every((u) => u.startsWith('data:image/jpeg')) && !q('#main').classList.contains('dropping')`, 10*time.Second)

	shots := os.Getenv("GOVINFER_WEBUI_SHOTS")
	shot := func(name string) {
		if shots == "" {
			return
		}
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
		b := run(t, ctx, "screenshot", chromedp.CaptureScreenshot())
		if err := os.WriteFile(filepath.Join(shots, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot("images.png")

	// On a phone, with the attach button and thumbnails, nothing scrolls
	// sideways.
	run(t, ctx, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulatePortrait))
	run(t, ctx, "relayout", chromedp.Sleep(200*time.Millisecond))
	if wide := eval[string](t, ctx, `(() => {
		const w = document.documentElement.clientWidth;
		const out = [];
		if (document.documentElement.scrollWidth > w) out.push('page ' + document.documentElement.scrollWidth);
		if (q('#messages').scrollWidth > q('#messages').clientWidth) out.push('messages ' + q('#messages').scrollWidth);
		for (const e of qa('#top, #composer, #attachments, #attach-btn, #send, #messages .msg, #messages .images img')) if (e.getBoundingClientRect().right > w + 1) out.push(e.id || e.className || e.tagName);
		return out.join(', ');
	})()`); wide != "" {
		t.Errorf("on a phone (390 px) these scroll sideways: %s", wide)
	}
	shot("phone-images.png")
}
