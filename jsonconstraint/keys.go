package jsonconstraint

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/govinfer/govinfer/grammar/regex"
)

// maxKeyPatterns bounds the patternProperties of one object schema.
const maxKeyPatterns = 64

// keyMatcher reads the keys of an object with patternProperties: a DFA
// over the product of the patterns' DFAs (and of the characters a key
// holds unescaped), whose states say which patterns match the key so far.
// A key may end where exactly one pattern matches (its schema then holds
// the value), or none when the object allows additional properties; a key
// several patterns match would need the intersection of their schemas,
// and is not written. States from which no key can end are dropped.
type keyMatcher struct {
	class  [256]uint8
	nclass int
	trans  []int32  // state*nclass + class; -1: no key continues so
	match  []uint64 // the patterns matching at each state
	end    []bool   // a key may end at each state
}

// keyChars are the characters a key is written with: no quote, backslash
// or control character (keys are written without escapes).
var keyChars = &regex.Node{Op: regex.OpClass, Ranges: []rune{' ', '!', '#', '[', ']', 0x10FFFF}}

// compileKeyPattern compiles one patternProperties pattern: a search
// unless anchored, as JSON Schema has it, over the characters of a key.
func compileKeyPattern(p string) (*regex.DFA, error) {
	n, err := regex.Parse(p, true)
	if err != nil {
		return nil, err
	}
	d, err := regex.Compile(n)
	if err != nil {
		return nil, err
	}
	chars, err := regex.Compile(regex.Repeat(keyChars, 0, -1))
	if err != nil {
		return nil, err
	}
	return regex.Intersect(d, chars)
}

// newKeyMatcher builds the key automaton of pats; others says whether a
// key no pattern matches may end (additional properties allowed). It
// returns nil when no key can end at all.
func newKeyMatcher(pats []*regex.DFA, others bool) (*keyMatcher, error) {
	chars, err := regex.Compile(regex.Repeat(keyChars, 0, -1))
	if err != nil {
		return nil, err
	}
	dfas := append(slices.Clone(pats), chars) // the last: the key's characters
	k := len(pats)
	m := &keyMatcher{}
	classIDs := map[string]uint8{}
	var reps []byte
	sig := make([]byte, len(dfas))
	for b := range 256 {
		for i, d := range dfas {
			sig[i] = d.Class(byte(b))
		}
		id, ok := classIDs[string(sig)]
		if !ok {
			id = uint8(len(classIDs))
			classIDs[string(sig)] = id
			reps = append(reps, byte(b))
		}
		m.class[b] = id
	}
	m.nclass = len(reps)
	key := func(t []int32) string {
		buf := make([]byte, 4*len(t))
		for i, s := range t {
			buf[4*i], buf[4*i+1], buf[4*i+2], buf[4*i+3] = byte(s), byte(s>>8), byte(s>>16), byte(s>>24)
		}
		return string(buf)
	}
	start := make([]int32, len(dfas))
	ids := map[string]int32{key(start): 0}
	tuples := [][]int32{start}
	for q := 0; q < len(tuples); q++ {
		t := tuples[q]
		var match uint64
		for i := range k {
			if t[i] >= 0 && dfas[i].Accept(t[i]) {
				match |= 1 << i
			}
		}
		m.match = append(m.match, match)
		// (The last component accepts between characters only.)
		m.end = append(m.end, dfas[k].Accept(t[k]) && (bits.OnesCount64(match) == 1 || match == 0 && others))
		for _, b := range reps {
			next := make([]int32, len(dfas))
			alive := false
			for i, d := range dfas {
				next[i] = -1
				if t[i] >= 0 {
					next[i] = d.Step(t[i], b)
				}
				alive = alive || i < k && next[i] >= 0
			}
			if next[k] < 0 || !alive && !others {
				m.trans = append(m.trans, -1)
				continue
			}
			id, ok := ids[key(next)]
			if !ok {
				if len(tuples) >= regex.MaxDFAStates {
					return nil, fmt.Errorf("%w: more than %d states for the keys of patternProperties", regex.ErrTooComplex, regex.MaxDFAStates)
				}
				id = int32(len(tuples))
				ids[key(next)] = id
				tuples = append(tuples, next)
			}
			m.trans = append(m.trans, id)
		}
	}
	// Drop the states from which no key can end.
	n := len(tuples)
	live := slices.Clone(m.end)
	for changed := true; changed; {
		changed = false
		for s := range n {
			if live[s] {
				continue
			}
			for c := range m.nclass {
				if t := m.trans[s*m.nclass+c]; t >= 0 && live[t] {
					live[s], changed = true, true
					break
				}
			}
		}
	}
	if !live[0] {
		return nil, nil
	}
	for i, t := range m.trans {
		if t >= 0 && !live[t] {
			m.trans[i] = -1
		}
	}
	return m, nil
}

