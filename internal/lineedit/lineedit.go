// Package lineedit reads lines from a terminal in raw mode with the editing
// keys people expect of a shell prompt: left and right (Ctrl-B, Ctrl-F),
// word moves (Ctrl-left/right, Alt-B, Alt-F), Home and End (Ctrl-A,
// Ctrl-E), Backspace, Delete, Ctrl-W, Ctrl-U, Ctrl-K, history with up and
// down (Ctrl-P, Ctrl-N), Ctrl-L to clear the screen, and bracketed paste
// (pasted text, line breaks included, lands in the line as it is). Ctrl-C
// abandons the line (ErrInterrupted) and Ctrl-D on an empty line ends input
// (io.EOF).
//
// The caller puts the terminal in raw mode (golang.org/x/term's MakeRaw)
// and turns bracketed paste on if it wants it (EnableBracketedPaste). The
// editor redraws the prompt and the whole line after each key, wrapping it
// at the terminal's width (wide characters take two cells, a line break in
// the text starts a new row), with only CR, LF, cursor moves and "erase to
// the end of the screen". Input reads the terminal on its own goroutine, so
// that a program can watch for Ctrl-C while it is busy (WaitInterrupt)
// without losing keys typed ahead.
package lineedit

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ErrInterrupted is returned by ReadLine when Ctrl-C is typed.
var ErrInterrupted = errors.New("lineedit: interrupted")

// Terminal modes the caller may switch.
const (
	EnableBracketedPaste  = "\x1b[?2004h"
	DisableBracketedPaste = "\x1b[?2004l"
)

// DefaultMaxHistory is the number of entries an Editor remembers.
const DefaultMaxHistory = 1000

// Editor reads lines. It is not safe for concurrent use.
type Editor struct {
	in      *Input
	out     io.Writer
	width   func() int
	history []string
	// MaxHistory bounds the history; the oldest entries go first.
	MaxHistory int
}

// New returns an editor reading keys from in and drawing on out; width
// returns the terminal's width in cells (asked at each redraw, so that a
// resized window is followed; 0 or less means 80).
func New(in *Input, out io.Writer, width func() int) *Editor {
	return &Editor{in: in, out: out, width: width, MaxHistory: DefaultMaxHistory}
}

// AddHistory appends an entry to the history, unless it is empty or the
// same as the last one.
func (e *Editor) AddHistory(s string) {
	if strings.TrimSpace(s) == "" || len(e.history) > 0 && e.history[len(e.history)-1] == s {
		return
	}
	e.history = append(e.history, s)
	if e.MaxHistory > 0 && len(e.history) > e.MaxHistory {
		e.history = slices.Delete(e.history, 0, len(e.history)-e.MaxHistory)
	}
}

// History returns the history, oldest first.
func (e *Editor) History() []string { return slices.Clone(e.history) }

// line is the state of the line being edited.
type line struct {
	prompt string
	buf    []rune
	pos    int // cursor, an index into buf
	row    int // the cursor's row below the prompt's first row, as last drawn
	// wrapped: the text fills its last row exactly, and the cursor, at the
	// end, is at the start of the next row already.
	wrapped bool
	// hist is the history with the line being typed last; hi is the entry
	// shown. Edits of recalled entries last until ReadLine returns.
	hist []string
	hi   int
}

// ReadLine shows prompt, reads a line and returns it without its line end.
// Text pasted or recalled from the history may contain "\n". It returns
// what was typed with ErrInterrupted on Ctrl-C, io.EOF on Ctrl-D at an
// empty line or at the end of input with nothing typed, and ctx's error
// when ctx ends. The cursor
// must be at the start of a row when it is called; it is at the start of
// the next row when it returns.
func (e *Editor) ReadLine(ctx context.Context, prompt string) (string, error) {
	l := &line{prompt: prompt, hist: append(slices.Clone(e.history), "")}
	l.hi = len(l.hist) - 1
	e.refresh(l)
	for {
		k, err := e.readKey(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) && len(l.buf) > 0 {
				e.finish(l, "")
				return string(l.buf), nil
			}
			e.finish(l, "")
			return "", err
		}
		switch k.op {
		case opEnter:
			e.finish(l, "")
			return string(l.buf), nil
		case opInterrupt:
			e.finish(l, "^C")
			return string(l.buf), ErrInterrupted
		case opEOF:
			if len(l.buf) == 0 {
				e.finish(l, "")
				return "", io.EOF
			}
		case opClearScreen:
			io.WriteString(e.out, "\x1b[H\x1b[2J")
			l.row = 0
		}
		l.apply(k)
		e.refresh(l)
	}
}

// finish draws the whole line with the cursor after it, then note, and
// moves to the next row.
func (e *Editor) finish(l *line, note string) {
	l.pos = len(l.buf)
	e.refresh(l)
	if !l.wrapped || note != "" {
		io.WriteString(e.out, note+"\r\n")
	}
}

