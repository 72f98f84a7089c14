package llm

import (
	"fmt"
	"log"
	"os"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/internal/diskfree"
	"github.com/govinfer/govinfer/internal/prefixdisk"
)

// The prefix cache's disk tier (Options.PrefixCacheDir): prompt states
// leaving memory are written to a directory and read back by later
// requests, and by later processes, bit for bit (engine.DiskTier).

// DefaultPrefixCacheDiskFraction is the share of the free space of
// Options.PrefixCacheDir's file system that the disk tier takes when
// Options.PrefixCacheDisk is zero.
const DefaultPrefixCacheDiskFraction = 0.5

// DefaultPrefixCacheDiskBytes is the disk tier's budget where the free
// space cannot be told.
const DefaultPrefixCacheDiskBytes = 16 << 30

// PrefixDiskUsage is the disk tier's state (Stats.PrefixDisk).
type PrefixDiskUsage = engine.DiskUsage

// PrefixCacheDiskBudget returns the disk tier's budget in dir when none is
// given: DefaultPrefixCacheDiskFraction of the free space there, or
// DefaultPrefixCacheDiskBytes where that cannot be told.
func PrefixCacheDiskBudget(dir string) int64 {
	if free, ok := diskfree.Bytes(dir); ok {
		return max(int64(float64(free)*DefaultPrefixCacheDiskFraction), 1)
	}
	return DefaultPrefixCacheDiskBytes
}

// stateKey is what identifies a model's prefix states beyond what the
// engine adds (the backend, the KV cache type, the model's shapes): each
// field changes the numbers. A new one is a field here and a line in
// bytes.
type stateKey struct {
	checkpoint [32]byte // prefixdisk.CheckpointID of the checkpoint
	mmproj     [32]byte // of an mmproj file, when hasMMProj
	hasMMProj  bool
	quantize   string
	lora       string // the adapters merged into the weights: digests and scales
}

// bytes encodes the key, one "name value" line per field.
func (k stateKey) bytes() []byte {
	b := fmt.Appendf(nil, "checkpoint %x\nquantize %s\nlora %s\n", k.checkpoint, k.quantize, k.lora)
	if k.hasMMProj {
		b = fmt.Appendf(b, "mmproj %x\n", k.mmproj)
	}
	return b
}

// prefixDiskTier returns the engine's disk tier for the checkpoint in dir
// opened with o, or nil without Options.PrefixCacheDir. Its key is the
// checkpoint's identity (its weights sampled, prefixdisk.CheckpointID), an
// mmproj file's (the vision tower makes image states), the quantization,
// and the LoRA adapters merged into the weights (merged: their digests
// and scales; unmerged adapters key their requests' states themselves,
// engine.LoRA.Digest): stateKey. The engine adds the backend, the KV cache
// type and the model's shapes.
func prefixDiskTier(dir string, o Options, merged string) (*engine.DiskTier, error) {
	if o.PrefixCacheDir == "" {
		return nil, nil
	}
	if o.NoPrefixCache {
		return nil, fmt.Errorf("llm: a prefix cache directory needs the prefix cache")
	}
	if o.PrefixCacheDisk < 0 {
		return nil, fmt.Errorf("llm: the prefix cache's disk budget must not be negative, got %d", o.PrefixCacheDisk)
	}
	if err := os.MkdirAll(o.PrefixCacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("llm: prefix cache directory: %w", err)
	}
	key := stateKey{quantize: o.Quantize, lora: merged}
	var err error
	if key.checkpoint, err = prefixdisk.CheckpointID(dir); err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	if o.MMProj != "" {
		if key.mmproj, err = prefixdisk.CheckpointID(o.MMProj); err != nil {
			return nil, fmt.Errorf("llm: %w", err)
		}
		key.hasMMProj = true
	}
	budget := o.PrefixCacheDisk
	if budget == 0 {
		budget = PrefixCacheDiskBudget(o.PrefixCacheDir)
	}
	logf := o.PrefixCacheLog
	if logf == nil {
		logf = log.Printf
	}
	return &engine.DiskTier{Dir: o.PrefixCacheDir, Budget: budget, Key: key.bytes(), Logf: logf}, nil
}

// checkPrefixCacheHost checks Options.PrefixCacheHost.
func checkPrefixCacheHost(o Options) error {
	switch {
	case o.PrefixCacheHost < 0:
		return fmt.Errorf("llm: the prefix cache's host memory must not be negative, got %d", o.PrefixCacheHost)
	case o.PrefixCacheHost > 0 && o.NoPrefixCache:
		return fmt.Errorf("llm: prefix cache host memory needs the prefix cache")
	}
	return nil
}

// PrefixCacheHost describes the host tier, for a start-up line: its
// budget; "" without one.
func (lm *Model) PrefixCacheHost() string {
	h := lm.eng.Stats().Host
	if h.Budget == 0 {
		return ""
	}
	return fmt.Sprintf("prefix cache in host memory under the device's: budget %s", engine.FormatBytes(h.Budget))
}

// PrefixHostUsage is the host tier's state (Stats.PrefixHost).
type PrefixHostUsage = engine.HostUsage

// PrefixCacheDisk describes the disk tier, for a start-up line: where it
// is, its budget and what it holds; "" without one.
func (lm *Model) PrefixCacheDisk() string {
	d := lm.eng.Stats().Disk
	if d.Budget == 0 {
		return ""
	}
	return fmt.Sprintf("prefix cache on disk: %s, budget %s, holding %s (%d states, %d KV blocks)",
		lm.prefixDir, engine.FormatBytes(d.Budget), engine.FormatBytes(d.Bytes), d.States, d.KVFiles)
}
