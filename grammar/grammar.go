// Package grammar constrains generation to a context-free grammar over
// bytes: regular expressions, vLLM's choice, GBNF (package gbnf) and Lark
// (package lark) all compile to it, so one matcher and one mask
// computation serve them all.
//
// A Grammar is a set of rules, each a regex.Node whose OpRef leaves name
// other rules. Build flattens them: every maximal run of a rule's
// reference-free parts becomes one terminal, compiled to a DFA (package
// regex), and what remains is alternatives of sequences of terminals and
// rule references; repetitions over references become right-recursive
// helper rules. The matcher is a set of threads (a terminal, its DFA state,
// and a stack of return positions), like llama.cpp's grammar stacks: a byte
// advances every thread's DFA, and a thread whose terminal may end also
// continues after it. Stacks are hash-consed, a call in tail position
// pushes nothing (so repetition needs no stack), and left recursion is
// refused at build time, so the closure of a step is finite.
//
// Every rule kept can derive a finite string (rules that cannot are
// dropped, and a start rule that cannot is an error), and every DFA state
// kept can reach an accepting one, so every prefix the matcher accepts can
// be completed: constrained generation never reaches a dead end (given a
// vocabulary that spells every byte, as byte-level BPE vocabularies do).
//
// Masks walk the vocabulary's token trie (jsonconstraint.Walk) with the
// thread set as the automaton's state, and are cached by thread set in the
// grammar, across the generations that share it.
package grammar

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/govinfer/govinfer/grammar/regex"
)

// Limits of Build and of a matcher.
const (
	MaxRules   = 4096 // rules after flattening
	MaxThreads = 4096 // threads of one matcher state; more are dropped (ambiguity that large is a grammar bug)
	maskCache  = 128  // masks a grammar keeps
)

// Rule is one named rule of a grammar.
type Rule struct {
	Name string
	Body *regex.Node
}

// Error is a grammar that does not build: Rule names the rule concerned
// ("" when none), and Pos is the byte offset in the grammar's source when
// known (-1 otherwise).
type Error struct {
	Rule string
	Pos  int
	Msg  string
}

func (e *Error) Error() string {
	s := e.Msg
	if e.Rule != "" {
		s = fmt.Sprintf("rule %q: %s", e.Rule, s)
	}
	if e.Pos >= 0 {
		s = fmt.Sprintf("at byte %d: %s", e.Pos, s)
	}
	return s
}

// Grammar is a compiled grammar. It is safe for concurrent use.
type Grammar struct {
	terms []*regex.DFA
	// Positions: one per element of each alternative.
	elemTerm  []int32 // terminal index, or -1 for a rule reference
	elemRule  []int32 // the rule referenced
	elemNext  []int32 // the next position of the alternative, -1 at its end
	ruleAlts  [][]int32
	names     []string
	startRule int32

	// Byte classes: bytes every terminal treats alike, the bytes of each
	// class as a bit set, and one byte of each.
	classOf    [256]uint8
	nclass     int
	classBytes [][4]uint64
	classRep   []byte
	// minimal is the shortest string of each rule (see Completion).
	minimal [][]byte

	mu       sync.Mutex
	stacks   []stackNode // 0 is the empty stack
	stackIDs map[stackNode]int32
	adv      map[[2]int32][]thread // advance's results by (position, stack)
	// States: thread sets interned as they are reached, with their
	// transitions memoized by byte class (0: not computed, 1: dead, k+2:
	// state k), a DFA built lazily over the grammar.
	sets    [][]thread
	setIDs  map[string]State
	threads int // threads of all the states
	trans   [][]int32
	start   State
	masks   map[State][]uint64
	// threadMasks are the masks of single threads (as states), which
	// masks of sets of threads are unions of.
	threadMasks map[State][]uint64
	infos       map[[2]int32]*termInfo
	maskOf      any // the vocabulary the masks and infos are for
	// loops are the bytes that lead states back to themselves, for the
	// walks that take whole subtrees (see stateLoops).
	loops map[State]*stateLoop
}

// State is a point of a generation under a grammar: the set of threads
// that read the output so far, interned in the grammar, so that it is a
// small comparable value. Dead is the state after a refused byte.
type State int32

// Dead is the state after a byte the grammar does not allow.
const Dead State = -1

// MaxStates and MaxStateThreads bound the states a grammar interns and
// the threads they hold in all (about 12 bytes each), so that a grammar
// ambiguous or deep enough to need more costs bounded memory: it refuses
// the bytes that would pass them (the engine then ends the choice).
const (
	MaxStates       = 1 << 18
	MaxStateThreads = 1 << 21
)