// apply edits the line.
func (l *line) apply(k key) {
	switch k.op {
	case opInsert:
		l.insert([]rune{k.r})
	case opPaste:
		l.insert([]rune(k.text))
	case opLeft:
		l.pos = max(l.pos-1, 0)
	case opRight:
		l.pos = min(l.pos+1, len(l.buf))
	case opHome:
		l.pos = 0
	case opEnd:
		l.pos = len(l.buf)
	case opWordLeft:
		l.pos = l.wordStart()
	case opWordRight:
		for l.pos < len(l.buf) && !isWord(l.buf[l.pos]) {
			l.pos++
		}
		for l.pos < len(l.buf) && isWord(l.buf[l.pos]) {
			l.pos++
		}
	case opBackspace:
		if l.pos > 0 {
			l.buf = slices.Delete(l.buf, l.pos-1, l.pos)
			l.pos--
		}
	case opDelete, opEOF:
		if l.pos < len(l.buf) {
			l.buf = slices.Delete(l.buf, l.pos, l.pos+1)
		}
	case opDeleteWordBack:
		start := l.wordStart()
		l.buf = slices.Delete(l.buf, start, l.pos)
		l.pos = start
	case opKillToEnd:
		l.buf = l.buf[:l.pos]
	case opKillToStart:
		l.buf = slices.Delete(l.buf, 0, l.pos)
		l.pos = 0
	case opUp:
		l.recall(l.hi - 1)
	case opDown:
		l.recall(l.hi + 1)
	}
}

func (l *line) insert(rs []rune) {
	l.buf = slices.Insert(l.buf, l.pos, rs...)
	l.pos += len(rs)
}

// recall shows history entry i, keeping the edits of the one left.
func (l *line) recall(i int) {
	if i < 0 || i >= len(l.hist) {
		return
	}
	l.hist[l.hi] = string(l.buf)
	l.hi = i
	l.buf = []rune(l.hist[i])
	l.pos = len(l.buf)
}

// wordStart is the start of the word before the cursor (skipping the
// spaces and punctuation between).
func (l *line) wordStart() int {
	i := l.pos
	for i > 0 && !isWord(l.buf[i-1]) {
		i--
	}
	for i > 0 && isWord(l.buf[i-1]) {
		i--
	}
	return i
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

// refresh redraws the prompt and the line and puts the cursor in place.
func (e *Editor) refresh(l *line) {
	w := 0
	if e.width != nil {
		w = e.width()
	}
	if w <= 0 {
		w = 80
	}
	var b strings.Builder
	if l.row > 0 {
		b.WriteString("\x1b[" + strconv.Itoa(l.row) + "A")
	}
	b.WriteString("\r\x1b[J")
	b.WriteString(l.prompt)
	lay := layout{width: w}
	for _, r := range visible(l.prompt) {
		lay.place(r)
	}
	curRow, curCol := lay.cursor()
	for i, r := range l.buf {
		if i == l.pos {
			curRow, curCol = lay.cursor()
		}
		switch {
		case r == '\n':
			b.WriteString("\r\n")
		case r == '\t':
			b.WriteString(strings.Repeat(" ", tabWidth))
		case RuneWidth(r) > 0:
			b.WriteRune(r)
		}
		lay.place(r)
	}
	endRow, _ := lay.cursor()
	if l.pos == len(l.buf) {
		curRow, curCol = lay.cursor()
	}
	l.wrapped = lay.col == w
	if l.wrapped {
		// The last row is full: the terminal holds the cursor in its last
		// column until the next character. Move it to the next row for real.
		b.WriteString("\r\n")
	}
	if up := endRow - curRow; up > 0 {
		b.WriteString("\x1b[" + strconv.Itoa(up) + "A")
	}
	b.WriteString("\r")
	if curCol > 0 {
		b.WriteString("\x1b[" + strconv.Itoa(curCol) + "C")
	}
	l.row = curRow
	io.WriteString(e.out, b.String())
}

// tabWidth is the number of spaces a tab is shown as.
const tabWidth = 4

// layout follows where each rune lands on the terminal.
type layout struct {
	width    int
	row, col int // col == width: the row is full, the next rune wraps
}

func (y *layout) place(r rune) {
	switch {
	case r == '\n':
		y.row, y.col = y.row+1, 0
		return
	case r == '\t':
		for range tabWidth {
			y.cell(1)
		}
		return
	}
	if w := RuneWidth(r); w > 0 {
		y.cell(w)
	}
}

func (y *layout) cell(w int) {
	if y.col+w > y.width {
		y.row, y.col = y.row+1, 0
	}
	y.col += w
}

// cursor is where the next rune would start.
func (y *layout) cursor() (row, col int) {
	if y.col >= y.width {
		return y.row + 1, 0
	}
	return y.row, y.col
}

// visible returns s without its escape sequences (a prompt's colours).
func visible(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
