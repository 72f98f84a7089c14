package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/govinfer/govinfer/llm"
)

// prefixDiskFlags are --prefix-cache-dir and --prefix-cache-disk, which
// serve and chat share (llm.Options.PrefixCacheDir, PrefixCacheDisk).
type prefixDiskFlags struct {
	dir  *string
	disk *int64
}

func addPrefixDiskFlags(fs *flag.FlagSet) prefixDiskFlags {
	return prefixDiskFlags{
		dir: fs.String("prefix-cache-dir", "", "keep prompt states leaving memory in this `directory`, and resume from them later, after a restart too "+
			"(exactly: the same tokens and logits as computing them; default: off). One process per model uses a directory"),
		disk: sizeFlag(fs, "prefix-cache-disk", int64(0), fmt.Sprintf("most disk the --prefix-cache-dir files take, the least recently used going first (default: %v of the free space there)",
			llm.DefaultPrefixCacheDiskFraction)),
	}
}

// options sets o's disk tier from the flags, logging skipped files to log.
func (f prefixDiskFlags) options(o *llm.Options, log io.Writer, cmd string) {
	o.PrefixCacheDir, o.PrefixCacheDisk, o.PrefixCacheLog = *f.dir, *f.disk, f.logf(log, cmd)
}

// logf returns the disk tier's log (llm.Options.PrefixCacheLog): lines
// on w prefixed by the command.
func (f prefixDiskFlags) logf(w io.Writer, cmd string) func(string, ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, "govinfer "+cmd+": "+format+"\n", args...) }
}
