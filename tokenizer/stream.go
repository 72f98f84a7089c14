package tokenizer

import "strings"

// Decoder turns generated ids into text as they arrive. Text comes out as
// soon as it is complete UTF-8 (a character split across tokens is held
// until its last byte arrives) and never contains a stop string: text that
// could still be the start of one is held back, and once one appears the
// text before it is returned and the decoder stops. The concatenated output
// of Push and Flush equals Decode of the same ids, cut before the first stop
// string. A Decoder is not safe for concurrent use.
type Decoder struct {
	t           *Tokenizer
	skipSpecial bool
	stop        []string
	maxStop     int

	pending []byte // bytes of an incomplete trailing character
	held    string // decoded text that may be the start of a stop string
	buf     []byte
	stopped bool
	reason  string
}

// NewDecoder returns a streaming decoder. skipSpecial drops special added
// tokens as Decode does; stop lists strings that end the output (empty
// strings are ignored).
func (t *Tokenizer) NewDecoder(skipSpecial bool, stop []string) *Decoder {
	d := &Decoder{t: t, skipSpecial: skipSpecial}
	for _, s := range stop {
		if s != "" {
			d.stop = append(d.stop, s)
			d.maxStop = max(d.maxStop, len(s))
		}
	}
	return d
}

// Push adds one generated id and returns the text that is now safe to show.
// stopped is true once a stop string has been seen: text is what came
// before it, and later calls return "" and true.
func (d *Decoder) Push(id int) (text string, stopped bool) {
	if d.stopped {
		return "", true
	}
	d.pending = d.t.appendToken(d.pending, id, d.skipSpecial)
	n := completeLen(d.pending)
	if n == 0 {
		return "", false
	}
	d.buf = appendLossy(append(d.buf[:0], d.held...), d.pending[:n])
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return d.release(string(d.buf), false)
}

// Flush ends the stream and returns the text still held back; a trailing
// incomplete character becomes U+FFFD, as Decode would make it.
func (d *Decoder) Flush() string {
	if d.stopped {
		return ""
	}
	d.buf = appendLossy(append(d.buf[:0], d.held...), d.pending)
	d.pending = d.pending[:0]
	text, _ := d.release(string(d.buf), true)
	d.held = ""
	return text
}

// Stopped reports whether a stop string has been seen.
func (d *Decoder) Stopped() bool { return d.stopped }

// StopString returns the stop string that ended the output, or "".
func (d *Decoder) StopString() string { return d.reason }

// release returns the part of text that can be shown and keeps the rest.
func (d *Decoder) release(text string, final bool) (string, bool) {
	at, which := -1, ""
	for _, s := range d.stop {
		if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
			at, which = i, s
		}
	}
	if at >= 0 {
		d.stopped, d.reason = true, which
		d.held, d.pending = "", nil
		return text[:at], true
	}
	if final {
		return text, false
	}
	keep := d.holdBack(text)
	d.held = text[len(text)-keep:]
	return text[:len(text)-keep], false
}

// holdBack returns the length of the longest suffix of text that is a
// proper prefix of a stop string.
func (d *Decoder) holdBack(text string) int {
	for n := min(len(text), d.maxStop-1); n > 0; n-- {
		suffix := text[len(text)-n:]
		for _, s := range d.stop {
			if len(s) > n && strings.HasPrefix(s, suffix) {
				return n
			}
		}
	}
	return 0
}
