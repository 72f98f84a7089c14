package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/govinfer/govinfer/llm"
)

// prefixDiskFlags are --prefix-cache-dir, --prefix-cache-disk and
// --prefix-cache-host, which serve and chat share
// (llm.Options.PrefixCacheDir, PrefixCacheDisk, PrefixCacheHost).
type prefixDiskFlags struct {
	dir  *string
	disk *int64
	host *int64
}

func addPrefixDiskFlags(fs *flag.FlagSet) prefixDiskFlags {
	return prefixDiskFlags{
		dir: fs.String("prefix-cache-dir", "", "keep prompt states leaving memory in this `directory`, and resume from them later, after a restart too "+
			"(exactly: the same tokens and logits as computing them; default: off). One process per model uses a directory"),
		disk: sizeFlag(fs, "prefix-cache-disk", int64(0), fmt.Sprintf("most disk the --prefix-cache-dir files take, the least recently used going first (default: %v of the free space there)",
			llm.DefaultPrefixCacheDiskFraction)),
		host: sizeFlag(fs, "prefix-cache-host", int64(0), "with --backend vulkan, keep prompt states evicted from the device's memory (--state-memory) in this much host memory, "+
			"between it and --prefix-cache-dir, and upload them back for the requests that resume from them (exactly; default: off). "+
			"On the CPU backend --state-memory is host memory already and this flag is refused: raise --state-memory instead"),
	}
}

// options sets o's disk tier from the flags, logging skipped files to log.
func (f prefixDiskFlags) options(o *llm.Options, log io.Writer, cmd string) {
	o.PrefixCacheDir, o.PrefixCacheDisk, o.PrefixCacheLog = *f.dir, *f.disk, f.logf(log, cmd)
	o.PrefixCacheHost = *f.host
}

// logf returns the disk tier's log (llm.Options.PrefixCacheLog): lines
// on w prefixed by the command.
func (f prefixDiskFlags) logf(w io.Writer, cmd string) func(string, ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, "govinfer "+cmd+": "+format+"\n", args...) }
}
