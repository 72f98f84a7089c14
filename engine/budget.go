package engine

import (
	"fmt"
	"sync/atomic"
)

// StateBudgetError is Submit's error for a request whose own state could
// never fit the state memory budget: its prompt plus MaxTokens need more
// KV cache and recurrent state than the whole budget holds.
type StateBudgetError struct {
	Tokens int   // prompt plus MaxTokens, capped at the model's context
	Need   int64 // bytes of sequence state those tokens take
	Budget int64 // Config.StateMemory
}

func (e *StateBudgetError) Error() string {
	return fmt.Sprintf("engine: the prompt plus max_tokens (%d tokens) need %s of sequence state, more than the whole state memory budget of %s",
		e.Tokens, FormatBytes(e.Need), FormatBytes(e.Budget))
}

// FormatBytes writes n bytes with a binary unit, as "1.5 GiB".
func FormatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[u])
}

// StateUsage is how the state memory budget is used at one moment.
type StateUsage struct {
	// Budget is Config.StateMemory (0: no limit).
	Budget int64
	// Running is the state reserved by the running requests: each holds
	// its recurrent state and KV caches for its prompt plus MaxTokens
	// from the moment it starts until it ends; and by a waiting
	// request's prefix while it is read from disk.
	Running int64
	// Cached is the prefix cache's memory: evicted first when a request
	// needs room.
	Cached int64
	// CachedPoints is the number of kept points in the prefix cache.
	CachedPoints int
	// Peak is the largest Running+Cached seen since the engine started;
	// it never exceeds Budget.
	Peak int64
}

// budget accounts for all sequence state against Config.StateMemory: the
// running requests' reservations and the prefix cache. Only the engine
// goroutine changes it; Stats reads it through the atomics.
type budget struct {
	limit   int64 // 0: none
	running atomic.Int64
	cached  atomic.Int64
	points  atomic.Int64
	peak    atomic.Int64
}

// fits reports whether n more bytes fit beside what is held.
func (b *budget) fits(n int64) bool {
	return b.limit == 0 || b.running.Load()+b.cached.Load()+n <= b.limit
}

// note records the current use in the peak (which tests hold to the
// limit).
func (b *budget) note() {
	if use := b.running.Load() + b.cached.Load(); use > b.peak.Load() {
		b.peak.Store(use)
	}
}

func (b *budget) usage() StateUsage {
	return StateUsage{Budget: b.limit, Running: b.running.Load(), Cached: b.cached.Load(),
		CachedPoints: int(b.points.Load()), Peak: b.peak.Load()}
}
