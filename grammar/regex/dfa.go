package regex

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Limits of Compile: automata beyond them are refused (the pattern is
// then a 400 that says why, never a slow request).
const (
	MaxNFAStates = 1 << 17
	MaxDFAStates = 1 << 13
)

// maxWork bounds the NFA states the subset construction visits (a few
// tenths of a second of work), so that no pattern takes long to refuse.
const maxWork = 1 << 23

// ErrTooComplex is wrapped by the errors of patterns whose automaton
// exceeds MaxNFAStates or MaxDFAStates.
var ErrTooComplex = fmt.Errorf("the pattern's automaton is too large")

// nstate is a state of the byte NFA: a byte range to out, or (eps)
// epsilon moves, or the match.
type nstate struct {
	lo, hi byte
	out    int32
	eps    []int32
	isEps  bool
	match  bool
}

type nfa struct {
	states []nstate
	err    error
	ranges map[[3]int32]int32 // byte-range states by (lo, hi, out), shared
}

// addRange returns a state reading [lo, hi] to out, shared with any
// identical one: the UTF-8 sequences of a large class then share their
// continuation-byte suffixes, as RE2's compiler does.
func (a *nfa) addRange(lo, hi byte, out int32) int32 {
	k := [3]int32{int32(lo), int32(hi), out}
	if s, ok := a.ranges[k]; ok {
		return s
	}
	s := a.add(nstate{lo: lo, hi: hi, out: out})
	if a.ranges == nil {
		a.ranges = map[[3]int32]int32{}
	}
	a.ranges[k] = s
	return s
}

func (a *nfa) add(s nstate) int32 {
	if len(a.states) >= MaxNFAStates {
		if a.err == nil {
			a.err = fmt.Errorf("%w: more than %d NFA states (bounded repetitions of large groups multiply)", ErrTooComplex, MaxNFAStates)
		}
		return 0
	}
	a.states = append(a.states, s)
	return int32(len(a.states) - 1)
}

// build compiles n ahead of the state next and returns its start.
func (a *nfa) build(n *Node, next int32) int32 {
	if a.err != nil {
		return 0
	}
	switch n.Op {
	case OpEmpty:
		return next
	case OpNone:
		return a.add(nstate{isEps: true})
	case OpLit:
		cur := next
		for i := len(n.Lit) - 1; i >= 0; i-- {
			cur = a.add(nstate{lo: n.Lit[i], hi: n.Lit[i], out: cur})
		}
		return cur
	case OpClass:
		var starts []int32
		for i := 0; i+1 < len(n.Ranges); i += 2 {
			utf8Sequences(n.Ranges[i], n.Ranges[i+1], func(seq []byteRange) {
				cur := next
				for j := len(seq) - 1; j >= 0; j-- {
					cur = a.addRange(seq[j].lo, seq[j].hi, cur)
				}
				starts = append(starts, cur)
			})
		}
		if len(starts) == 1 {
			return starts[0]
		}
		return a.add(nstate{isEps: true, eps: starts})
	case OpConcat:
		cur := next
		for i := len(n.Subs) - 1; i >= 0; i-- {
			cur = a.build(n.Subs[i], cur)
		}
		return cur
	case OpAlt:
		starts := make([]int32, len(n.Subs))
		for i, s := range n.Subs {
			starts[i] = a.build(s, next)
		}
		return a.add(nstate{isEps: true, eps: starts})
	case OpRepeat:
		sub := n.Subs[0]
		cur := next
		if n.Max < 0 {
			loop := a.add(nstate{isEps: true})
			body := a.build(sub, loop)
			if a.err != nil {
				return 0
			}
			a.states[loop].eps = []int32{body, next}
			cur = loop
		} else {
			for i := 0; i < n.Max-n.Min && a.err == nil; i++ {
				cur = a.add(nstate{isEps: true, eps: []int32{a.build(sub, cur), next}})
			}
		}
		for i := 0; i < n.Min && a.err == nil; i++ {
			cur = a.build(sub, cur)
		}
		return cur
	case OpRef:
		a.err = &Error{n.Pos, fmt.Sprintf("rule %q referenced where only a regular expression may be", n.Name)}
	}
	return 0
}

// DFA is a deterministic automaton over bytes. States are int32s from 0;
// -1 is the dead state, which every refused byte leads to. Every other
// state can reach an accepting one. It is immutable and safe for
// concurrent use.
type DFA struct {
	class  [256]uint8
	nclass int
	trans  []int32 // state*nclass + class
	accept []bool
	final  []bool      // accepting with no byte that continues
	dist   []int32     // fewest bytes to an accepting state
	nextB  []byte      // a byte on such a shortest path
	loops  [][4]uint64 // the bytes leading each state to itself
	// charLoop: every non-ASCII character leads the state to itself.
	charLoop []bool
}

// Compile builds the DFA of n. It fails when n refers to a rule, matches
// nothing, or needs more states than the limits.
func Compile(n *Node) (*DFA, error) {
	a := &nfa{}
	match := a.add(nstate{match: true})
	start := a.build(n, match)
	if a.err != nil {
		return nil, a.err
	}
	// Byte classes: bytes no range tells apart share a class.
	var bound [257]bool
	for _, s := range a.states {
		if !s.isEps && !s.match {
			bound[s.lo], bound[int(s.hi)+1] = true, true
		}
	}
	d := &DFA{}
	c := -1
	for b := 0; b < 256; b++ {
		if b == 0 || bound[b] {
			c++
		}
		d.class[b] = uint8(c)
	}
	d.nclass = c + 1
	rep := make([]byte, d.nclass)
	for b := 255; b >= 0; b-- {
		rep[d.class[b]] = byte(b)
	}

	seen := make([]uint32, len(a.states))
	gen := uint32(0)
	work := 0 // NFA states visited, bounded by maxWork
	closure := func(roots []int32) []int32 {
		gen++
		work += len(roots)
		var out, stack []int32
		stack = append(stack, roots...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] == gen {
				continue
			}
			seen[s] = gen
			work++
			if st := &a.states[s]; st.isEps {
				for i := len(st.eps) - 1; i >= 0; i-- {
					stack = append(stack, st.eps[i])
				}
			} else {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out
	}
	key := func(set []int32) string {
		buf := make([]byte, 4*len(set))
		for i, s := range set {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(s))
		}
		return string(buf)
	}
	ids := map[string]int32{}
	var sets [][]int32
	intern := func(set []int32) (int32, error) {
		if len(set) == 0 {
			return -1, nil
		}
		k := key(set)
		if id, ok := ids[k]; ok {
			return id, nil
		}
		if len(sets) >= MaxDFAStates {
			return 0, fmt.Errorf("%w: more than %d DFA states", ErrTooComplex, MaxDFAStates)
		}
		id := int32(len(sets))
		ids[k] = id
		sets = append(sets, set)
		acc := false
		for _, s := range set {
			acc = acc || a.states[s].match
		}
		d.accept = append(d.accept, acc)
		return id, nil
	}
	if _, err := intern(closure([]int32{start})); err != nil {
		return nil, err
	}
	if len(sets) == 0 {
		return nil, &Error{-1, "the pattern matches nothing"}
	}
	_ = rep
	buckets := make([][]int32, d.nclass) // the NFA states each class leads to
	byBucket := map[string]int32{}
	for i := 0; i < len(sets); i++ {
		for cl := range buckets {
			buckets[cl] = buckets[cl][:0]
		}
		for _, s := range sets[i] {
			st := &a.states[s]
			if st.match {
				continue
			}
			for cl := d.class[st.lo]; ; cl++ {
				buckets[cl] = append(buckets[cl], st.out)
				work++
				if cl == d.class[st.hi] {
					break
				}
			}
		}
		for cl := range buckets {
			// Classes often lead to the same NFA states: their closure
			// and state are computed once.
			bk := key(buckets[cl])
			id, ok := byBucket[bk]
			if !ok {
				c := closure(buckets[cl])
				work += len(c)
				var err error
				if id, err = intern(c); err != nil {
					return nil, err
				}
				byBucket[bk] = id
			}
			d.trans = append(d.trans, id)
		}
		if work > maxWork {
			return nil, fmt.Errorf("%w: building it takes more than %d steps", ErrTooComplex, maxWork)
		}
	}
	return d.prune()
}

// prune drops the states that cannot reach an accepting one, renumbers the
// rest and computes the shortest completions.
func (d *DFA) prune() (*DFA, error) {
	n := len(d.accept)
	// Reverse BFS from the accepting states.
	rev := make([][]int32, n)
	for s := 0; s < n; s++ {
		for cl := 0; cl < d.nclass; cl++ {
			if t := d.trans[s*d.nclass+cl]; t >= 0 {
				rev[t] = append(rev[t], int32(s))
			}
		}
	}
	dist := make([]int32, n)
	for i := range dist {
		dist[i] = -1
	}
	var queue []int32
	for s := 0; s < n; s++ {
		if d.accept[s] {
			dist[s] = 0
			queue = append(queue, int32(s))
		}
	}
	for i := 0; i < len(queue); i++ {
		t := queue[i]
		for _, s := range rev[t] {
			if dist[s] < 0 {
				dist[s] = dist[t] + 1
				queue = append(queue, s)
			}
		}
	}
	if dist[0] < 0 {
		return nil, &Error{-1, "the pattern matches nothing"}
	}
	renum := make([]int32, n)
	m := int32(0)
	for s := 0; s < n; s++ {
		renum[s] = -1
		if dist[s] >= 0 {
			renum[s] = m
			m++
		}
	}
	out := &DFA{class: d.class, nclass: d.nclass, trans: make([]int32, int(m)*d.nclass),
		accept: make([]bool, m), final: make([]bool, m), dist: make([]int32, m), nextB: make([]byte, m),
		loops: make([][4]uint64, m)}
	rep := make([]byte, d.nclass)
	for b := 255; b >= 0; b-- {
		rep[d.class[b]] = byte(b)
	}
	for s := 0; s < n; s++ {
		if renum[s] >= 0 {
			out.dist[renum[s]] = dist[s]
		}
	}
	for s := 0; s < n; s++ {
		ns := renum[s]
		if ns < 0 {
			continue
		}
		out.accept[ns] = d.accept[s]
		any := false
		for cl := 0; cl < d.nclass; cl++ {
			t := d.trans[s*d.nclass+cl]
			if t >= 0 {
				t = renum[t]
			}
			out.trans[int(ns)*d.nclass+cl] = t
			if t >= 0 {
				any = true
			}
		}
		if dist[s] > 0 {
			// The byte of a shortest completion: a letter, digit or
			// other printable character where one will do, so that
			// completions read (and tokenize) as text.
			for _, b := range completionOrder {
				t := out.trans[int(ns)*d.nclass+int(d.class[b])]
				if t >= 0 && out.dist[t] == dist[s]-1 {
					out.nextB[ns] = b
					break
				}
			}
		}
		out.final[ns] = d.accept[s] && !any
	}
	for b := range 256 {
		c := int(out.class[b])
		for s := range out.loops {
			if out.trans[s*out.nclass+c] == int32(s) {
				out.loops[s][b>>6] |= 1 << (b & 63)
			}
		}
	}
	out.charLoop = make([]bool, m)
	for s := range out.charLoop {
		out.charLoop[s] = ReadsEveryChar(int32(s), func(b byte) uint8 { return out.class[b] }, out.Step)
	}
	return out, nil
}

// completionOrder is the order Shortest tries bytes in: lowercase letters,
// uppercase, digits, other printable ASCII, space, then the rest.
var completionOrder = func() []byte {
	var out []byte
	seen := [256]bool{}
	add := func(lo, hi int) {
		for b := lo; b <= hi; b++ {
			if !seen[b] {
				seen[b] = true
				out = append(out, byte(b))
			}
		}
	}
	add('a', 'z')
	add('A', 'Z')
	add('0', '9')
	add('!', '~')
	add(' ', ' ')
	add(0x80, 0xFF)
	add(0, 0xFF)
	return out
}()

// Start is the initial state (0).
func (d *DFA) Start() int32 { return 0 }

// States returns the number of states.
func (d *DFA) States() int { return len(d.accept) }

// Step returns the state after byte b, or -1.
func (d *DFA) Step(s int32, b byte) int32 { return d.trans[int(s)*d.nclass+int(d.class[b])] }

// Accept reports whether s accepts (the text so far matches).
func (d *DFA) Accept(s int32) bool { return d.accept[s] }

// Loops returns the bytes that lead s back to itself, as a bit set (byte
// b is bit b&63 of word b>>6): a text of those bytes alone leaves s
// where it was.
func (d *DFA) Loops(s int32) *[4]uint64 { return &d.loops[s] }

// CharLoop reports whether every non-ASCII character (valid UTF-8,
// surrogates excluded) leads s back to itself, through states that read
// any continuation the character's encoding may have: with Loops, a walk
// can take whole a subtree of tokens that are valid UTF-8 from a
// character boundary.
func (d *DFA) CharLoop(s int32) bool { return d.charLoop[s] }

// utf8Forms are the byte ranges (inclusive [lo, hi] pairs) of the UTF-8
// encodings of the non-ASCII characters, surrogates excluded, a form for
// each lead-byte range.
var utf8Forms = [][][2]byte{
	{{0xC2, 0xDF}, {0x80, 0xBF}},
	{{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
	{{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
	{{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
}

// ReadsEveryChar reports whether every non-ASCII character (valid UTF-8,
// surrogates excluded) leads state s of an automaton back to s through
// live states: step(x, b) is the state after byte b from x (negative:
// dead), and bytes of one class (class(b)) step alike, so the states
// after each byte range of each encoding are followed a class at a time.
func ReadsEveryChar[S ~int32](s S, class func(byte) uint8, step func(S, byte) S) bool {
	for _, form := range utf8Forms {
		set := []S{s}
		for _, r := range form {
			var next []S
			for _, x := range set {
				var seen [256]bool
				for b := int(r[0]); b <= int(r[1]); b++ {
					c := class(byte(b))
					if seen[c] {
						continue
					}
					seen[c] = true
					t := step(x, byte(b))
					if t < 0 {
						return false
					}
					if !slices.Contains(next, t) {
						next = append(next, t)
					}
				}
			}
			set = next
		}
		if len(set) != 1 || set[0] != s {
			return false
		}
	}
	return true
}

// Final reports whether s accepts and no byte can follow.
func (d *DFA) Final(s int32) bool { return d.final[s] }

// Shortest returns the fewest bytes that lead from s to a match.
func (d *DFA) Shortest(s int32) []byte {
	var out []byte
	for s >= 0 && d.dist[s] > 0 {
		b := d.nextB[s]
		out = append(out, b)
		s = d.Step(s, b)
	}
	return out
}

// ShortestLen is len(Shortest(s)).
func (d *DFA) ShortestLen(s int32) int { return int(d.dist[s]) }

// Match reports whether the DFA accepts text.
func (d *DFA) Match(text []byte) bool {
	s := d.Start()
	for _, b := range text {
		if s = d.Step(s, b); s < 0 {
			return false
		}
	}
	return d.accept[s]
}

// Intersect returns the DFA of the texts both a and b accept.
func Intersect(a, b *DFA) (*DFA, error) {
	d := &DFA{}
	pairClass := map[[2]uint8]uint8{}
	var rep []byte
	for c := 0; c < 256; c++ {
		k := [2]uint8{a.class[c], b.class[c]}
		id, ok := pairClass[k]
		if !ok {
			id = uint8(len(pairClass))
			pairClass[k] = id
			rep = append(rep, byte(c))
		}
		d.class[c] = id
	}
	d.nclass = len(rep)
	ids := map[[2]int32]int32{{0, 0}: 0}
	pairs := [][2]int32{{0, 0}}
	for i := 0; i < len(pairs); i++ {
		p := pairs[i]
		d.accept = append(d.accept, a.accept[p[0]] && b.accept[p[1]])
		for _, c := range rep {
			x, y := a.Step(p[0], c), b.Step(p[1], c)
			if x < 0 || y < 0 {
				d.trans = append(d.trans, -1)
				continue
			}
			k := [2]int32{x, y}
			id, ok := ids[k]
			if !ok {
				if len(pairs) >= MaxDFAStates {
					return nil, fmt.Errorf("%w: more than %d DFA states", ErrTooComplex, MaxDFAStates)
				}
				id = int32(len(pairs))
				ids[k] = id
				pairs = append(pairs, k)
			}
			d.trans = append(d.trans, id)
		}
	}
	return d.prune()
}

// MaxShortest returns the longest of the shortest completions over all
// states.
func (d *DFA) MaxShortest() int {
	m := int32(0)
	for _, x := range d.dist {
		m = max(m, x)
	}
	return int(m)
}

// Class returns the byte class of b: bytes of one class lead every state
// to the same state.
func (d *DFA) Class(b byte) uint8 { return d.class[b] }
