package lineedit

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/internal/termtest"
)

// Key sequences as a terminal sends them.
const (
	up, down, right, left = "\x1b[A", "\x1b[B", "\x1b[C", "\x1b[D"
	home, end, del        = "\x1b[H", "\x1b[F", "\x1b[3~"
	ctrlLeft, ctrlRight   = "\x1b[1;5D", "\x1b[1;5C"
	backspace             = "\x7f"
)

// readLines types keys into an editor of the given width and reads lines
// until an error; it returns the lines, the error and the screen.
func readLines(t *testing.T, width int, history []string, keys ...string) ([]string, error, *termtest.Screen) {
	t.Helper()
	scr := termtest.NewScreen(width, 10)
	in := NewInput(strings.NewReader(strings.Join(keys, "")))
	defer in.Close()
	e := New(in, scr, func() int { return width })
	for _, h := range history {
		e.AddHistory(h)
	}
	var lines []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		s, err := e.ReadLine(ctx, "> ")
		if err != nil {
			if s != "" {
				lines = append(lines, s) // what Ctrl-C abandoned
			}
			return lines, err, scr
		}
		lines = append(lines, s)
	}
}

func TestReadLine(t *testing.T) {
	cases := []struct {
		name    string
		history []string
		keys    []string
		want    []string
		err     error
	}{
		{"plain", nil, []string{"hello\r"}, []string{"hello"}, io.EOF},
		{"end of input ends the line", nil, []string{"hello"}, []string{"hello"}, io.EOF},
		{"left and insert", nil, []string{"helo", left, "l", "\r"}, []string{"hello"}, io.EOF},
		{"right past the end", nil, []string{"ab", left, left, right, right, right, "c\r"}, []string{"abc"}, io.EOF},
		{"backspace", nil, []string{"hellp", backspace, "o\r"}, []string{"hello"}, io.EOF},
		{"backspace at the start", nil, []string{"ab", home, backspace, "x\r"}, []string{"xab"}, io.EOF},
		{"home end delete", nil, []string{"xbc", home, del, "a", end, "d\r"}, []string{"abcd"}, io.EOF},
		{"ctrl-a ctrl-e ctrl-b ctrl-f", nil, []string{"bd\x01a\x05\x02\x02\x06c\r"}, []string{"abcd"}, io.EOF},
		{"ctrl-d deletes forward", nil, []string{"abc", home, "\x04\r"}, []string{"bc"}, io.EOF},
		{"ctrl-d on an empty line", nil, []string{"\x04", "never read\r"}, nil, io.EOF},
		{"ctrl-c", nil, []string{"abc\x03"}, []string{"abc"}, ErrInterrupted},
		{"ctrl-c on an empty line", nil, []string{"\x03"}, nil, ErrInterrupted},
		{"ctrl-u ctrl-k", nil, []string{"one two three", left, left, left, left, left, "\x0b", home, right, right, right, right, "\x15\r"}, []string{"two "}, io.EOF},
		{"ctrl-w", nil, []string{"say hello  world", "\x17\x17there\r"}, []string{"say there"}, io.EOF},
		{"word moves", nil, []string{"one two", ctrlLeft, "X", ctrlLeft, ctrlLeft, "Y", ctrlRight, ctrlRight, "Z\r"}, []string{"Yone XtwoZ"}, io.EOF},
		{"alt word moves", nil, []string{"aa bb", "\x1bb", "-", "\x1bf", "+\r"}, []string{"aa -bb+"}, io.EOF},
		{"utf-8", nil, []string{"héllo 中文", left, backspace, "\r"}, []string{"héllo 文"}, io.EOF},
		{"tab", nil, []string{"a\tb\r"}, []string{"a\tb"}, io.EOF},
		{"unknown keys ignored", nil, []string{"a\x1b[15~\x1b[Zb\x07c\r"}, []string{"abc"}, io.EOF},
		{"history up", []string{"first", "second"}, []string{up, "\r", up, up, up, up, "\r"}, []string{"second", "first"}, io.EOF},
		{"history down to the new line", []string{"first"}, []string{"new", up, down, "!\r"}, []string{"new!"}, io.EOF},
		{"history edits kept while browsing", []string{"a", "b"}, []string{up, "X", up, down, "\r"}, []string{"bX"}, io.EOF},
		{"history of several lines", []string{"one\ntwo"}, []string{up, "\r"}, []string{"one\ntwo"}, io.EOF},
		{"paste", nil, []string{"x", "\x1b[200~a\r\nb\tc\x03\rd\x1b[201~", "\r"}, []string{"xa\nb\tc\nd"}, io.EOF},
		{"two lines", nil, []string{"a\rb\n"}, []string{"a", "b"}, io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines, err, scr := readLines(t, 40, c.history, c.keys...)
			if !errors.Is(err, c.err) || strings.Join(lines, "|") != strings.Join(c.want, "|") {
				t.Errorf("got %q, %v; want %q, %v\nscreen:\n%s", lines, err, c.want, c.err, scr.Text())
			}
		})
	}
}

func TestReadLineScreen(t *testing.T) {
	_, _, scr := readLines(t, 40, nil, "helo", left, "l\r", "abc\x03")
	want := "> hello\n> abc^C\n"
	if got := scr.Text(); got != want {
		t.Errorf("screen\n%s\nwant\n%s", got, want)
	}
	// A long line wraps; editing its start redraws every row.
	_, _, scr = readLines(t, 10, nil, "abcdefghijklmnopqrstuvwxyz", home, "12", "\r")
	want = "> 12abcdef\nghijklmnop\nqrstuvwxyz\n>\n"
	if got := scr.Text(); got != want {
		t.Errorf("screen\n%s\nwant\n%s", got, want)
	}
	// A pasted line break starts a row.
	_, _, scr = readLines(t, 10, nil, "\x1b[200~one\ntwo\x1b[201~", "\r")
	if got, want := scr.Text(), "> one\ntwo\n>\n"; got != want {
		t.Errorf("screen\n%s\nwant\n%s", got, want)
	}
}

