package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"4096B", 4096},
		{"1K", 1000},
		{"1k", 1000},
		{"1KB", 1000},
		{"1kb", 1000},
		{"1KiB", 1024},
		{"1Ki", 1024},
		{"1kib", 1024},
		{"256KiB", 256 << 10},
		{"1M", 1e6},
		{"1MB", 1e6},
		{"1MiB", 1 << 20},
		{"32MiB", 32 << 20},
		{"1G", 1e9},
		{"1GB", 1e9},
		{"1gb", 1e9},
		{"1GiB", 1 << 30},
		{"1Gi", 1 << 30},
		{"8GiB", 8 << 30},
		{"1T", 1e12},
		{"1TB", 1e12},
		{"1TiB", 1 << 40},
		{"1.5MiB", 3 << 19},
		{"1.5 MiB", 3 << 19},
		{" 2 GB ", 2e9},
		{".5KiB", 512},
		{"1.KiB", 1024},
		{"1.0001KiB", 1024}, // a fraction of a byte is dropped
		{"2.5GB", 2500000000},
		{"9223372036854775806", 1<<63 - 2},
		{"8388607.999TiB", 9223372035755264180},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty size"},
		{"  ", "empty size"},
		{"lots", "want bytes or a number with a unit"},
		{"GiB", "want bytes or a number with a unit"},
		{"-1GiB", "must not be negative"},
		{"-5", "must not be negative"},
		{"8XB", `unknown unit "XB"`},
		{"8 gigabytes", `unknown unit "gigabytes"`},
		{"1PiB", `unknown unit "PiB"`},
		{"1e9", `unknown unit "e9"`},
		{"1.2.3MiB", "want bytes"},
		{".", "want bytes"},
		{"1 2", `unknown unit "2"`},
		{"0x10", `unknown unit "x10"`},
		{"8388608TiB", "below 2^63"},
		{"9223372036854775807", "below 2^63"},
		{"99999999999999999999999", "below 2^63"},
	} {
		got, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %d, %v; want an error with %q", c.in, got, err, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1: "1", 1000: "1KB", 1024: "1KiB", 4097: "4097", 32 << 20: "32MiB", 1e9: "1GB",
		3 << 29: "1536MiB", 1 << 40: "1TiB", 5e12: "5TB", 1<<63 - 1: "9223372036854775807"} {
		got := Format(n)
		if got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
		if back, err := Parse(got); (err != nil || back != n) && n != 1<<63-1 {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, back, err)
		}
	}
}
