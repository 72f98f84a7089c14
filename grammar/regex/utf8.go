package regex

import "unicode/utf8"

// byteRange is an inclusive range of bytes.
type byteRange struct{ lo, hi byte }

// utf8Sequences calls emit with the byte-range sequences whose
// concatenations are exactly the UTF-8 encodings of the runes in [lo, hi]
// (surrogates excluded), as in RE2's and Rust regex's UTF-8 compilers.
func utf8Sequences(lo, hi rune, emit func([]byteRange)) {
	if lo > hi {
		return
	}
	if lo <= 0xD7FF && hi >= 0xE000 {
		utf8Sequences(lo, 0xD7FF, emit)
		utf8Sequences(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && hi <= 0xDFFF {
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return
	}
	// Split where the encoded length changes.
	for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			utf8Sequences(lo, b, emit)
			utf8Sequences(b+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byteRange{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, (hi&^m)-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range seq {
		seq[i] = byteRange{a[i], b[i]}
	}
	emit(seq)
}
