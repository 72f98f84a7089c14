package llm

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/bytesize"
	"github.com/govinfer/govinfer/model"
)

// Defaults of the state memory budget (Options.StateMemoryFraction): the
// share of the memory free once the weights are loaded. Host memory is
// shared with everything else the machine runs; a device's is the
// engine's own.
const (
	DefaultStateMemoryFractionHost   = 0.5
	DefaultStateMemoryFractionDevice = 0.8
	// DefaultStateMemoryBytes is the budget where the host's available
	// memory cannot be read (no /proc/meminfo) and none is given.
	DefaultStateMemoryBytes = 4 << 30
)

// KVCacheTypes maps the names Options.KVCacheType accepts to element types.
var KVCacheTypes = map[string]compute.DType{"f32": compute.F32, "bf16": compute.BF16, "f16": compute.F16}

// ParseStateMemory reads a state memory size as `serve --state-memory`
// takes it: bytes, plain or with a unit as internal/bytesize reads them
// ("256KiB", "8GiB", "8GB" = 8*10^9 bytes), or a fraction in (0, 1] ("0.8")
// of the memory free after loading the weights; a plain number up to 1 is
// a fraction. Exactly one of bytes and fraction is set.
func ParseStateMemory(s string) (bytes int64, fraction float64, err error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil && (v <= 1 || v != math.Trunc(v)) {
		if v > 0 && v <= 1 {
			return 0, v, nil
		}
		return 0, 0, fmt.Errorf("state memory %q: a fraction must be in (0, 1]", s)
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, 0, fmt.Errorf("state memory %q: %w; or a fraction in (0, 1]", s, err)
	}
	if n < 1 {
		return 0, 0, fmt.Errorf("state memory %q: want at least one byte", s)
	}
	return n, 0, nil
}

// stateBudget returns the state memory budget of o for m on be: o's
// bytes, or a fraction of the memory free now that the weights are
// loaded (the device's, or the host's available memory less the weights
// when they are memory-mapped from the checkpoint rather than copied).
func stateBudget(o Options, m *model.Model, be compute.Backend) (int64, error) {
	if o.StateMemory < 0 || o.StateMemoryFraction < 0 || o.StateMemoryFraction > 1 {
		return 0, fmt.Errorf("llm: state memory %d bytes or fraction %v out of range", o.StateMemory, o.StateMemoryFraction)
	}
	if o.StateMemory > 0 {
		if need := minStateMemory(m); o.StateMemory < need {
			return 0, fmt.Errorf("llm: a state memory of %s is below this model's minimum of %s, the state of one sequence of %d tokens (%s of KV cache per token plus %s of Gated DeltaNet state); raise --state-memory",
				sizeInWords(o.StateMemory), sizeInWords(need), minStateTokens(m), formatBytes(m.KVBytesPerToken()), formatBytes(m.RecurrentBytes()))
		}
		return o.StateMemory, nil
	}
	frac := o.StateMemoryFraction
	var free int64
	if mr, ok := be.(compute.MemoryReporter); ok {
		free = mr.FreeMemory()
		if frac == 0 {
			frac = DefaultStateMemoryFractionDevice
		}
	} else {
		avail, err := hostAvailable()
		if err != nil {
			if o.StateMemoryFraction > 0 {
				return 0, fmt.Errorf("llm: a state memory fraction needs the available memory: %w", err)
			}
			return DefaultStateMemoryBytes, nil
		}
		free = avail
		if o.Quantize == "" {
			free -= m.WeightBytes() // mapped, counted as reclaimable cache
		}
		if frac == 0 {
			frac = DefaultStateMemoryFractionHost
		}
	}
	b := int64(float64(free) * frac)
	if need := minStateMemory(m); b < need {
		return 0, fmt.Errorf("llm: %v of the %s of free memory is below this model's minimum state memory of %s, the state of one sequence of %d tokens; free memory or set --state-memory",
			frac, formatBytes(max(free, 0)), sizeInWords(need), minStateTokens(m))
	}
	return b, nil
}

// MinStateTokens is the fewest tokens of one sequence's state (its KV
// caches and Gated DeltaNet state) that a state memory budget must hold
// (fewer where the model's context is shorter): a smaller budget would
// refuse about every request, so Open refuses it.
const MinStateTokens = 256

func minStateTokens(m *model.Model) int { return min(MinStateTokens, m.Config().MaxContext()) }

// minStateMemory is the smallest state memory budget Open takes for m.
func minStateMemory(m *model.Model) int64 { return m.SequenceBytes(minStateTokens(m)) }

// sizeInWords writes n bytes exactly and with a binary unit, as
// "3276800 bytes (3.1 MiB)".
func sizeInWords(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%s)", n, formatBytes(n))
}

// hostAvailable returns /proc/meminfo's MemAvailable in bytes.
func hostAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading MemAvailable: %w", err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

func formatBytes(n int64) string {
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

// StateMemory describes the state memory budget of a Model.
type StateMemory struct {
	// Budget bounds all sequence state: KV caches, recurrent states and
	// cached prefixes.
	Budget int64
	// PerToken is the KV cache of one token (all attention layers);
	// PerSequence the recurrent state every sequence has whatever its
	// length.
	PerToken, PerSequence int64
	// Tokens is how many tokens of state the budget holds in one sequence.
	Tokens int64
	// KVCacheType is the KV cache's element type.
	KVCacheType compute.DType
	// PrefixCache says whether prompt prefixes are reused.
	PrefixCache bool
}

// String describes the budget in one line, for a start-up log.
func (s StateMemory) String() string {
	cache := "prefix cache on"
	if !s.PrefixCache {
		cache = "prefix cache off"
	}
	return fmt.Sprintf("state memory %s holds %d tokens of state (%s KV cache, %s per token, plus %s of recurrent state per sequence); %s",
		formatBytes(s.Budget), s.Tokens, strings.ToLower(s.KVCacheType.String()), formatBytes(s.PerToken), formatBytes(s.PerSequence), cache)
}

// StateMemory returns the model's state memory budget.
func (lm *Model) StateMemory() StateMemory {
	s := StateMemory{Budget: lm.stateMemory, PerToken: lm.m.KVBytesPerToken(), PerSequence: lm.m.RecurrentBytes(),
		KVCacheType: lm.m.KVCacheType(), PrefixCache: lm.prefixCache}
	if s.PerToken > 0 {
		s.Tokens = max(0, s.Budget-s.PerSequence) / s.PerToken
	}
	return s
}

// sequenceTokens returns the most positions one sequence's state can hold
// within budget bytes (model.Model.SequenceBytes), 0 when budget is 0 (no
// limit) or holds the whole context.
func sequenceTokens(m *model.Model, budget int64) int {
	ctxLen := m.Config().MaxContext()
	if budget <= 0 || m.SequenceBytes(ctxLen) <= budget {
		return 0
	}
	lo, hi := 0, ctxLen // SequenceBytes(lo) fits (or lo is 0), SequenceBytes(hi) does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.SequenceBytes(mid) <= budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// answerRoom returns the most tokens an answer to a prompt of n tokens can
// have: what the maximum model length leaves after the prompt and, under a
// state memory budget, what one sequence's state can ever hold (the last
// sampled token is never fed, so it takes no state).
func (lm *Model) answerRoom(n int) int {
	room := lm.maxModelLen - n
	if lm.seqTokens > 0 {
		room = min(room, lm.seqTokens-n+1)
	}
	return room
}
