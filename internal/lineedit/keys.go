package lineedit

import (
	"bytes"
	"context"
	"strings"
	"unicode/utf8"
)

// op is an editing action.
type op uint8

const (
	opNone op = iota
	opInsert
	opPaste
	opEnter
	opInterrupt
	opEOF // Ctrl-D: leave on an empty line, else delete forward
	opLeft
	opRight
	opWordLeft
	opWordRight
	opHome
	opEnd
	opBackspace
	opDelete
	opDeleteWordBack
	opKillToEnd
	opKillToStart
	opUp
	opDown
	opClearScreen
)

// key is one decoded key press (or paste).
type key struct {
	op   op
	r    rune   // opInsert
	text string // opPaste
}

// Escape sequences of bracketed paste.
const (
	pasteStart = "\x1b[200~"
	pasteEnd   = "\x1b[201~"
)

// controls maps single control bytes to actions, as readline binds them.
var controls = map[byte]op{
	0x01: opHome,           // Ctrl-A
	0x02: opLeft,           // Ctrl-B
	0x03: opInterrupt,      // Ctrl-C
	0x04: opEOF,            // Ctrl-D
	0x05: opEnd,            // Ctrl-E
	0x06: opRight,          // Ctrl-F
	0x08: opBackspace,      // Ctrl-H
	0x0a: opEnter,          // Ctrl-J
	0x0b: opKillToEnd,      // Ctrl-K
	0x0c: opClearScreen,    // Ctrl-L
	0x0d: opEnter,          // Enter
	0x0e: opDown,           // Ctrl-N
	0x10: opUp,             // Ctrl-P
	0x15: opKillToStart,    // Ctrl-U
	0x17: opDeleteWordBack, // Ctrl-W
	0x7f: opBackspace,      // Backspace
}

// csiKeys maps the parameters and final byte of CSI sequences to actions.
var csiKeys = map[string]op{
	"A": opUp, "B": opDown, "C": opRight, "D": opLeft, "H": opHome, "F": opEnd,
	"1~": opHome, "7~": opHome, "4~": opEnd, "8~": opEnd, "3~": opDelete,
	"1;5C": opWordRight, "1;5D": opWordLeft, "1;3C": opWordRight, "1;3D": opWordLeft,
}

// readKey decodes the next key press. Unknown sequences come back as opNone.
func (e *Editor) readKey(ctx context.Context) (key, error) {
	b, err := e.in.readByte(ctx)
	if err != nil {
		return key{}, err
	}
	switch {
	case b == 0x1b:
		return e.readEscape(ctx)
	case b == '\t':
		return key{op: opInsert, r: '\t'}, nil
	case b < 0x20 || b == 0x7f:
		return key{op: controls[b]}, nil
	case b < utf8.RuneSelf:
		return key{op: opInsert, r: rune(b)}, nil
	}
	// A multi-byte character: its first byte says how many follow.
	buf := []byte{b}
	for !utf8.FullRune(buf) {
		c, err := e.in.readByte(ctx)
		if err != nil {
			return key{}, err
		}
		buf = append(buf, c)
	}
	r, _ := utf8.DecodeRune(buf)
	return key{op: opInsert, r: r}, nil
}

// readEscape decodes what follows an ESC byte.
func (e *Editor) readEscape(ctx context.Context) (key, error) {
	b, err := e.in.readByte(ctx)
	if err != nil {
		return key{}, err
	}
	switch b {
	case '[':
		var seq []byte
		for {
			c, err := e.in.readByte(ctx)
			if err != nil {
				return key{}, err
			}
			seq = append(seq, c)
			if c >= 0x40 && c <= 0x7e || len(seq) > 16 {
				break
			}
		}
		if string(seq) == pasteStart[2:] {
			text, err := e.readPaste(ctx)
			return key{op: opPaste, text: text}, err
		}
		return key{op: csiKeys[string(seq)]}, nil
	case 'O': // SS3: arrows and Home/End in application mode
		c, err := e.in.readByte(ctx)
		if err != nil {
			return key{}, err
		}
		return key{op: csiKeys[string(c)]}, nil
	case 'b':
		return key{op: opWordLeft}, nil // Alt-B
	case 'f':
		return key{op: opWordRight}, nil // Alt-F
	case 0x7f:
		return key{op: opDeleteWordBack}, nil // Alt-Backspace
	}
	return key{}, nil
}

// readPaste reads a bracketed paste up to its end marker and returns its
// text with line ends as "\n" and other control characters but tabs
// dropped.
func (e *Editor) readPaste(ctx context.Context) (string, error) {
	var buf []byte
	for !bytes.HasSuffix(buf, []byte(pasteEnd)) {
		c, err := e.in.readByte(ctx)
		if err != nil {
			return "", err
		}
		buf = append(buf, c)
	}
	s := strings.TrimSuffix(string(buf), pasteEnd)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return s, nil
}
