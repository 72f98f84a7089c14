package outparse

// watcher finds a set of tags in a byte stream (Aho-Corasick): its state
// is the longest suffix of the input that is a prefix of some tag, as an
// index into a dense transition table. It is immutable once built.
type watcher struct {
	tags []string
	next [][256]int16 // state, byte -> state
	hit  []int8       // state -> the tag it completes, or -1
}

// newWatcher builds a watcher of tags, none of which may be a proper
// suffix of a prefix of another (true of the Qwen3.5 tags: each starts
// with '<' and holds no other '<').
func newWatcher(tags ...string) *watcher {
	// States are the distinct prefixes of the tags; state 0 is "".
	prefixes := []string{""}
	index := map[string]int{"": 0}
	for _, t := range tags {
		for i := 1; i <= len(t); i++ {
			if _, ok := index[t[:i]]; !ok {
				index[t[:i]] = len(prefixes)
				prefixes = append(prefixes, t[:i])
			}
		}
	}
	w := &watcher{tags: tags, next: make([][256]int16, len(prefixes)), hit: make([]int8, len(prefixes))}
	for s, p := range prefixes {
		w.hit[s] = -1
		for k, t := range tags {
			if p == t {
				w.hit[s] = int8(k)
			}
		}
		for b := range 256 {
			// The longest suffix of p+b that is a prefix of a tag; after a
			// complete tag the watcher starts over.
			text := p + string([]byte{byte(b)})
			if w.hit[s] >= 0 {
				text = string([]byte{byte(b)})
			}
			for i := 0; i <= len(text); i++ {
				if j, ok := index[text[i:]]; ok {
					w.next[s][b] = int16(j)
					break
				}
			}
		}
	}
	return w
}

// step advances state s by b and returns the new state and the tag it
// completes, or -1.
func (w *watcher) step(s int16, b byte) (int16, int) {
	n := w.next[s][b]
	return n, int(w.hit[n])
}
