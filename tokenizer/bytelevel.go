package tokenizer

// byteLevel holds GPT-2's bytes_to_unicode table, which byte-level BPE
// vocabularies are written in: every byte maps to one printable rune (the
// printable Latin-1 bytes to themselves, the rest to U+0100 and up, so a
// space is 'Ġ' and '\n' is 'Ċ').
type byteLevel struct {
	toRune [256]rune   // byte -> symbol
	toByte [324]int16  // symbol -> byte, -1 for runes that are not symbols (all symbols are below 324)
	symbol [256]string // byte -> symbol as a string, for vocabulary look-ups
}

// newByteLevel builds the table exactly as GPT-2's bytes_to_unicode does.
func newByteLevel() *byteLevel {
	bl := &byteLevel{}
	for i := range bl.toByte {
		bl.toByte[i] = -1
	}
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		bl.toRune[b] = r
		bl.toByte[r] = int16(b)
		bl.symbol[b] = string(r)
	}
	return bl
}

// decodeToken turns a vocabulary entry back into the bytes it stands for.
// Like the Hugging Face ByteLevel decoder, a token with any rune outside
// the table is taken as its own UTF-8 bytes instead (added tokens such as
// "<|im_end|>" are made only of table runes and map to themselves).
func (bl *byteLevel) decodeToken(tok string) []byte {
	return bl.appendToken(make([]byte, 0, len(tok)), tok)
}

// appendToken appends the bytes of tok (see decodeToken) to dst.
func (bl *byteLevel) appendToken(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(bl.toByte) || bl.toByte[r] < 0 {
			return append(dst[:start], tok...)
		}
		dst = append(dst, byte(bl.toByte[r]))
	}
	return dst
}
