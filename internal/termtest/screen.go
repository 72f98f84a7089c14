// Package termtest helps test terminal programs: Screen is a small terminal
// emulator that turns the bytes a program writes into the text a person
// would see, and OpenPTY gives a pseudo-terminal to run the program on.
//
// Screen understands what govinfer's terminal code writes: printable UTF-8
// (wide characters take two cells), CR, LF, BS, TAB, BEL, automatic wrap at
// the right margin with the pending-wrap rule of VT100 terminals, cursor
// moves (CSI n A/B/C/D, CSI row;col H), erasing (CSI n K, CSI n J), and it
// ignores colours (CSI ... m) and private modes (CSI ? ... h/l). Lines that
// scroll off the top are kept, so Text shows the whole session.
package termtest

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// Screen is an emulated terminal of fixed width and height.
type Screen struct {
	cols, rows int
	lines      [][]rune // every line, scrollback first; a wide rune's second cell is 0
	top        int      // index in lines of the screen's first row
	row, col   int      // cursor, row relative to top
	pending    bool     // a character was written in the last column: the next one wraps
	partial    []byte   // an incomplete UTF-8 sequence or escape sequence
}

// NewScreen returns an empty screen of cols columns and rows rows.
func NewScreen(cols, rows int) *Screen {
	s := &Screen{cols: cols, rows: rows}
	s.lines = make([][]rune, rows)
	for i := range s.lines {
		s.lines[i] = s.blank()
	}
	return s
}

func (s *Screen) blank() []rune {
	l := make([]rune, s.cols)
	for i := range l {
		l[i] = ' '
	}
	return l
}

// Write interprets p. It never fails.
func (s *Screen) Write(p []byte) (int, error) {
	b := append(s.partial, p...)
	s.partial = nil
	for len(b) > 0 {
		n := s.step(b)
		if n == 0 { // incomplete: wait for more bytes
			s.partial = append([]byte(nil), b...)
			break
		}
		b = b[n:]
	}
	return len(p), nil
}

// step interprets the sequence at the start of b and returns its length, or
// 0 when b holds only the beginning of one.
func (s *Screen) step(b []byte) int {
	switch c := b[0]; {
	case c == '\r':
		s.col, s.pending = 0, false
		return 1
	case c == '\n':
		s.lineFeed()
		s.pending = false
		return 1
	case c == '\b':
		if s.col > 0 {
			s.col--
		}
		s.pending = false
		return 1
	case c == '\t':
		s.col = min((s.col/8+1)*8, s.cols-1)
		return 1
	case c == 0x1b:
		return s.escape(b)
	case c < 0x20 || c == 0x7f:
		return 1 // BEL and other controls: nothing to see
	}
	if !utf8.FullRune(b) {
		return 0
	}
	r, n := utf8.DecodeRune(b)
	s.put(r)
	return n
}

// escape interprets an escape sequence.
func (s *Screen) escape(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	if b[1] != '[' {
		return 2 // two-byte escapes (ESC 7, ESC =, ...): ignored
	}
	end := 2
	for end < len(b) && (b[end] < 0x40 || b[end] > 0x7e) {
		end++
	}
	if end == len(b) {
		return 0
	}
	params, final := string(b[2:end]), b[end]
	if strings.HasPrefix(params, "?") {
		return end + 1 // private modes: bracketed paste, cursor visibility
	}
	var args []int
	for _, f := range strings.Split(params, ";") {
		v, err := strconv.Atoi(f)
		if err != nil {
			v = 0
		}
		args = append(args, v)
	}
	arg := func(i, def int) int {
		if i < len(args) && args[i] > 0 {
			return args[i]
		}
		return def
	}
	switch final {
	case 'A':
		s.row = max(s.row-arg(0, 1), 0)
	case 'B':
		s.row = min(s.row+arg(0, 1), s.rows-1)
	case 'C':
		s.col = min(s.col+arg(0, 1), s.cols-1)
	case 'D':
		s.col = max(s.col-arg(0, 1), 0)
	case 'H':
		s.row, s.col = min(arg(0, 1), s.rows)-1, min(arg(1, 1), s.cols)-1
	case 'K':
		l := s.lines[s.top+s.row]
		from, to := s.col, s.cols
		switch arg(0, 0) {
		case 1:
			from, to = 0, s.col+1
		case 2:
			from = 0
		}
		for i := from; i < to; i++ {
			l[i] = ' '
		}
	case 'J':
		switch arg(0, 0) {
		case 0:
			l := s.lines[s.top+s.row]
			for i := s.col; i < s.cols; i++ {
				l[i] = ' '
			}
			for r := s.row + 1; r < s.rows; r++ {
				s.lines[s.top+r] = s.blank()
			}
		case 2, 3:
			for r := range s.rows {
				s.lines[s.top+r] = s.blank()
			}
		}
	}
	s.pending = false
	return end + 1
}

// lineFeed moves the cursor down, scrolling at the bottom.
func (s *Screen) lineFeed() {
	if s.row < s.rows-1 {
		s.row++
		return
	}
	s.lines = append(s.lines, s.blank())
	s.top++
}

// put writes one printable rune at the cursor.
func (s *Screen) put(r rune) {
	w := RuneWidth(r)
	if w == 0 {
		return
	}
	if s.pending || s.col+w > s.cols {
		s.col = 0
		s.lineFeed()
		s.pending = false
	}
	l := s.lines[s.top+s.row]
	l[s.col] = r
	if w == 2 {
		l[s.col+1] = 0
	}
	s.col += w
	if s.col >= s.cols {
		s.col, s.pending = s.cols-1, true
	}
}

// RuneWidth is the number of cells r takes: 2 for East Asian wide and
// full-width characters, 0 for combining marks and controls, else 1.
func RuneWidth(r rune) int {
	switch {
	case r < 0x20 || r == 0x7f:
		return 0
	case unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// Cursor returns the cursor's row (counted from the screen's first row) and
// column.
func (s *Screen) Cursor() (row, col int) {
	if s.pending {
		return s.row, s.cols // past the last column, before the wrap
	}
	return s.row, s.col
}

// Rows returns the screen's rows, without trailing spaces.
func (s *Screen) Rows() []string {
	out := make([]string, s.rows)
	for i := range s.rows {
		out[i] = lineText(s.lines[s.top+i])
	}
	return out
}

// Text returns every line, scrollback included, without trailing spaces or
// trailing empty lines.
func (s *Screen) Text() string {
	var b strings.Builder
	for _, l := range s.lines {
		b.WriteString(lineText(l))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func lineText(l []rune) string {
	var b strings.Builder
	for _, r := range l {
		if r != 0 {
			b.WriteRune(r)
		}
	}
	return strings.TrimRight(b.String(), " ")
}
