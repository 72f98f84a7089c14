package main

import (
	"errors"
	"flag"
	"fmt"
	goio "io"
	"strconv"
	"strings"
	"time"
)

// flagSet is a subcommand's flags with the synopsis its --help shows.
type flagSet struct {
	*flag.FlagSet
	synopsis string
	io       stdio
}

// newFlagSet returns a flag set for a subcommand that reports errors to the
// caller instead of exiting.
func newFlagSet(io stdio, name, synopsis string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(goio.Discard) // parse reports errors in one line
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, synopsis: synopsis, io: io}
}

// usage prints the synopsis and the flags to standard output.
func (fs *flagSet) usage() {
	fmt.Fprintf(fs.io.out, "Usage: govinfer %s\n\nFlags:\n", fs.synopsis)
	fs.SetOutput(fs.io.out)
	fs.PrintDefaults()
	fs.SetOutput(goio.Discard)
}

// parseFlags parses args; it returns done=true with the exit code when the
// command should stop (help requested, or bad flags reported in one line).
func parseFlags(fs *flagSet, io stdio, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.usage()
			return exitOK, true
		}
		fmt.Fprintf(io.err, "govinfer %s: %v (see govinfer %s --help)\n", fs.Name(), err, fs.Name())
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(io.err, "govinfer %s: unexpected argument %q (see govinfer %s --help)\n", fs.Name(), fs.Arg(0), fs.Name())
		return exitUsage, true
	}
	return 0, false
}

// seconds is a duration flag that also takes a plain number of seconds,
// as vLLM's flags do ("30" or "30s").
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s seconds) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		*s.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is neither a number of seconds nor a duration such as 45s", v)
	}
	*s.d = d
	return nil
}

// secondsFlag adds a duration flag that takes seconds or a duration.
func secondsFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(seconds{&d}, name, usage)
	return &d
}

// parseIDs parses a comma-separated list of token ids.
func parseIDs(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("no token ids given")
	}
	parts := strings.Split(s, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("token id %q is not an integer", p)
		}
		ids[i] = v
	}
	return ids, nil
}
