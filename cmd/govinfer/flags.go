package main

import (
	"errors"
	"flag"
	"fmt"
	goio "io"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/internal/bytesize"
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

// usage prints the command's summary (the line "govinfer help" shows for
// it), its synopsis and its flags to standard output.
func (fs *flagSet) usage() {
	fmt.Fprintf(fs.io.out, "govinfer %s - %s\n\nUsage: govinfer %s\n", fs.Name(), summary(fs.Name()), fs.synopsis)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(fs.io.out, "\nFlags:\n")
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

// Parse parses args as flag.FlagSet.Parse does, with errors that name
// flags as they are written (--name) and suggest, for a flag that does
// not exist, the one closest to it.
func (fs *flagSet) Parse(args []string) error {
	err := fs.FlagSet.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		if near := fs.nearest(name); near != "" {
			return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, near)
		}
		return fmt.Errorf("unknown flag --%s", name)
	}
	for _, s := range []string{" for flag -", " for -", "flag needs an argument: -"} {
		msg = strings.Replace(msg, s, s+"-", 1)
	}
	return errors.New(msg)
}

// nearest returns the flag whose name is closest to name, a flag that
// does not exist: one that name begins (the shortest), else one within a
// few typing mistakes (editDistance), or "" when none is near.
func (fs *flagSet) nearest(name string) string {
	best, bestDist := "", 1+len(name)/4 // one mistake in 4 letters, at least one
	bestPrefix := false
	fs.VisitAll(func(f *flag.Flag) {
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			if !bestPrefix || len(f.Name) < len(best) {
				best, bestPrefix = f.Name, true
			}
			return
		}
		if d := editDistance(name, f.Name); !bestPrefix && d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance returns the fewest single-character insertions, deletions,
// substitutions and swaps of neighbours that turn a into b (optimal string
// alignment distance).
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
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

// size is a flag of a size in bytes (bytesize.Parse): plain bytes or a
// number with a unit, at least one byte.
type size[T ~int | ~int64] struct{ n *T }

func (s size[T]) String() string {
	if s.n == nil {
		return ""
	}
	return bytesize.Format(int64(*s.n))
}

func (s size[T]) Set(v string) error {
	n, err := bytesize.Parse(v)
	switch {
	case err != nil:
		return err
	case n < 1:
		return errors.New("want at least one byte")
	case int64(T(n)) != n:
		return fmt.Errorf("%d bytes is too large", n)
	}
	*s.n = T(n)
	return nil
}

// sizeFlag adds a flag of a size in bytes that takes units (1GB = 10^9
// bytes, 1GiB = 2^30); its help says so.
func sizeFlag[T ~int | ~int64](fs *flag.FlagSet, name string, value T, usage string) *T {
	n := value
	fs.Var(size[T]{&n}, name, usage+" (`size`: bytes, or with a unit: 1GB or 1G = 10^9 bytes, 1GiB = 2^30)")
	return &n
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
