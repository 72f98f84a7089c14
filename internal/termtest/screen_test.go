package termtest

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestScreen(t *testing.T) {
	cases := []struct {
		name, in string
		rows     []string
		row, col int
	}{
		{"text", "ab\r\ncd", []string{"ab", "cd", ""}, 1, 2},
		{"lf keeps the column", "ab\ncd", []string{"ab", "  cd", ""}, 1, 4},
		{"pending wrap", "abcde", []string{"abcde", "", ""}, 0, 5},
		{"wrap", "abcdef", []string{"abcde", "f", ""}, 1, 1},
		{"cr cancels the wrap", "abcde\rx", []string{"xbcde", "", ""}, 0, 1},
		{"wide", "ab中文", []string{"ab中", "文", ""}, 1, 2},
		{"erase line", "abcd\x1b[2D\x1b[K", []string{"ab", "", ""}, 0, 2},
		{"erase below", "ab\r\ncd\r\nef\x1b[2A\r\x1b[J", []string{"", "", ""}, 0, 0},
		{"moves", "a\x1b[2B\x1b[3Cb\x1b[1Ac", []string{"a", "    c", "    b"}, 1, 5},
		{"home and clear", "abc\x1b[H\x1b[2Jz", []string{"z", "", ""}, 0, 1},
		{"colours ignored", "\x1b[2mdim\x1b[0m \x1b[?2004hx", []string{"dim x", "", ""}, 0, 5},
		{"backspace", "abc\b\bX", []string{"aXc", "", ""}, 0, 2},
	}
	for _, c := range cases {
		s := NewScreen(5, 3)
		// Byte by byte: sequences split across writes must work too.
		for i := range len(c.in) {
			s.Write([]byte{c.in[i]})
		}
		if got := s.Rows(); strings.Join(got, "|") != strings.Join(c.rows, "|") {
			t.Errorf("%s: rows %q, want %q", c.name, got, c.rows)
		}
		if r, col := s.Cursor(); r != c.row || col != c.col {
			t.Errorf("%s: cursor %d,%d, want %d,%d", c.name, r, col, c.row, c.col)
		}
	}
}

func TestScreenScrollback(t *testing.T) {
	s := NewScreen(10, 2)
	io.WriteString(s, "one\r\ntwo\r\nthree\r\nfour")
	if got := s.Rows(); got[0] != "three" || got[1] != "four" {
		t.Errorf("rows %q", got)
	}
	if got, want := s.Text(), "one\ntwo\nthree\nfour\n"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
}

func TestOpenPTY(t *testing.T) {
	pty, tty, err := OpenPTY(40, 10)
	if err != nil {
		t.Skip(err)
	}
	defer pty.Close()
	defer tty.Close()
	go io.WriteString(pty, "hi\n")
	buf := make([]byte, 16)
	tty.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := tty.Read(buf)
	if err != nil || string(buf[:n]) != "hi\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}