type stackNode struct{ ret, parent int32 }

// thread is one way the input so far can be read: inside terminal
// elemTerm[pos] at DFA state dfa, with stack to return to. pos -1 is the
// end of the grammar.
type thread struct{ pos, dfa, stack int32 }

// Build compiles rules with start as the start rule.
func Build(rules []Rule, start string) (*Grammar, error) {
	b := &builder{g: &Grammar{stackIDs: map[stackNode]int32{}, adv: map[[2]int32][]thread{}}, index: map[string]int32{}}
	b.g.stacks = []stackNode{{-1, -1}}
	for _, r := range rules {
		if _, dup := b.index[r.Name]; dup {
			return nil, &Error{Rule: r.Name, Pos: r.Body.Pos, Msg: "defined twice"}
		}
		b.index[r.Name] = int32(len(b.g.names))
		b.g.names = append(b.g.names, r.Name)
		b.bodies = append(b.bodies, r.Body)
	}
	s, ok := b.index[start]
	if !ok {
		return nil, &Error{Rule: start, Pos: -1, Msg: "the start rule is not defined"}
	}
	b.g.startRule = s
	b.g.ruleAlts = make([][]int32, len(b.bodies))
	for i := 0; i < len(b.bodies); i++ { // bodies grows with helper rules
		if len(b.bodies) > MaxRules {
			return nil, &Error{Pos: -1, Msg: fmt.Sprintf("more than %d rules after expanding repetitions", MaxRules)}
		}
		if err := b.rule(int32(i)); err != nil {
			return nil, err
		}
	}
	if err := b.g.check(); err != nil {
		return nil, err
	}
	g := b.g
	g.classes()
	g.minimalStrings()
	g.setIDs = map[string]State{}
	g.start = g.intern(g.initial())
	return g, nil
}

// classes computes the grammar's byte classes: bytes in one class of every
// terminal.
func (g *Grammar) classes() {
	ids := map[string]uint8{}
	sig := make([]byte, len(g.terms))
	for b := 0; b < 256; b++ {
		for i, d := range g.terms {
			sig[i] = d.Class(byte(b))
		}
		id, ok := ids[string(sig)]
		if !ok {
			id = uint8(len(ids))
			ids[string(sig)] = id
		}
		g.classOf[b] = id
		if int(id) == len(g.classRep) {
			g.classRep = append(g.classRep, byte(b))
			g.classBytes = append(g.classBytes, [4]uint64{})
		}
		g.classBytes[id][b>>6] |= 1 << (b & 63)
	}
	g.nclass = len(ids)
}

// minimalStrings computes each rule's shortest string by a fixed point.
func (g *Grammar) minimalStrings() {
	n := len(g.ruleAlts)
	g.minimal = make([][]byte, n)
	known := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r := range n {
			for _, a := range g.ruleAlts[r] {
				s, ok := g.restMinimal(a, known)
				if ok && (!known[r] || len(s) < len(g.minimal[r])) {
					g.minimal[r], known[r], changed = s, true, true
				}
			}
		}
	}
}

// restMinimal is the shortest string from position p to the end of its
// alternative; false while a rule on the way has no known string.
func (g *Grammar) restMinimal(p int32, known []bool) ([]byte, bool) {
	var out []byte
	for ; p >= 0; p = g.elemNext[p] {
		if t := g.elemTerm[p]; t >= 0 {
			out = append(out, g.terms[t].Shortest(0)...)
			continue
		}
		r := g.elemRule[p]
		if known != nil && !known[r] {
			return nil, false
		}
		out = append(out, g.minimal[r]...)
	}
	return out, true
}

// intern returns the state of a normalized thread set. g.mu is held (or g
// is being built).
func (g *Grammar) intern(th []thread) State {
	k := key(th)
	if s, ok := g.setIDs[k]; ok {
		return s
	}
	if len(g.sets) >= MaxStates || g.threads+len(th) > MaxStateThreads {
		return Dead
	}
	g.threads += len(th)
	s := State(len(g.sets))
	g.sets = append(g.sets, th)
	g.trans = append(g.trans, nil)
	g.setIDs[k] = s
	return s
}

// Start returns the state before any output.
func (g *Grammar) Start() State { return g.start }

// Step returns the state after byte b, or Dead.
func (g *Grammar) Step(s State, b byte) State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stepLocked(s, b)
}

