package tokenizer

import "unicode/utf8"

// seqLen reads the UTF-8 sequence that starts at b[0] the way Rust's
// String::from_utf8_lossy does. It returns the sequence's length and
// whether it is a complete, valid character. When it is not, n is the
// length of the maximal invalid subpart (at least 1), which becomes a single
// U+FFFD; incomplete reports that the input ended while the bytes so far
// were still a valid prefix of some character.
func seqLen(b []byte) (n int, valid, incomplete bool) {
	c := b[0]
	if c < 0x80 {
		return 1, true, false
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c == 0xED:
		need, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 3
	case c == 0xF0:
		need, lo = 4, 0x90
	case c == 0xF4:
		need, hi = 4, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	default: // stray continuation byte, C0, C1 or F5..FF: never valid
		return 1, false, false
	}
	for i := 1; i < need; i++ {
		if i >= len(b) {
			return i, false, true
		}
		x := b[i]
		if i == 1 {
			if x < lo || x > hi {
				return 1, false, false
			}
		} else if x < 0x80 || x > 0xBF {
			return i, false, false
		}
	}
	return need, true, false
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// invalid subpart with one U+FFFD exactly as Rust's String::from_utf8_lossy
// (and so Hugging Face tokenizers' decoders) does. Go's strings.ToValidUTF8
// collapses whole runs of bad bytes into one replacement and so differs.
func appendLossy(dst []byte, b []byte) []byte {
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			dst = append(dst, b[0])
			b = b[1:]
			continue
		}
		n, valid, _ := seqLen(b)
		if valid {
			dst = append(dst, b[:n]...)
		} else {
			dst = append(dst, "\uFFFD"...)
		}
		b = b[n:]
	}
	return dst
}

// completeLen returns the length of the longest prefix of b that ends on a
// character boundary: everything except a trailing sequence that is valid so
// far but cut short, which more bytes could still complete.
func completeLen(b []byte) int {
	// A cut-short sequence is at most 3 bytes long and starts with a lead
	// byte. A lead byte is never part of an earlier sequence, so scanning
	// from anywhere before it finds it as a sequence start.
	i := max(len(b)-3, 0)
	for i < len(b) {
		n, _, incomplete := seqLen(b[i:])
		if incomplete {
			return i
		}
		i += n
	}
	return len(b)
}
