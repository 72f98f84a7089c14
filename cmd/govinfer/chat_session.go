package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	goio "io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/govinfer/govinfer/internal/lineedit"
	"github.com/govinfer/govinfer/llm"
)

// Terminal styles.
const (
	styleDim   = "\x1b[2m"
	styleError = "\x1b[1;31m" // bold red
	styleReset = "\x1b[0m"
)

// Prompts of the interactive chat.
const (
	chatPrompt     = ">>> "
	continuePrompt = "... "
)

// chatSession is a conversation with a model.
type chatSession struct {
	m       *llm.Model
	opts    *chatOptions
	history []llm.Message // user and assistant turns, without the system message
	pending []chatImage   // the images attached to the next message
}

// turnResult is what one answer produced.
type turnResult struct {
	content, reasoning string
	finish             llm.FinishReason
	err                error
	stats              string // prompt and decode speed
}

// ask sends question with the attached images (after the conversation so
// far) and streams the answer to w. The conversation keeps the question,
// its images and the answer unless the request fails; the images are then
// no longer pending (they stay pending when it fails).
func (s *chatSession) ask(ctx context.Context, question string, w *answerWriter) turnResult {
	var msgs []llm.Message
	if s.opts.system != "" {
		msgs = append(msgs, llm.Message{Role: "system", Content: s.opts.system})
	}
	user := s.userMessage(question)
	msgs = append(append(msgs, s.history...), user)
	start := time.Now()
	st, err := s.m.Chat(ctx, llm.ChatRequest{Messages: msgs, Thinking: s.opts.think, Params: s.opts.params})
	if err != nil {
		return turnResult{err: err}
	}
	defer st.Close()
	var r turnResult
	var content, reasoning strings.Builder
	for ev := range st.Events() {
		switch ev.Kind {
		case llm.KindReasoning:
			reasoning.WriteString(ev.Text)
			w.addReasoning(ev.Text)
		case llm.KindContent, llm.KindToolCall:
			content.WriteString(ev.Text)
			w.addContent(ev.Text)
		case llm.KindFinish:
			r.finish = ev.Finish
			if ev.Finish == llm.FinishError {
				r.err = ev.Err
			}
		}
	}
	w.end()
	r.content, r.reasoning = content.String(), reasoning.String()
	r.stats = speed(st, start, time.Now())
	if r.err == nil && r.finish != "" {
		s.history = append(s.history, user, llm.Message{Role: "assistant", Content: r.content, Reasoning: r.reasoning})
		s.pending = nil
	}
	return r
}

// userMessage is the user turn of question with the attached images.
func (s *chatSession) userMessage(question string) llm.Message {
	return llm.Message{Role: "user", Content: question, Images: llmImages(s.pending)}
}

// speed formats a stream's prompt and decode rates: the prompt over the time
// to the first token, the other tokens over the rest.
func speed(st *llm.Stream, start, end time.Time) string {
	u := st.Usage()
	ttft := st.TimeToFirstToken()
	if ttft <= 0 || u.CompletionTokens == 0 {
		return fmt.Sprintf("prompt: %d tokens; no answer tokens", u.PromptTokens)
	}
	line := fmt.Sprintf("prompt: %d tokens, %.1f tokens/s; answer: %d tokens", u.PromptTokens,
		float64(u.PromptTokens)/ttft.Seconds(), u.CompletionTokens)
	if rest := end.Sub(start) - ttft; u.CompletionTokens > 1 && rest > 0 {
		line += fmt.Sprintf(", %.1f tokens/s", float64(u.CompletionTokens-1)/rest.Seconds())
	}
	return line + fmt.Sprintf("; %.2fs", end.Sub(start).Seconds())
}

// oneShot answers one question: the answer alone on standard output.
func (s *chatSession) oneShot(ctx context.Context, io stdio, question string) int {
	w := &answerWriter{out: io.out}
	if s.opts.showThinking {
		w.reasoning, w.aside = reasoningAside, io.err
	}
	r := s.ask(ctx, question, w)
	if s.opts.verbose && r.stats != "" {
		fmt.Fprintln(io.err, r.stats)
	}
	switch {
	case r.err != nil:
		fmt.Fprintf(io.err, "govinfer chat: %v\n", r.err)
		return exitError
	case r.finish == llm.FinishAbort:
		fmt.Fprintln(io.err, "govinfer chat: interrupted")
		return exitError
	}
	return exitOK
}