// stepLocked is Step with g.mu held.
func (g *Grammar) stepLocked(s State, b byte) State {
	if s < 0 {
		return Dead
	}
	row := g.trans[s]
	if row == nil {
		row = make([]int32, g.nclass)
		g.trans[s] = row
	}
	c := g.classOf[b]
	if v := row[c]; v != 0 {
		return State(v - 2)
	}
	next := Dead
	if th := g.step(g.sets[s], b, nil); len(th) > 0 {
		next = g.intern(th)
	}
	row[c] = int32(next) + 2
	return next
}

// Complete reports whether the output that led to s is a whole match.
func (g *Grammar) Complete(s State) bool {
	if s < 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return complete(g.sets[s])
}

// CanContinue reports whether some byte may follow in state s.
func (g *Grammar) CanContinue(s State) bool {
	if s < 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	th := g.sets[s]
	return len(th) > 1 || len(th) == 1 && th[0].pos >= 0
}

// Completion returns the shortest bytes that complete a match from s.
func (g *Grammar) Completion(s State) []byte {
	if s < 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var best []byte
	found := false
	for _, t := range g.sets[s] {
		var out []byte
		if t.pos >= 0 {
			out = append(out, g.terms[g.elemTerm[t.pos]].Shortest(t.dfa)...)
			rest, _ := g.restMinimal(g.elemNext[t.pos], nil)
			out = append(out, rest...)
			for st := t.stack; st != 0; st = g.stacks[st].parent {
				rest, _ := g.restMinimal(g.stacks[st].ret, nil)
				out = append(out, rest...)
			}
		}
		if !found || len(out) < len(best) {
			best, found = out, true
		}
	}
	return best
}

type builder struct {
	g      *Grammar
	index  map[string]int32
	bodies []*regex.Node
	dfas   map[*regex.Node]int32
}

func (b *builder) rule(r int32) error {
	for len(b.g.ruleAlts) <= int(r) {
		b.g.ruleAlts = append(b.g.ruleAlts, nil)
	}
	body := b.bodies[r]
	alts := []*regex.Node{body}
	if body.Op == regex.OpAlt && body.HasRef() {
		alts = body.Subs
	}
	for _, a := range alts {
		first, err := b.seq(r, a)
		if err != nil {
			return err
		}
		if first != -2 {
			b.g.ruleAlts[r] = append(b.g.ruleAlts[r], first)
		}
	}
	return nil
}

// seq adds the positions of one alternative and returns its first (-1 for
// an empty alternative, -2 for one that matches nothing).
func (b *builder) seq(r int32, a *regex.Node) (int32, error) {
	parts := []*regex.Node{a}
	if a.Op == regex.OpConcat {
		parts = flattenConcat(a)
	}
	// Elements: runs of reference-free parts become one terminal.
	type elem struct {
		term int32
		rule int32
	}
	var elems []elem
	for i := 0; i < len(parts); {
		if !parts[i].HasRef() {
			j := i
			for j < len(parts) && !parts[j].HasRef() {
				j++
			}
			n := regex.Concat(parts[i:j]...)
			if n.Op == regex.OpEmpty || n.Op == regex.OpConcat && len(n.Subs) == 0 {
				i = j
				continue
			}
			d, err := regex.Compile(n)
			if err != nil {
				var re *regex.Error
				if errors.As(err, &re) && re.Msg == "the pattern matches nothing" {
					return -2, nil
				}
				return 0, &Error{Rule: b.g.names[r], Pos: parts[i].Pos, Msg: err.Error()}
			}
			if d.Final(d.Start()) { // matches only the empty string
				i = j
				continue
			}
			b.g.terms = append(b.g.terms, d)
			elems = append(elems, elem{term: int32(len(b.g.terms) - 1), rule: -1})
			i = j
			continue
		}
		p := parts[i]
		i++
		switch p.Op {
		case regex.OpRef:
			s, ok := b.index[p.Name]
			if !ok {
				return 0, &Error{Rule: b.g.names[r], Pos: p.Pos, Msg: fmt.Sprintf("refers to undefined rule %q", p.Name)}
			}
			elems = append(elems, elem{term: -1, rule: s})
		case regex.OpRepeat:
			sub := p.Subs[0]
			for k := 0; k < p.Min; k++ {
				elems = append(elems, elem{term: -1, rule: b.helper(b.g.names[r], sub)})
			}
			switch {
			case p.Max < 0:
				// star ::= sub star | ε
				h := b.reserve(b.g.names[r])
				b.bodies[h] = regex.Alt(regex.Concat(sub, &regex.Node{Op: regex.OpRef, Name: b.g.names[h]}), &regex.Node{Op: regex.OpEmpty})
				elems = append(elems, elem{term: -1, rule: h})
			case p.Max > p.Min:
				// opt_k ::= sub opt_{k-1} | ε, opt_1 ::= sub | ε
				var prev *regex.Node
				for k := 0; k < p.Max-p.Min; k++ {
					h := b.reserve(b.g.names[r])
					body := sub
					if prev != nil {
						body = regex.Concat(sub, prev)
					}
					b.bodies[h] = regex.Alt(body, &regex.Node{Op: regex.OpEmpty})
					prev = &regex.Node{Op: regex.OpRef, Name: b.g.names[h]}
				}
				elems = append(elems, elem{term: -1, rule: b.index[prev.Name]})
			}
		default:
			elems = append(elems, elem{term: -1, rule: b.helper(b.g.names[r], p)})
		}
	}
	if len(elems) == 0 {
		return -1, nil
	}
	base := int32(len(b.g.elemTerm))
	for k, e := range elems {
		next := int32(-1)
		if k+1 < len(elems) {
			next = base + int32(k) + 1
		}
		b.g.elemTerm = append(b.g.elemTerm, e.term)
		b.g.elemRule = append(b.g.elemRule, e.rule)
		b.g.elemNext = append(b.g.elemNext, next)
	}
	return base, nil
}

