package machine

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDetectCPU(t *testing.T) {
	c := DetectCPU()
	if c.Model == "" || c.Arch != runtime.GOARCH || c.LogicalCPUs < 1 {
		t.Errorf("implausible CPU: %+v", c)
	}
	if runtime.GOARCH == "arm64" && !c.Has("ASIMD") {
		t.Errorf("arm64 without ASIMD: %v", c.Features)
	}
	if c.Has("AVX512BW") && !c.Has("AVX512F") {
		t.Errorf("AVX512BW without AVX512F: %v", c.Features)
	}
	t.Logf("%+v", c)
}

// TestReadProbes checks that every read loop the CPU can run loads every
// byte: its XOR of the buffer is the Go loop's.
func TestReadProbes(t *testing.T) {
	buf := make([]byte, 3*1024)
	for i := range buf {
		buf[i] = byte(rand.Uint32())
	}
	for _, p := range readProbes() {
		for _, n := range []int{p.block, 2 * p.block, len(buf) / p.block * p.block} {
			w := uint64(0)
			for i := 0; i < n; i += 8 {
				for j := range 8 {
					w ^= uint64(buf[i+j]) << (8 * j)
				}
			}
			if got := p.read(buf[:n]); got != w {
				t.Errorf("%s over %d bytes: %#x, want %#x", p.name, n, got, w)
			}
		}
	}
}

// TestComputeProbes checks that every compute loop the CPU can run does
// the iterations it is asked for.
func TestComputeProbes(t *testing.T) {
	ps := append(append(append(fmaProbes(), bf16Probes()...), int8Probes()...), amxProbes()...)
	for _, p := range ps {
		for _, n := range []int{1, 7, 1000} {
			if got, want := p.run(n), p.perIter*float32(n); got != want {
				t.Errorf("%s, %d iterations: %v, want %v", p.name, n, got, want)
			}
		}
	}
	names := []string{}
	for _, p := range ps {
		names = append(names, p.name)
	}
	t.Logf("compute probes: %s", strings.Join(names, "; "))
}

// TestRates checks that each figure is positive and plausible for a CPU of
// today: more than 0.1 GB/s or GFLOP/s, less than 10 TB/s or 100 TFLOP/s.
func TestRates(t *testing.T) {
	threads := min(runtime.NumCPU(), 2)
	check := func(what string, r Rate, lo, hi float64) {
		t.Helper()
		if !(r.Value > lo && r.Value < hi) || r.Probe == "" || r.Threads < 1 {
			t.Errorf("%s: implausible %v", what, r)
		}
		t.Logf("%s: %v", what, r)
	}
	buf := NewReadBuffer(8 << 20)
	check("read 1 thread", buf.Bandwidth(1, 2, 0), 0.1, 1e4)
	check("read", buf.Bandwidth(threads, 2, 0), 0.1, 1e4)
	check("fma f32", FMAF32(threads, 2, 2*time.Millisecond), 0.1, 1e5)
	if r, ok := DotBF16(threads, 2, 2*time.Millisecond); ok {
		check("dot bf16", r, 0.1, 1e5)
	} else if HasDotBF16() {
		t.Errorf("HasDotBF16 but DotBF16 measured nothing")
	}
	if r, ok := DotInt8(threads, 2, 2*time.Millisecond); ok {
		check("dot int8", r, 0.1, 1e6)
	} else if HasDotInt8() {
		t.Errorf("HasDotInt8 but DotInt8 measured nothing")
	}
	if r, ok := TileBF16(threads, 2, 2*time.Millisecond); ok {
		check("tile bf16", r, 0.1, 1e6)
	} else if HasTileBF16() {
		t.Errorf("HasTileBF16 but TileBF16 measured nothing")
	}
}