// interactive runs the chat on a terminal until /bye, Ctrl-D or ctx ends.
func (s *chatSession) interactive(ctx context.Context, io stdio, in, out *os.File) int {
	fd := int(in.Fd())
	saved, err := term.MakeRaw(fd)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer chat: cannot put the terminal in raw mode: %v\n", err)
		return exitError
	}
	defer term.Restore(fd, saved)
	// Raw mode turns off output processing: line ends need their CR.
	scr := crlfWriter{out}
	goio.WriteString(out, lineedit.EnableBracketedPaste)
	defer goio.WriteString(out, lineedit.DisableBracketedPaste)
	keys := lineedit.NewInput(in)
	defer keys.Close()
	ed := lineedit.New(keys, out, func() int {
		w, _, err := term.GetSize(int(out.Fd()))
		if err != nil {
			return 0
		}
		return w
	})
	color := os.Getenv("NO_COLOR") == ""
	c := &chatConsole{s: s, scr: scr, ed: ed, keys: keys, color: color}
	c.note("Type /help for help. Ctrl-C stops an answer, Ctrl-D or /bye leaves.")
	return c.run(ctx)
}

// chatConsole is the interactive side of a session.
type chatConsole struct {
	s     *chatSession
	scr   goio.Writer // the terminal, "\n" written as CRLF
	ed    *lineedit.Editor
	keys  *lineedit.Input
	color bool
}

// note prints a line of the program's own (dimmed).
func (c *chatConsole) note(format string, a ...any) {
	text := fmt.Sprintf(format, a...)
	if c.color {
		text = styleDim + text + styleReset
	}
	fmt.Fprintln(c.scr, text)
}

// errorf prints an error: a line that starts with "error:", in bold red
// (plain without colours), so that it stands out from the dimmed notes.
func (c *chatConsole) errorf(format string, a ...any) {
	text := "error: " + fmt.Sprintf(format, a...)
	if c.color {
		text = styleError + text + styleReset
	}
	fmt.Fprintln(c.scr, text)
}

func (c *chatConsole) run(ctx context.Context) int {
	for {
		msg, command, err := c.read(ctx)
		switch {
		case errors.Is(err, lineedit.ErrInterrupted):
			if msg == "" {
				c.note("(Ctrl-D or /bye to leave)")
			}
			continue
		case errors.Is(err, goio.EOF):
			return exitOK
		case err != nil:
			if ctx.Err() != nil {
				return exitOK // SIGTERM or SIGHUP: leave as /bye does
			}
			c.errorf("reading the terminal: %v", err)
			return exitError
		}
		// A line that is only image files' paths (files dropped on the
		// terminal) attaches them; it may start with "/".
		if paths, ok := imagePathLine(msg); ok {
			c.ed.AddHistory(msg)
			c.attach(paths)
			continue
		}
		if command {
			if leave := c.command(msg); leave {
				return exitOK
			}
			continue
		}
		if strings.TrimSpace(msg) == "" {
			switch len(c.s.pending) {
			case 0:
			case 1:
				c.note("(type the message that goes with the image; /image clear drops it)")
			default:
				c.note("(type the message that goes with the images; /image clear drops them)")
			}
			continue
		}
		c.ed.AddHistory(msg)
		c.answer(ctx, msg)
		if ctx.Err() != nil {
			return exitOK
		}
	}
}

// read reads one message, over several lines where the input says so, or
// a command (a first line starting with "/"). With ErrInterrupted, msg is
// what was typed before Ctrl-C.
func (c *chatConsole) read(ctx context.Context) (msg string, command bool, err error) {
	var ml multiline
	prompt := c.prompt()
	for {
		line, err := c.ed.ReadLine(ctx, prompt)
		if err != nil {
			return ml.text() + line, false, err
		}
		if ml.empty() && strings.HasPrefix(line, "/") {
			return strings.TrimSpace(line), true, nil
		}
		if ml.add(line) {
			return ml.text(), false, nil
		}
		prompt = continuePrompt
	}
}

