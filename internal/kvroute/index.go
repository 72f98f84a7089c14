// Package kvroute is test tooling for prefix-aware routing: an index of
// which replica holds which prompt prefix, rebuilt from the replicas' KV
// events the way the llm-d router's precise prefix scorer builds it, and
// the replay of multi-turn conversations over several servers behind
// scripts/routereplay. It is not part of the server.
package kvroute

import (
	"fmt"
	"sync"

	"github.com/govinfer/govinfer/kvevents"
)

// Index maps prompt blocks to the pods that hold them, from KV events.
// As the llm-d router does, it recomputes its own block keys from each
// BlockStored's token_ids (and extra_keys, for blocks holding an image:
// Hasher.BlocksExtra), chained from the key of the parent block (a
// BlockStored whose parent it does not know is skipped), and keeps the
// engine's hashes only to find those keys again (parents, removals). It
// also keeps the spans the events announced, for SpanMatch. It is safe for
// concurrent use.
type Index struct {
	hasher *kvevents.Hasher

	mu   sync.Mutex
	pods map[string]*podIndex
}

// podIndex is one pod's part of the index.
type podIndex struct {
	keyOf   map[uint64]uint64 // engine hash -> router key
	held    map[uint64]int    // router key -> how many engine blocks hold it
	spanEnd map[uint64]bool   // router keys that end an announced span
}

// NewIndex returns an empty index whose keys are computed with h (the
// router's hash seed, model name and block size).
func NewIndex(h *kvevents.Hasher) *Index {
	return &Index{hasher: h, pods: map[string]*podIndex{}}
}

func (x *Index) pod(name string) *podIndex {
	p := x.pods[name]
	if p == nil {
		p = &podIndex{keyOf: map[uint64]uint64{}, held: map[uint64]int{}, spanEnd: map[uint64]bool{}}
		x.pods[name] = p
	}
	return p
}

// Apply applies a batch of a pod's events. It returns an error for an
// event it cannot index (a block size other than the router's, a
// BlockStored whose parent it does not know); the other events still
// apply.
func (x *Index) Apply(pod string, b kvevents.Batch) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pod(pod)
	var errs []error
	for _, ev := range b.Events {
		switch ev.Tag {
		case kvevents.TagAllBlocksCleared:
			x.pods[pod] = nil
			delete(x.pods, pod)
			p = x.pod(pod)
		case kvevents.TagBlockRemoved:
			for _, h := range ev.Hashes {
				if k, ok := p.keyOf[h]; ok {
					delete(p.keyOf, h)
					if p.held[k]--; p.held[k] <= 0 {
						delete(p.held, k)
						delete(p.spanEnd, k)
					}
				}
			}
		case kvevents.TagBlockStored:
			if ev.BlockSize != x.hasher.BlockSize() || len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
				errs = append(errs, fmt.Errorf("pod %s: a span of %d blocks of %d tokens with %d token ids (the index uses blocks of %d)",
					pod, len(ev.Hashes), ev.BlockSize, len(ev.Tokens), x.hasher.BlockSize()))
				continue
			}
			parent := x.hasher.Root()
			if ev.HasParent {
				k, ok := p.keyOf[ev.Parent]
				if !ok {
					errs = append(errs, fmt.Errorf("pod %s: a span whose parent %d is not indexed", pod, ev.Parent))
					continue
				}
				parent = k
			}
			keys, err := x.hasher.BlocksExtra(nil, parent, ev.Tokens, ev.ExtraKeys)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for i, h := range ev.Hashes {
				if _, dup := p.keyOf[h]; !dup {
					p.keyOf[h] = keys[i]
					p.held[keys[i]]++
				}
			}
			p.spanEnd[keys[len(keys)-1]] = true
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kvroute: %w (and %d more)", errs[0], len(errs)-1)
	}
	return nil
}

// Match returns, for each pod holding the prompt's first block, how many
// of its leading blocks the pod holds, as the router scores pods.
func (x *Index) Match(prompt []int) map[string]int {
	keys := x.hasher.Keys(prompt)
	x.mu.Lock()
	defer x.mu.Unlock()
	m := map[string]int{}
	for name, p := range x.pods {
		n := 0
		for n < len(keys) && p.held[keys[n]] > 0 {
			n++
		}
		if n > 0 {
			m[name] = n
		}
	}
	return m
}

// SpanMatch returns how many leading tokens of the prompt the pod can
// skip according to its events: the end of the longest chain of whole
// announced spans (from the prompt's start) that the prompt matches. An
// engine that announces exactly its resumable points resumes there.
func (x *Index) SpanMatch(pod string, prompt []int) int {
	keys := x.hasher.Keys(prompt)
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pods[pod]
	if p == nil {
		return 0
	}
	end := 0
	for i, k := range keys {
		if p.held[k] == 0 {
			break
		}
		if p.spanEnd[k] {
			end = i + 1
		}
	}
	return end * x.hasher.BlockSize()
}