// TestRedraw applies random edits to random text at random widths and
// checks, after each key, that the screen shows the prompt and the line
// laid out as a terminal wraps them and that the cursor is where it should
// be.
func TestRedraw(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab cd_é中\n\t")
	ops := []op{opInsert, opInsert, opInsert, opPaste, opLeft, opRight, opWordLeft, opWordRight, opHome, opEnd,
		opBackspace, opDelete, opDeleteWordBack, opKillToEnd, opKillToStart, opUp, opDown}
	for trial := range 200 {
		width := 4 + rng.IntN(12)
		scr := termtest.NewScreen(width, 40)
		e := New(nil, scr, func() int { return width })
		prompt := ">> "
		if trial%2 == 1 {
			prompt = "\x1b[1m>\x1b[0m "
		}
		l := &line{prompt: prompt, hist: []string{"hist\nory", "中中中中中中", ""}}
		l.hi = len(l.hist) - 1
		e.refresh(l)
		for step := range 30 {
			k := key{op: ops[rng.IntN(len(ops))]}
			switch k.op {
			case opInsert:
				k.r = alphabet[rng.IntN(len(alphabet))]
			case opPaste:
				for range rng.IntN(12) {
					k.text += string(alphabet[rng.IntN(len(alphabet))])
				}
			}
			l.apply(k)
			e.refresh(l)
			wantRows, row, col := expectScreen(visible(prompt), l.buf, l.pos, width)
			gotRows := scr.Rows()
			for i, w := range wantRows {
				if gotRows[i] != w {
					t.Fatalf("trial %d step %d (width %d, line %q): row %d is %q, want %q\nscreen %q", trial, step, width, string(l.buf), i, gotRows[i], w, gotRows)
				}
			}
			for i := len(wantRows); i < len(gotRows); i++ {
				if gotRows[i] != "" {
					t.Fatalf("trial %d step %d: leftover row %d %q", trial, step, i, gotRows[i])
				}
			}
			if r, c := scr.Cursor(); r != row || c != col {
				t.Fatalf("trial %d step %d (width %d, line %q, pos %d): cursor %d,%d, want %d,%d\nscreen %q", trial, step, width, string(l.buf), l.pos, r, c, row, col, gotRows)
			}
		}
	}
}

// expectScreen lays out prompt+buf the simple way, cell by cell: the rows
// of text and the cursor's row and column for the cursor at pos.
func expectScreen(prompt string, buf []rune, pos, width int) (rows []string, row, col int) {
	rows = []string{""}
	c := 0
	put := func(s string, w int) {
		if c+w > width {
			rows = append(rows, "")
			c = 0
		}
		rows[len(rows)-1] += s
		c += w
	}
	where := func() (int, int) {
		if c == width {
			return len(rows), 0
		}
		return len(rows) - 1, c
	}
	for _, r := range prompt {
		put(string(r), RuneWidth(r))
	}
	for i, r := range buf {
		if i == pos {
			row, col = where()
		}
		switch r {
		case '\n':
			rows = append(rows, "")
			c = 0
		case '\t':
			for range tabWidth {
				put(" ", 1)
			}
		default:
			put(string(r), RuneWidth(r))
		}
	}
	if pos == len(buf) {
		row, col = where()
	}
	for i := range rows {
		rows[i] = strings.TrimRight(rows[i], " ")
	}
	return rows, row, col
}

func TestWaitInterrupt(t *testing.T) {
	pr, pw := io.Pipe()
	in := NewInput(pr)
	defer in.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool)
	go func() { got <- in.WaitInterrupt(ctx) }()
	io.WriteString(pw, "typed ahead")
	time.Sleep(20 * time.Millisecond)
	cancel()
	if <-got {
		t.Fatal("WaitInterrupt reported Ctrl-C that was not typed")
	}
	// What was typed meanwhile is the next line.
	go io.WriteString(pw, "\r")
	e := New(in, io.Discard, nil)
	if s, err := e.ReadLine(context.Background(), "> "); s != "typed ahead" || err != nil {
		t.Fatalf("next line %q, %v; want the typed-ahead text", s, err)
	}
	// Ctrl-C discards what came before it, keeps what follows.
	go io.WriteString(pw, "junk\x03kept\r")
	if !in.WaitInterrupt(context.Background()) {
		t.Fatal("Ctrl-C not seen")
	}
	if s, err := e.ReadLine(context.Background(), "> "); s != "kept" || err != nil {
		t.Fatalf("line after Ctrl-C %q, %v; want kept", s, err)
	}
	// The end of input ends the wait.
	pw.Close()
	if in.WaitInterrupt(context.Background()) {
		t.Fatal("end of input reported as Ctrl-C")
	}
	if _, err := e.ReadLine(context.Background(), "> "); err != io.EOF {
		t.Fatalf("ReadLine after the end: %v, want EOF", err)
	}
}

func TestReadLineContext(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	in := NewInput(pr)
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := New(in, io.Discard, nil).ReadLine(ctx, "> "); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
}

func TestHistoryLimit(t *testing.T) {
	e := New(nil, io.Discard, nil)
	e.MaxHistory = 3
	for _, s := range []string{"a", "b", "b", " ", "c", "d"} {
		e.AddHistory(s)
	}
	if got := strings.Join(e.History(), ","); got != "b,c,d" {
		t.Errorf("history %q, want b,c,d (no repeats, no blanks, the last 3)", got)
	}
}