// prompt is the prompt of a new message: the attached images, then
// chatPrompt.
func (c *chatConsole) prompt() string {
	label := imageLabel(c.s.pending)
	switch {
	case label == "":
		return chatPrompt
	case c.color:
		return styleDim + label + styleReset + " " + chatPrompt
	}
	return label + " " + chatPrompt
}

// attach attaches image files to the next message, with a note for each.
func (c *chatConsole) attach(paths []string) {
	for _, p := range paths {
		img, err := c.s.attach(p)
		if err != nil {
			c.errorf("%v", err)
			if errors.Is(err, errNoVision) {
				return
			}
			continue
		}
		c.note("(attached %s: it goes with your next message)", img.describe())
	}
}

// image runs /image.
func (c *chatConsole) image(arg string) {
	switch {
	case arg == "":
		if len(c.s.pending) == 0 {
			held := ""
			if n := c.s.imageCount(); n > 0 {
				held = fmt.Sprintf("; the conversation holds %d", n)
			}
			c.note("(no image attached: /image PATH attaches one%s)", held)
			return
		}
		for i, img := range c.s.pending {
			fmt.Fprintf(c.scr, "  %d. %s\n", i+1, img.describe())
		}
	case arg == "clear":
		n := len(c.s.pending)
		c.s.pending = nil
		switch n {
		case 0:
			c.note("(no image attached)")
		case 1:
			c.note("(the attached image dropped)")
		default:
			c.note("(the %d attached images dropped)", n)
		}
	case !c.s.m.HasVision():
		c.errorf("%v", errNoVision)
	default:
		// The path as it is (spaces and all) when it names a file, else
		// the argument's words, quoted or escaped as a shell takes them.
		paths := []string{resolvePath(arg)}
		if _, err := os.Stat(paths[0]); err != nil {
			if words, ok := shellWords(arg); ok && len(words) > 0 {
				paths = paths[:0]
				for _, w := range words {
					paths = append(paths, resolvePath(w))
				}
			}
		}
		c.attach(paths)
	}
}

// answer asks the model and streams the answer; Ctrl-C stops it.
func (c *chatConsole) answer(ctx context.Context, question string) {
	actx, cancel := context.WithCancel(ctx)
	interrupted := make(chan bool, 1)
	go func() {
		hit := c.keys.WaitInterrupt(actx)
		if hit {
			cancel()
		}
		interrupted <- hit
	}()
	w := &answerWriter{out: c.scr, color: c.color, indicator: true}
	if !c.s.opts.hideThinking {
		w.reasoning = reasoningInline
	}
	r := c.s.ask(actx, question, w)
	cancel()
	stopped := <-interrupted
	switch {
	case r.err != nil:
		var cl *llm.ContextLengthError
		if errors.As(r.err, &cl) {
			c.errorf("the conversation is too long for the model's context (%d tokens): /clear starts a new one", cl.MaxModelLen)
		} else {
			c.errorf("%v", r.err)
		}
		switch len(c.s.pending) {
		case 0:
		case 1:
			c.note("(the image stays attached: /image clear drops it)")
		default:
			c.note("(the images stay attached: /image clear drops them)")
		}
		return
	case stopped:
		c.note("(answer stopped)")
	case r.finish == llm.FinishLength && r.content == "":
		c.note("(max_tokens or the context's end reached while the model was thinking)")
	case r.finish == llm.FinishLength:
		c.note("(answer cut: max_tokens or the context's end reached)")
	}
	if c.s.opts.verbose {
		c.note("%s", r.stats)
	}
}

