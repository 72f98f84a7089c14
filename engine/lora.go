package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/model"
)

// LoRA is a LoRA adapter a request runs with (Request.LoRA): unmerged, so
// that one step mixes requests of different adapters.
type LoRA struct {
	// Adapter is the adapter attached to the engine's model.
	Adapter *model.Adapter
	// Scale multiplies the adapter's update; 1 runs it as trained.
	Scale float32
	// Digest identifies the adapter's contents (a SHA-256 of its files):
	// the prefix cache keys a prompt's state by the digests and scales of
	// its adapters, so that state computed with one adapter is never
	// resumed with another, in this process or, through the disk tier, a
	// later one.
	Digest [32]byte
	// Name and ID name the adapter in PrefixSpans (KV events' lora_name
	// and lora_id) and in LoRAStats.
	Name string
	ID   int
}

// loraSet identifies the adapters a prompt's state is computed with: a
// SHA-256 of their digests and scales in order, zero for the base model.
type loraSet [32]byte

// loraSetOf returns the set of uses, leaving out those of scale 0 (which
// change nothing, as Sequence.SetAdapters drops them).
func loraSetOf(uses []LoRA) loraSet {
	var set loraSet
	h := sha256.New()
	n := 0
	for _, u := range uses {
		if u.Scale == 0 {
			continue
		}
		n++
		h.Write(u.Digest[:])
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(u.Scale))
		h.Write(b[:])
	}
	if n == 0 {
		return set
	}
	h.Write([]byte("govinfer lora set 1"))
	h.Sum(set[:0])
	return set
}

// seed returns the hash the set's block hashes chain from: 0 for the base
// model, so that its hashes are BlockHashes'.
func (s loraSet) seed() uint64 {
	if s == (loraSet{}) {
		return 0
	}
	return binary.LittleEndian.Uint64(s[:8]) | 1
}

// spanLoRA names a request's adapters in the spans it stores.
func spanLoRA(uses []LoRA) []SpanLoRA {
	var out []SpanLoRA
	for _, u := range uses {
		if u.Scale != 0 {
			out = append(out, SpanLoRA{Name: u.Name, ID: u.ID, Scale: u.Scale})
		}
	}
	return out
}

// SpanLoRA is an adapter the state of a PrefixSpan was computed with.
type SpanLoRA struct {
	Name  string
	ID    int
	Scale float32
}

// LoRAName returns the name KV events give the adapters of a span: the
// one adapter's name, or for several (or a scale other than 1) the names
// joined by "+", each followed by "*scale" where that is not 1; "" for the
// base model.
func LoRAName(ls []SpanLoRA) string {
	if len(ls) == 1 && ls[0].Scale == 1 {
		return ls[0].Name
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.Name
		if l.Scale != 1 {
			parts[i] += "*" + strconv.FormatFloat(float64(l.Scale), 'g', -1, 32)
		}
	}
	return strings.Join(parts, "+")
}

// checkLoRA validates a request's adapters.
func (e *Engine) checkLoRA(uses []LoRA) error {
	for i, u := range uses {
		switch {
		case u.Adapter == nil:
			return fmt.Errorf("engine: adapter %d (%s) is nil", i, u.Name)
		case math.IsNaN(float64(u.Scale)) || math.IsInf(float64(u.Scale), 0):
			return fmt.Errorf("engine: adapter %s: scale %v is not finite", u.Name, u.Scale)
		}
	}
	return nil
}

// loraCounts counts the requests running and waiting per adapter name, for
// LoRAStats.
type loraCounts struct {
	mu      sync.Mutex
	running map[string]int
}

func (c *loraCounts) add(uses []LoRA, d int) {
	if len(uses) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[string]int{}
	}
	for _, u := range uses {
		if c.running[u.Name] += d; c.running[u.Name] <= 0 {
			delete(c.running, u.Name)
		}
	}
}

// LoRAStats is what vLLM's vllm:lora_requests_info gauge reports: the
// adapters of the running requests and of the waiting ones, by name,
// sorted.
type LoRAStats struct {
	Running, Waiting []string
}

// LoRAStats returns the adapters in use by running and waiting requests.
func (e *Engine) LoRAStats() LoRAStats {
	var st LoRAStats
	e.loras.mu.Lock()
	for name := range e.loras.running {
		st.Running = append(st.Running, name)
	}
	e.loras.mu.Unlock()
	seen := map[string]bool{}
	e.mu.Lock()
	for _, s := range e.waiting {
		for _, u := range s.req.LoRA {
			if !seen[u.Name] {
				seen[u.Name] = true
				st.Waiting = append(st.Waiting, u.Name)
			}
		}
	}
	e.mu.Unlock()
	sort.Strings(st.Running)
	sort.Strings(st.Waiting)
	return st
}

// setLoRA makes seq run with r's adapters.
func setLoRA(seq *model.Sequence, uses []LoRA) error {
	if len(uses) == 0 {
		return nil
	}
	mu := make([]model.AdapterUse, len(uses))
	for i, u := range uses {
		mu[i] = model.AdapterUse{Adapter: u.Adapter, Scale: u.Scale}
	}
	return seq.SetAdapters(mu)
}
