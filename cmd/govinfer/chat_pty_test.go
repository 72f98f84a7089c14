//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/govinfer/govinfer/internal/termtest"
	"github.com/govinfer/govinfer/llm"
)

// Keys as a terminal sends them.
const (
	keyUp    = "\x1b[A"
	keyLeft  = "\x1b[D"
	keyRight = "\x1b[C"
	keyHome  = "\x1b[H"
	keyCtrlC = "\x03"
	keyCtrlD = "\x04"
)

// ptyChat is "govinfer chat" running in a process of its own on a
// pseudo-terminal: keys go in, the screen comes out.
type ptyChat struct {
	t        *testing.T
	pty, tty *os.File
	cmd      *exec.Cmd
	exited   chan struct{}
	mu       sync.Mutex
	scr      *termtest.Screen
	raw      bytes.Buffer
}

const ptyCols, ptyRows = 200, 50

// startChat runs "govinfer chat args..." on a new pseudo-terminal.
func startChat(t *testing.T, args ...string) *ptyChat {
	t.Helper()
	return startChatEnv(t, nil, args...)
}

// startChatEnv is startChat with env added to the environment (which
// otherwise has no NO_COLOR).
func startChatEnv(t *testing.T, env []string, args ...string) *ptyChat {
	t.Helper()
	pty, tty, err := termtest.OpenPTY(ptyCols, ptyRows)
	if err != nil {
		t.Skip(err)
	}
	c := &ptyChat{t: t, pty: pty, tty: tty, exited: make(chan struct{}), scr: termtest.NewScreen(ptyCols, ptyRows)}
	c.cmd = exec.Command(os.Args[0], append([]string{"chat"}, args...)...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "NO_COLOR=") {
			c.cmd.Env = append(c.cmd.Env, e)
		}
	}
	c.cmd.Env = append(append(c.cmd.Env, asBinary+"=1", "TERM=xterm"), env...)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = tty, tty, tty
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.cmd.Wait()
		close(c.exited)
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pty.Read(buf)
			c.mu.Lock()
			c.scr.Write(buf[:n])
			c.raw.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.cmd.Process.Kill()
			<-c.exited
		}
		pty.Close()
		tty.Close()
	})
	return c
}

// text is everything the screen has shown.
func (c *ptyChat) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scr.Text()
}

func (c *ptyChat) rawOutput() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw.String()
}

func (c *ptyChat) send(keys string) {
	c.t.Helper()
	if _, err := c.pty.WriteString(keys); err != nil {
		c.t.Fatal(err)
	}
}