// command runs a /command and reports whether the session ends.
func (c *chatConsole) command(line string) (leave bool) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	o := c.s.opts
	switch name {
	case "/bye", "/exit", "/quit":
		return true
	case "/help", "/?":
		fmt.Fprint(c.scr, chatHelp)
	case "/clear":
		c.s.history, c.s.pending = nil, nil
		c.note("(conversation cleared)")
	case "/image", "/img":
		c.image(arg)
	case "/think":
		switch arg {
		case "on", "off":
			b := arg == "on"
			o.think = &b
			c.note("(thinking %s)", arg)
		case "show", "hide":
			o.hideThinking = arg == "hide"
			c.note("(reasoning %s)", map[bool]string{true: "hidden", false: "shown"}[o.hideThinking])
		case "":
			c.note("thinking: %s; reasoning %s", thinkState(o.think), map[bool]string{true: "hidden", false: "shown"}[o.hideThinking])
		default:
			c.errorf("usage: /think on|off|show|hide")
		}
	case "/set":
		c.set(arg)
	default:
		c.errorf("unknown command %s: /help lists them", name)
	}
	return false
}

func thinkState(think *bool) string {
	if think == nil {
		return "the chat template's default"
	}
	return onOff(*think)
}

// set runs /set.
func (c *chatConsole) set(arg string) {
	o := c.s.opts
	if arg == "" {
		for _, st := range chatSettings() {
			fmt.Fprintf(c.scr, "  %-19s %s\n", st.name, st.show(o, c.s.m.Defaults()))
		}
		fmt.Fprintf(c.scr, "  %-19s %s\n", "think", thinkState(o.think))
		return
	}
	name, value, _ := strings.Cut(arg, " ")
	value = strings.TrimSpace(value)
	st, ok := lookupSetting(name)
	switch {
	case !ok && name == "think":
		c.command("/think " + value)
		return
	case !ok:
		c.errorf("unknown setting %q: one of %s", name, settingNames())
		return
	case value == "":
		c.note("usage: /set %s VALUE (or default); now %s", st.name, st.show(o, c.s.m.Defaults()))
		return
	case st.name != "system" && strings.ContainsAny(value, " \t"):
		c.errorf("%s takes one value, got %q", st.name, value)
		return
	}
	if err := st.set(o, value); err != nil {
		c.errorf("%v", err)
		return
	}
	c.note("(%s %s)", st.name, st.show(o, c.s.m.Defaults()))
}

const chatHelp = `Commands:
  /set                 show the settings
  /set NAME VALUE      change one: temperature, top_p, top_k, min_p,
                       repetition_penalty, presence_penalty, frequency_penalty,
                       seed, max_tokens, verbose, system (the rest of the line)
  /set NAME default    back to the checkpoint's value (or none)
  /think on|off        let the model reason before it answers, or not
  /think show|hide     show its reasoning (dimmed) or hide it
  /image PATH          attach an image file (PNG, JPEG, WebP or GIF) to your
                       next message; a line that is only an image's path (a
                       file dropped on the terminal) attaches it too
  /image               list the attached images; /image clear drops them
  /clear               forget the conversation and its images (the settings
                       stay)
  /bye                 leave (Ctrl-D on an empty line too)
  /help                this text

Multi-line input: end a line with \ to go on to the next, or open a block
with """ and close it with """. Pasted text keeps its line breaks.
Keys: left/right, Home/End (Ctrl-A/E), Backspace/Delete, Ctrl-W deletes a
word, Ctrl-U/Ctrl-K to the start/end, up/down recall what you typed before,
Ctrl-L clears the screen. Ctrl-C stops an answer or clears the line.
`

// multiline collects a message over lines: a line ending in a backslash
// goes on to the next, and a line starting with """ opens a block that a
// line ending with """ closes.
type multiline struct {
	parts []string
	block bool
}

func (m *multiline) empty() bool { return len(m.parts) == 0 && !m.block }