func flattenConcat(n *regex.Node) []*regex.Node {
	var out []*regex.Node
	for _, s := range n.Subs {
		if s.Op == regex.OpConcat {
			out = append(out, flattenConcat(s)...)
		} else {
			out = append(out, s)
		}
	}
	return out
}

// reserve adds a helper rule named after its parent and returns it.
func (b *builder) reserve(parent string) int32 {
	h := int32(len(b.g.names))
	name := fmt.Sprintf("%s~%d", parent, h)
	b.index[name] = h
	b.g.names = append(b.g.names, name)
	b.bodies = append(b.bodies, nil)
	return h
}

// helper adds a rule whose body is n.
func (b *builder) helper(parent string, n *regex.Node) int32 {
	if n.Op == regex.OpRef {
		if s, ok := b.index[n.Name]; ok {
			return s
		}
	}
	h := b.reserve(parent)
	b.bodies[h] = n
	return h
}

// check drops the alternatives that can derive no finite string, refuses a
// start rule left without any, and refuses left recursion.
func (g *Grammar) check() error {
	n := len(g.ruleAlts)
	productive := make([]bool, n)
	altOK := func(first int32) bool {
		for p := first; p >= 0; p = g.elemNext[p] {
			if g.elemTerm[p] < 0 && !productive[g.elemRule[p]] {
				return false
			}
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for r := range n {
			if !productive[r] && slices.ContainsFunc(g.ruleAlts[r], altOK) {
				productive[r], changed = true, true
			}
		}
	}
	if !productive[g.startRule] {
		return &Error{Rule: g.names[g.startRule], Pos: -1, Msg: "can never end: every alternative recurses without a way out"}
	}
	for r := range n {
		g.ruleAlts[r] = slices.DeleteFunc(g.ruleAlts[r], func(a int32) bool { return !altOK(a) })
	}
	nullable := make([]bool, n)
	elemNullable := func(p int32) bool {
		if t := g.elemTerm[p]; t >= 0 {
			return g.terms[t].Accept(0)
		}
		return nullable[g.elemRule[p]]
	}
	for changed := true; changed; {
		changed = false
		for r := range n {
			if nullable[r] {
				continue
			}
			for _, a := range g.ruleAlts[r] {
				all := true
				for p := a; p >= 0 && all; p = g.elemNext[p] {
					all = elemNullable(p)
				}
				if all {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// Left recursion: a cycle of rules each reachable from the previous
	// after nullable elements only.
	state := make([]uint8, n) // 0 new, 1 on the path, 2 done
	var visit func(r int32) error
	visit = func(r int32) error {
		state[r] = 1
		for _, a := range g.ruleAlts[r] {
			for p := a; p >= 0; p = g.elemNext[p] {
				if s := g.elemRule[p]; g.elemTerm[p] < 0 {
					if state[s] == 1 {
						return &Error{Rule: g.display(s), Pos: -1, Msg: "is left-recursive (it can reach itself before any input); rewrite it with repetition"}
					}
					if state[s] == 0 {
						if err := visit(s); err != nil {
							return err
						}
					}
				}
				if !elemNullable(p) {
					break
				}
			}
		}
		state[r] = 2
		return nil
	}
	for r := range n {
		if state[r] == 0 {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// display is a rule's name without a helper's suffix.
func (g *Grammar) display(r int32) string {
	name := g.names[r]
	if i := indexByte(name, '~'); i >= 0 {
		return name[:i]
	}
	return name
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// push returns the interned stack of ret above parent. g.mu is held.
func (g *Grammar) push(ret, parent int32) int32 {
	k := stackNode{ret, parent}
	if id, ok := g.stackIDs[k]; ok {
		return id
	}
	id := int32(len(g.stacks))
	g.stacks = append(g.stacks, k)
	g.stackIDs[k] = id
	return id
}

// advance returns the threads that start at position pos (-1: the end of
// an alternative, so return) with stack: each reachable terminal at its
// start, and the end of the grammar if reachable. g.mu is held.
func (g *Grammar) advance(pos, stack int32) []thread {
	key := [2]int32{pos, stack}
	if th, ok := g.adv[key]; ok {
		return th
	}
	var out []thread
	seen := map[[2]int32]bool{}
	var walk func(pos, stack int32)
	walk = func(pos, stack int32) {
		k := [2]int32{pos, stack}
		if seen[k] {
			return
		}
		seen[k] = true
		if pos < 0 {
			if stack == 0 {
				out = append(out, thread{-1, 0, 0})
				return
			}
			n := g.stacks[stack]
			walk(n.ret, n.parent)
			return
		}
		next := g.elemNext[pos]
		if t := g.elemTerm[pos]; t >= 0 {
			d := g.terms[t]
			out = append(out, thread{pos, d.Start(), stack})
			if d.Accept(d.Start()) {
				walk(next, stack)
			}
			return
		}
		inner := stack
		if next >= 0 { // a call in tail position pushes nothing
			inner = g.push(next, stack)
		}
		for _, a := range g.ruleAlts[g.elemRule[pos]] {
			if a < 0 {
				walk(next, stack)
			} else {
				walk(a, inner)
			}
		}
	}
	walk(pos, stack)
	out = normalize(out)
	g.adv[key] = out
	return out
}

// normalize sorts and dedups a thread set and bounds it.
func normalize(th []thread) []thread {
	slices.SortFunc(th, func(a, b thread) int {
		if a.pos != b.pos {
			return int(a.pos - b.pos)
		}
		if a.dfa != b.dfa {
			return int(a.dfa - b.dfa)
		}
		return int(a.stack - b.stack)
	})
	th = slices.Compact(th)
	if len(th) > MaxThreads {
		th = th[:MaxThreads]
	}
	return th
}

// initial returns the threads before any input.
func (g *Grammar) initial() []thread {
	var out []thread
	for _, a := range g.ruleAlts[g.startRule] {
		if a < 0 {
			out = append(out, thread{-1, 0, 0})
		} else {
			out = append(out, g.advance(a, 0)...)
		}
	}
	return normalize(out)
}

// step appends to dst the threads of th after byte c. g.mu is held.
func (g *Grammar) step(th []thread, c byte, dst []thread) []thread {
	for _, t := range th {
		if t.pos < 0 {
			continue
		}
		d := g.terms[g.elemTerm[t.pos]]
		s := d.Step(t.dfa, c)
		if s < 0 {
			continue
		}
		if !d.Final(s) {
			dst = append(dst, thread{t.pos, s, t.stack})
		}
		if d.Accept(s) {
			dst = append(dst, g.advance(g.elemNext[t.pos], t.stack)...)
		}
	}
	if len(dst) > 1 {
		dst = normalize(dst)
	}
	return dst
}

// Run returns the state after text from s (Dead if refused).
func (g *Grammar) Run(s State, text []byte) State {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range text {
		if s = g.stepLocked(s, c); s < 0 {
			return Dead
		}
	}
	return s
}

// Match reports whether the grammar accepts text as a whole.
func (g *Grammar) Match(text []byte) bool { return g.Complete(g.Run(g.start, text)) }

// Prefix reports whether text can be continued into a match.
func (g *Grammar) Prefix(text []byte) bool { return g.Run(g.start, text) != Dead }

// complete reports whether a thread set includes the end of the grammar.
func complete(th []thread) bool { return len(th) > 0 && th[0].pos == -1 }

// States returns how many states the grammar has interned so far.
func (g *Grammar) States() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sets)
}