// waitFor waits until ok holds for the screen's text.
func (c *ptyChat) waitFor(what string, ok func(text string) bool) string {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		text := c.text()
		if ok(text) {
			return text
		}
		select {
		case <-c.exited:
			// Give the output it wrote before exiting time to arrive.
			if exitDeadline := time.Now().Add(2 * time.Second); exitDeadline.Before(deadline) {
				deadline = exitDeadline
			}
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s; screen:\n%s", what, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// promptLines returns the indices of the lines that start with the prompt.
func promptLines(lines []string) []int {
	var at []int
	for i, l := range lines {
		if strings.HasPrefix(l, strings.TrimSpace(chatPrompt)) {
			at = append(at, i)
		}
	}
	return at
}

func screenLines(text string) []string { return strings.Split(strings.TrimRight(text, "\n"), "\n") }

// do types keys at the prompt and waits for the next empty prompt; it
// returns the screen from the line typed on to that prompt (excluded).
func (c *ptyChat) do(keys string) string {
	c.t.Helper()
	before := len(promptLines(screenLines(c.text())))
	if before == 0 {
		c.t.Fatal("no prompt yet")
	}
	c.send(keys)
	text := c.waitFor(fmt.Sprintf("a prompt after %q", keys), func(text string) bool {
		lines := screenLines(text)
		return len(promptLines(lines)) > before && lines[len(lines)-1] == strings.TrimSpace(chatPrompt)
	})
	lines := screenLines(text)
	return strings.Join(lines[promptLines(lines)[before-1]:len(lines)-1], "\n")
}

// waitExit waits for the chat to end and returns its exit code.
func (c *ptyChat) waitExit() int {
	c.t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("the chat did not exit; screen:\n%s", c.text())
	}
	return c.cmd.ProcessState.ExitCode()
}

// cooked reports whether the terminal is in canonical mode with echo.
func (c *ptyChat) cooked() bool {
	tio, err := unix.IoctlGetTermios(int(c.tty.Fd()), unix.TCGETS)
	if err != nil {
		c.t.Fatal(err)
	}
	return tio.Lflag&unix.ICANON != 0 && tio.Lflag&unix.ECHO != 0
}

// shown reports whether an answer's text is on screen: each of its lines,
// in order (without the zero-width characters, combining marks, that the
// test screen does not keep).
func shown(screen, answer string) bool {
	rest := screen
	answer = strings.Map(func(r rune) rune {
		if r != '\n' && termtest.RuneWidth(r) == 0 {
			return -1
		}
		return r
	}, answer)
	for l := range strings.SplitSeq(strings.Trim(answer, "\n"), "\n") {
		i := strings.Index(rest, strings.TrimRight(l, " "))
		if i < 0 {
			return false
		}
		rest = rest[i:]
	}
	return true
}

var answerTokens = regexp.MustCompile(`answer: (\d+) tokens`)

// TestChatTerminal drives an interactive chat through a pseudo-terminal:
// line editing, commands, the conversation kept across turns and cleared,
// multi-line input (backslash, """ blocks, paste), the history, Ctrl-C at
// an empty prompt and on a line, /bye, and the terminal restored.
func TestChatTerminal(t *testing.T) {
	dir, m := chatModel(t)
	off := llm.Bool(false)
	const maxTokens = 6
	c := startChat(t, "--model", dir, "--think", "off", "--temperature", "0", "--max-tokens", strconv.Itoa(maxTokens), "--verbose")
	text := c.waitFor("the first prompt", func(s string) bool { return len(promptLines(screenLines(s))) == 1 })
	for _, w := range []string{"loading " + dir, "loaded in", "/help"} {
		if !strings.Contains(text, w) {
			t.Errorf("the start screen lacks %q:\n%s", w, text)
		}
	}
	if c.cooked() {
		t.Error("the terminal is not in raw mode at the prompt")
	}
	// check compares a turn's screen with the answer computed in process.
	check := func(name, block, question string, ref reference) {
		t.Helper()
		if strings.TrimSpace(ref.content) == "" {
			t.Fatalf("%s: the reference answer is empty: the test would prove nothing", name)
		}
		if !strings.HasPrefix(block, chatPrompt+strings.Split(question, "\n")[0]) {
			t.Errorf("%s: the turn does not start with the question:\n%s", name, block)
		}
		if !shown(block, ref.content) {
			t.Errorf("%s: answer %q not on screen:\n%s", name, ref.content, block)
		}
		if w := fmt.Sprintf("prompt: %d tokens", ref.promptTokens); !strings.Contains(block, w) {
			t.Errorf("%s: no %q (the conversation the model saw is not the expected one):\n%s", name, w, block)
		}
		if !strings.Contains(block, "tokens/s") {
			t.Errorf("%s: no speed line:\n%s", name, block)
		}
	}

	if out := c.do("/set top_p 2\r"); !strings.Contains(out, "error: top_p must be in [0, 1]") {
		t.Errorf("/set top_p 2:\n%s", out)
	}
	// Errors stand out (bold red); notes are dimmed.
	if !strings.Contains(c.rawOutput(), styleError+"error: top_p must be in [0, 1], got 2"+styleReset) {
		t.Errorf("the error is not drawn in bold red: %q", c.rawOutput())
	}
	// Line editing: the question is typed with mistakes and fixed.
	q1 := "hello world"
	ref1 := chatReference(t, m, off, maxTokens, user(q1))
	check("edited line", c.do("helo wrld"+keyLeft+keyLeft+keyLeft+"o"+keyHome+keyRight+keyRight+keyRight+"l\r"), q1, ref1)
	// The conversation goes on.
	q2 := "and then?"
	a1 := llm.Message{Role: "assistant", Content: ref1.content}
	ref2 := chatReference(t, m, off, maxTokens, user(q1), a1, user(q2))
	check("second turn", c.do(q2+"\r"), q2, ref2)
	// /clear forgets it.
	if out := c.do("/clear\r"); !strings.Contains(out, "(conversation cleared)") {
		t.Errorf("/clear:\n%s", out)
	}
	if !strings.Contains(c.rawOutput(), styleDim+"(conversation cleared)"+styleReset) {
		t.Errorf("the note is not dimmed: %q", c.rawOutput())
	}
	check("after /clear", c.do(q1+"\r"), q1, ref1)
	// Multi-line: a """ block, a trailing backslash, a paste.
	hist := []llm.Message{user(q1), a1}
	for _, ml := range []struct{ name, keys, question, first string }{
		{`""" block`, "\"\"\"\rline one\rtwo\"\"\"\r", "line one\ntwo", `"""`},
		{"backslash", "abc\\\rdef\r", "abc\ndef", `abc\`},
		{"paste", "\x1b[200~first\nsecond\x1b[201~\r", "first\nsecond", "first"},
	} {
		ref := chatReference(t, m, off, maxTokens, append(hist, user(ml.question))...)
		block := c.do(ml.keys)
		check(ml.name, block, ml.first, ref)
		if ml.name != "paste" && !strings.Contains(block, continuePrompt) {
			t.Errorf("%s: no continuation prompt:\n%s", ml.name, block)
		}
		hist = append(hist, user(ml.question), llm.Message{Role: "assistant", Content: ref.content})
	}
	// Up recalls the last message whole; Ctrl-C abandons the line quietly.
	out := c.do(keyUp + keyCtrlC)
	if !strings.HasPrefix(out, chatPrompt+"first\nsecond^C") || strings.Contains(out, "to leave") {
		t.Errorf("up then Ctrl-C:\n%s", out)
	}
	// Ctrl-C at an empty prompt says how to leave.
	if out := c.do(keyCtrlC); !strings.Contains(out, "(Ctrl-D or /bye to leave)") {
		t.Errorf("Ctrl-C at an empty prompt:\n%s", out)
	}
	if out := c.do("/set seed 7\r/set\r"); !regexp.MustCompile(`seed +7\n`).MatchString(out) || !regexp.MustCompile(`temperature +0\n`).MatchString(out) {
		t.Errorf("/set:\n%s", out)
	}
	if out := c.do("/help\r"); !strings.Contains(out, "/think on|off") || !strings.Contains(out, `"""`) {
		t.Errorf("/help:\n%s", out)
	}
	if out := c.do("/nope\r"); !strings.Contains(out, "error: unknown command /nope") {
		t.Errorf("/nope:\n%s", out)
	}
	if !strings.Contains(c.rawOutput(), styleError+"error: unknown command /nope") {
		t.Errorf("the unknown command is not an error in bold red: %q", c.rawOutput())
	}
	c.send("/bye\r")
	if code := c.waitExit(); code != 0 {
		t.Errorf("/bye: exit %d", code)
	}
	if !c.cooked() {
		t.Error("the terminal was left in raw mode")
	}
}

// TestChatTerminalStop drives reasoning shown and hidden, Ctrl-C in the
// middle of an answer, and Ctrl-D.
func TestChatTerminalStop(t *testing.T) {
	dir, m := chatModel(t)
	c := startChat(t, "--model", dir, "--temperature", "0", "--max-tokens", "5", "--verbose")
	c.waitFor("the first prompt", func(s string) bool { return len(promptLines(screenLines(s))) == 1 })
	// Thinking is on by default: the reasoning shows, dimmed.
	ref := chatReference(t, m, nil, 5, user("Why?"))
	if ref.reasoning == "" {
		t.Fatal("the reference has no reasoning: the test would prove nothing")
	}
	block := c.do("Why?\r")
	if !shown(block, ref.reasoning) {
		t.Errorf("reasoning %q not on screen:\n%s", ref.reasoning, block)
	}
	first := strings.TrimLeft(ref.reasoning, "\n")
	if !strings.Contains(c.rawOutput(), styleDim+first[:min(len(first), 8)]) {
		t.Errorf("the reasoning is not dimmed: %q", c.rawOutput())
	}
	// /think hide: a "Thinking..." line that goes away.
	if out := c.do("/think hide\r"); !strings.Contains(out, "(reasoning hidden)") {
		t.Errorf("/think hide:\n%s", out)
	}
	hist := []llm.Message{user("Why?"), {Role: "assistant", Content: ref.content, Reasoning: ref.reasoning}}
	ref2 := chatReference(t, m, nil, 5, append(hist, user("Why not?"))...)
	block = c.do("Why not?\r")
	if shown(block, ref2.reasoning) || strings.Contains(block, "Thinking...") || !strings.Contains(c.rawOutput(), "Thinking...") {
		t.Errorf("hidden reasoning %q: screen\n%s", ref2.reasoning, block)
	}
	if !strings.Contains(block, "while the model was thinking") {
		t.Errorf("no note that the answer ended while thinking:\n%s", block)
	}
	// /think off: no reasoning, the answer is content.
	if out := c.do("/think off\r"); !strings.Contains(out, "(thinking off)") {
		t.Errorf("/think off:\n%s", out)
	}
	hist = append(hist, user("Why not?"), llm.Message{Role: "assistant", Content: ref2.content, Reasoning: ref2.reasoning})
	ref3 := chatReference(t, m, llm.Bool(false), 5, append(hist, user("Why?"))...)
	if strings.TrimSpace(ref3.content) == "" {
		t.Fatal("the reference answer is empty: the test would prove nothing")
	}
	if block := c.do("Why?\r"); !shown(block, ref3.content) || !strings.Contains(block, fmt.Sprintf("prompt: %d tokens", ref3.promptTokens)) {
		t.Errorf("after /think off: answer %q (prompt %d tokens) not on screen:\n%s", ref3.content, ref3.promptTokens, block)
	}
	// Ctrl-C stops a long answer and the chat goes on.
	const long = 3000
	c.do(fmt.Sprintf("/set max_tokens %d\r", long))
	before := len(screenLines(c.text()))
	c.send("Tell me a long story.\r")
	c.waitFor("the answer to start", func(s string) bool {
		lines := screenLines(s)
		return len(lines) > before && strings.TrimSpace(lines[len(lines)-1]) != ""
	})
	block = c.do(keyCtrlC)
	if !strings.Contains(block, "(answer stopped)") {
		t.Errorf("Ctrl-C during the answer:\n%s", block)
	}
	if n := answerTokens.FindStringSubmatch(block); n == nil {
		t.Errorf("no answer token count:\n%s", block)
	} else if k, _ := strconv.Atoi(n[1]); k >= long {
		t.Errorf("the answer ran to %d tokens: Ctrl-C did not stop it", k)
	}
	if out := c.do("/set\r"); !regexp.MustCompile(`max_tokens +3000\n`).MatchString(out) {
		t.Errorf("/set after the stop:\n%s", out)
	}
	c.send(keyCtrlD)
	if code := c.waitExit(); code != 0 {
		t.Errorf("Ctrl-D: exit %d", code)
	}
	if !c.cooked() {
		t.Error("the terminal was left in raw mode")
	}
}

// TestChatTerminalErrors: a bad model path on a terminal gets a message and
// a non-zero exit, as does standard output that is not a terminal.
func TestChatTerminalErrors(t *testing.T) {
	c := startChat(t, "--model", "/nonexistent/model")
	if code := c.waitExit(); code != exitUsage {
		t.Errorf("bad model path: exit %d, want %d", code, exitUsage)
	}
	c.waitFor("the error message", func(s string) bool {
		return strings.Contains(s, "govinfer chat: --model /nonexistent/model: no such file or folder")
	})
	pty, tty, err := termtest.OpenPTY(80, 24)
	if err != nil {
		t.Skip(err)
	}
	defer pty.Close()
	defer tty.Close()
	var out, errOut bytes.Buffer
	code := dispatch(t.Context(), stdio{in: tty, out: &out, err: &errOut}, []string{"chat", "--model", servableCheckpoint(t)})
	if code != exitUsage || !strings.Contains(errOut.String(), "standard output is not a terminal") {
		t.Errorf("terminal in, file out: exit %d, %q", code, errOut.String())
	}
}

// TestChatTerminalNoColor: with NO_COLOR, errors keep their "error:" prefix
// and nothing is coloured or dimmed.
func TestChatTerminalNoColor(t *testing.T) {
	dir, _ := chatModel(t)
	c := startChatEnv(t, []string{"NO_COLOR=1"}, "--model", dir, "--think", "off", "--max-tokens", "2")
	c.waitFor("the first prompt", func(s string) bool { return len(promptLines(screenLines(s))) == 1 })
	for keys, want := range map[string]string{
		"/set top_p 2\r": "error: top_p must be in [0, 1]",
		"/nope\r":        "error: unknown command /nope",
		"/think maybe\r": "error: usage: /think on|off|show|hide",
		"/clear\r":       "(conversation cleared)",
	} {
		if out := c.do(keys); !strings.Contains(out, want) {
			t.Errorf("%q: no %q:\n%s", keys, want, out)
		}
	}
	for _, style := range []string{styleDim, styleError} {
		if strings.Contains(c.rawOutput(), style) {
			t.Errorf("NO_COLOR: the output has the style %q: %q", style, c.rawOutput())
		}
	}
	c.send("/bye\r")
	if code := c.waitExit(); code != 0 {
		t.Errorf("/bye: exit %d", code)
	}
}
