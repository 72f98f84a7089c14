package jsonconstraint

// edge is one outgoing byte of a small trie node.
type edge struct {
	b    byte
	next int32
}

// litTrie matches a set of exact byte strings (enum values, true, false,
// null). Node 0 is the root.
type litTrie struct {
	nodes  []litNode
	values [][]byte
}

type litNode struct {
	edges    []edge
	terminal bool
}

func newLitTrie(values [][]byte) *litTrie {
	t := &litTrie{nodes: []litNode{{}}}
	for _, v := range values {
		n := int32(0)
		for _, b := range v {
			next := t.child(n, b)
			if next < 0 {
				next = int32(len(t.nodes))
				t.nodes = append(t.nodes, litNode{})
				t.nodes[n].edges = append(t.nodes[n].edges, edge{b, next})
			}
			n = next
		}
		if !t.nodes[n].terminal {
			t.nodes[n].terminal = true
			t.values = append(t.values, v)
		}
	}
	return t
}

// child returns the node after byte b from node n, or -1.
func (t *litTrie) child(n int32, b byte) int32 {
	for _, e := range t.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}

// keyTrie matches the property names of an object (the bytes between the
// quotes). Node 0 is the root.
type keyTrie struct {
	nodes []keyNode
	all   uint64 // every property's bit
}

type keyNode struct {
	edges []edge
	prop  int32  // property whose name ends here, or -1
	below uint64 // properties whose names pass through here
}

func newKeyTrie(props []prop) *keyTrie {
	t := &keyTrie{nodes: []keyNode{{prop: -1}}}
	for i, p := range props {
		bit := uint64(1) << i
		t.all |= bit
		n := int32(0)
		t.nodes[0].below |= bit
		for j := 0; j < len(p.name); j++ {
			b := p.name[j]
			next := t.child(n, b)
			if next < 0 {
				next = int32(len(t.nodes))
				t.nodes = append(t.nodes, keyNode{prop: -1})
				t.nodes[n].edges = append(t.nodes[n].edges, edge{b, next})
			}
			n = next
			t.nodes[n].below |= bit
		}
		t.nodes[n].prop = int32(i)
	}
	return t
}

func (t *keyTrie) child(n int32, b byte) int32 {
	for _, e := range t.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}