// add takes a line and reports whether the message is complete.
func (m *multiline) add(line string) bool {
	if m.block {
		if before, ok := closeBlock(line); ok {
			if before != "" {
				m.parts = append(m.parts, before)
			}
			m.block = false
			return true
		}
		m.parts = append(m.parts, line)
		return false
	}
	if rest, ok := strings.CutPrefix(line, `"""`); ok {
		if before, ok := closeBlock(rest); ok {
			m.parts = append(m.parts, before)
			return true
		}
		m.block = true
		if rest != "" {
			m.parts = append(m.parts, rest)
		}
		return false
	}
	if before, ok := strings.CutSuffix(line, `\`); ok {
		m.parts = append(m.parts, before)
		return false
	}
	m.parts = append(m.parts, line)
	return true
}

// closeBlock finds a closing """ at the end of line (trailing spaces
// aside) and returns what comes before it.
func closeBlock(line string) (string, bool) {
	return strings.CutSuffix(strings.TrimRight(line, " \t"), `"""`)
}

func (m *multiline) text() string { return strings.Join(m.parts, "\n") }

// Where reasoning goes.
const (
	reasoningHidden = iota // not shown (a "Thinking..." indicator with indicator set)
	reasoningInline        // on out, dimmed, a blank line before the answer
	reasoningAside         // on aside (one-shot: standard error)
)

// answerWriter shows an answer as it streams: the reasoning, then the
// content.
type answerWriter struct {
	out       goio.Writer
	reasoning int // reasoningHidden, reasoningInline or reasoningAside
	aside     goio.Writer
	color     bool
	// indicator shows "Thinking..." while hidden reasoning runs (on a
	// terminal, where it can be erased).
	indicator bool

	section  int  // 0: nothing yet, 1: reasoning, 2: content
	trimLead bool // drop the newlines that open a section
	showing  bool // the indicator is on screen
	last     byte // last byte written to out
	lastSide byte // last byte written to aside
}

// writeOut writes to out.
func (w *answerWriter) writeOut(s string) {
	if s != "" {
		goio.WriteString(w.out, s)
		w.last = s[len(s)-1]
	}
}

// writeReasoning writes reasoning text where it goes.
func (w *answerWriter) writeReasoning(s string) {
	switch {
	case s == "":
	case w.reasoning == reasoningInline:
		w.writeOut(s)
	case w.reasoning == reasoningAside:
		goio.WriteString(w.aside, s)
		w.lastSide = s[len(s)-1]
	}
}

// addReasoning shows a piece of reasoning.
func (w *answerWriter) addReasoning(text string) {
	if w.section == 2 {
		return // the parser sends none after content; keep the answer whole if it did
	}
	if w.section == 0 {
		w.section, w.trimLead = 1, true
		switch {
		case w.reasoning == reasoningHidden && w.indicator:
			w.showing = true
			w.writeOut(w.style(styleDim) + "Thinking..." + w.style(styleReset))
		case w.reasoning == reasoningInline:
			w.writeOut(w.style(styleDim))
		}
	}
	w.writeReasoning(w.trim(text))
}

// addContent shows a piece of the answer.
func (w *answerWriter) addContent(text string) {
	if w.section != 2 {
		w.endReasoning(true)
		w.section, w.trimLead = 2, true
	}
	w.writeOut(w.trim(text))
}

// trim drops the newlines that open a section.
func (w *answerWriter) trim(text string) string {
	if w.trimLead {
		text = strings.TrimLeft(text, "\n")
		w.trimLead = text == ""
	}
	return text
}

// endReasoning closes the reasoning section; before an answer, inline
// reasoning gets a blank line after it.
func (w *answerWriter) endReasoning(answer bool) {
	if w.section != 1 {
		return
	}
	if w.showing {
		goio.WriteString(w.out, "\r\x1b[K")
		w.showing, w.last = false, 0
	}
	switch w.reasoning {
	case reasoningInline:
		w.writeOut(w.style(styleReset))
		if w.last != '\n' {
			w.writeOut("\n")
		}
		if answer {
			w.writeOut("\n")
		}
	case reasoningAside:
		if w.lastSide != 0 && w.lastSide != '\n' {
			w.writeReasoning("\n")
		}
	}
}

// end finishes the answer on a line of its own.
func (w *answerWriter) end() {
	w.endReasoning(false)
	if w.last != 0 && w.last != '\n' {
		w.writeOut("\n")
	}
}

func (w *answerWriter) style(s string) string {
	if !w.color {
		return ""
	}
	return s
}

// crlfWriter writes "\n" as "\r\n", for a terminal in raw mode.
type crlfWriter struct{ w goio.Writer }

func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