// TestMeasure checks that the whole probe, with its defaults, takes less
// than two seconds (up to four under load).
func TestMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates and reads up to 1 GiB")
	}
	r := Measure(Options{})
	if r.ReadOne.Value <= 0 || r.Read.Value <= 0 || r.FMAOne.Value <= 0 || r.FMA.Value <= 0 || r.BF16 != HasDotBF16() ||
		(r.BF16 && (r.DotBF16.Value <= 0 || r.DotBF16One.Value <= 0)) || r.Int8 != HasDotInt8() ||
		(r.Int8 && (r.DotInt8.Value <= 0 || r.DotInt8One.Value <= 0)) || r.AMX != HasTileBF16() ||
		(r.AMX && (r.TileBF16.Value <= 0 || r.TileBF16One.Value <= 0)) {
		t.Errorf("implausible report: %+v", r)
	}
	// Two seconds on a machine of its own; twice that where other work
	// shares the cores.
	switch {
	case r.Elapsed > 4*time.Second:
		t.Errorf("Measure took %v, want < 2s", r.Elapsed)
	case r.Elapsed > 2*time.Second:
		t.Logf("Measure took %v, want < 2s on an idle machine", r.Elapsed)
	}
	t.Logf("%+v", r)
}

func TestDefaultReadBytes(t *testing.T) {
	for _, c := range []struct {
		l3, cores, want int
	}{
		{0, 0, 512 << 20},          // unknown L3
		{32 << 20, 2, 512 << 20},   // a small VM
		{32 << 20, 96, 1536 << 20}, // 12 core complexes of 32 MiB
		{96 << 20, 96, 2 << 30},    // capped
	} {
		if got := DefaultReadBytes(CPU{L3: c.l3, PhysicalCores: c.cores}); got != c.want {
			t.Errorf("L3 %d MiB, %d cores: %d MiB, want %d MiB", c.l3>>20, c.cores, got>>20, c.want>>20)
		}
	}
}

// TestInt8AVX2 checks that Options.Int8AVX2 picks the AVX2 int8 loop
// wherever an int8 loop runs (every CPU with AVX512_VNNI has AVX2), and
// that the loop is measured.
func TestInt8AVX2(t *testing.T) {
	ps := int8ProbesFor(true, false)
	if len(ps) == 0 != (len(int8Probes()) == 0) {
		t.Fatalf("AVX2 int8 loops %d, int8 loops %d", len(ps), len(int8Probes()))
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.name, "avx2 ") {
			t.Errorf("Int8AVX2 picks %s", p.name)
		}
	}
	if len(ps) > 0 {
		r := peak(ps[0], 1, 2, 2*time.Millisecond)
		if !(r.Value > 0.1 && r.Value < 1e6) || r.Probe != ps[0].name {
			t.Errorf("AVX2 int8 peak: %v", r)
		}
		t.Logf("AVX2 int8 peak: %v", r)
	}
}

// TestInt8AVXVNNI checks that Options.Int8AVXVNNI picks the AVX-VNNI
// loop (VEX VPDPBUSD ymm) where the CPU has AVX-VNNI, else the AVX2 one,
// and that the loop is measured: each instruction adds 4 to a lane, which
// the loop's result checks.
func TestInt8AVXVNNI(t *testing.T) {
	ps := int8ProbesFor(true, true)
	if len(ps) == 0 {
		if len(int8Probes()) > 0 {
			t.Fatal("no int8 loop with Int8AVXVNNI")
		}
		t.Skip("no int8 loop")
	}
	want := "avx2 "
	if slices.ContainsFunc(int8Probes(), func(p computeProbe) bool { return strings.HasPrefix(p.name, "avx_vnni ") }) {
		want = "avx_vnni "
	}
	if !strings.HasPrefix(ps[0].name, want) {
		t.Fatalf("Int8AVXVNNI picks %s, want %s", ps[0].name, want)
	}
	if got := ps[0].run(3); got != 3*ps[0].perIter {
		t.Errorf("%s: 3 iterations give %v, want %v", ps[0].name, got, 3*ps[0].perIter)
	}
	r := peak(ps[0], 1, 2, 2*time.Millisecond)
	if !(r.Value > 0.1 && r.Value < 1e6) || r.Probe != ps[0].name {
		t.Errorf("int8 peak: %v", r)
	}
	t.Logf("int8 peak: %v", r)
}
