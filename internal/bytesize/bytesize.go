// Package bytesize reads sizes in bytes as govinfer's flags take them
// (--state-memory, --max-body-bytes, --media-max-bytes,
// --responses-store-bytes): plain bytes, or a number with a unit.
//
// One rule, the SI and IEC one that Hugging Face and vLLM follow:
// K, M, G and T are powers of 1000 and Ki, Mi, Gi and Ti powers of 1024,
// each with or without a final B, in any case. So 1G = 1GB = 10^9 bytes
// and 1Gi = 1GiB = 2^30 bytes.
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// units maps a lower-case unit to its multiple.
var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// want is the tail of every error: what a size looks like.
const want = "want bytes or a number with a unit, such as 4096, 512MiB or 8GB (K, M, G, T: powers of 1000; KiB, MiB, GiB, TiB: powers of 1024)"

// Parse reads a size in bytes: a number, whole or with a fraction
// ("1.5GiB"), then optionally spaces and a unit (see the package comment).
// A fraction of a byte is dropped. The error says what is wrong, not the
// input, which the caller names (flag does).
func Parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end < 0 {
		end = len(s)
	}
	num, unit := s[:end], strings.TrimSpace(s[end:])
	switch {
	case s == "":
		return 0, errors.New("empty size: " + want)
	case strings.HasPrefix(s, "-"):
		return 0, errors.New("a size must not be negative")
	case num == "" || num == "." || strings.Count(num, ".") > 1:
		return 0, errors.New(want)
	}
	mult, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: %s", unit, want)
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, errors.New(want)
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(v.Num(), v.Denom()) // v is not negative: the quotient is its floor
	if !n.IsInt64() || n.Int64() == math.MaxInt64 {
		return 0, fmt.Errorf("a size must be below 2^63 bytes (8 EiB)")
	}
	return n.Int64(), nil
}

// Format writes n bytes exactly, in the unit that divides it into the
// smallest number, a binary one on a tie: "32MiB", "1GB", "4097". Parse
// reads it back.
func Format(n int64) string {
	best, unit := n, ""
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if n != 0 && n%u.mult == 0 && n/u.mult < best {
			best, unit = n/u.mult, u.name
		}
	}
	return fmt.Sprintf("%d%s", best, unit)
}