// step returns the state after byte b, or -1.
func (m *keyMatcher) step(s int32, b byte) int32 { return m.trans[int(s)*m.nclass+int(m.class[b])] }

// patternOf returns the pattern whose schema holds the value of a key
// ended at state s: -1 for none (an additional property), -2 when the key
// may not end there.
func (m *keyMatcher) patternOf(s int32) int {
	switch {
	case s < 0 || !m.end[s]:
		return -2
	case m.match[s] == 0:
		return -1
	}
	return bits.TrailingZeros64(m.match[s])
}

// keyCompletionOrder is the order a key's completion tries bytes in:
// letters, digits, other printable ASCII, then the rest.
var keyCompletionOrder = func() []byte {
	var out []byte
	seen := [256]bool{}
	for _, r := range [][2]int{{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'!', '~'}, {0, 255}} {
		for b := r[0]; b <= r[1]; b++ {
			if !seen[b] {
				seen[b] = true
				out = append(out, byte(b))
			}
		}
	}
	return out
}()

// patternKeyCompletion returns the shortest bytes (and the closing quote)
// that end the key being read in an object with patternProperties, so
// that the object accepts it: a breadth-first search over the key
// automaton's state and the node of the declared names' trie, which must
// not end on the name of a property already present. false when none
// exists (the automaton keeps no such state).
func (s *state) patternKeyCompletion() ([]byte, bool) {
	n := s.top.n
	m := n.keyM
	type at struct{ d, t int32 }
	type item struct {
		at
		prev int32
		b    byte
	}
	good := func(a at) bool {
		if a.t >= 0 {
			if p := n.keys.nodes[a.t].prop; p >= 0 {
				return s.top.used&(1<<p) == 0
			}
		}
		return a.d >= 0 && m.end[a.d]
	}
	queue := []item{{at: at{s.lx.dfa, s.lx.t}, prev: -1}}
	seen := map[at]bool{queue[0].at: true}
	for i := 0; i < len(queue); i++ {
		if good(queue[i].at) {
			var out []byte
			for j := i; queue[j].prev >= 0; j = int(queue[j].prev) {
				out = append(out, queue[j].b)
			}
			slices.Reverse(out)
			return append(out, '"'), true
		}
		cur := queue[i].at
		for _, b := range keyCompletionOrder {
			next := at{-1, -1}
			if cur.d >= 0 {
				next.d = m.step(cur.d, b)
			}
			if cur.t >= 0 {
				next.t = n.keys.child(cur.t, b)
			}
			// (The declared names' bytes are valid in a key, and the
			// automaton's are: either may lead.)
			if next.d < 0 && (next.t < 0 || n.keys.nodes[next.t].below&^s.top.used == 0) || seen[next] {
				continue
			}
			seen[next] = true
			queue = append(queue, item{at: next, prev: int32(i), b: b})
		}
	}
	return nil, false
}

// maxCompletion bounds the bytes a key's completion takes from any state
// of m (the most, over the states, of the fewest to an end), plus one to
// step off a declared name.
func (m *keyMatcher) maxCompletion() int {
	n := len(m.end)
	rev := make([][]int32, n)
	for s := range n {
		for c := range m.nclass {
			if t := m.trans[s*m.nclass+c]; t >= 0 {
				rev[t] = append(rev[t], int32(s))
			}
		}
	}
	dist := make([]int, n)
	var queue []int32
	for s := range dist {
		dist[s] = -1
		if m.end[s] {
			dist[s] = 0
			queue = append(queue, int32(s))
		}
	}
	most := 0
	for i := 0; i < len(queue); i++ {
		t := queue[i]
		most = max(most, dist[t])
		for _, s := range rev[t] {
			if dist[s] < 0 {
				dist[s] = dist[t] + 1
				queue = append(queue, s)
			}
		}
	}
	return most + 1
}
