package half

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// format describes a 16-bit float format for the reference conversions.
type format struct {
	name     string
	manBits  int    // stored mantissa bits
	bias     int    // exponent bias
	expMask  uint16 // exponent field, in place
	infBits  uint16 // +Inf pattern
	toF32    func(uint16) float32
	fromF32  func(float32) uint16
	maxExpOK int // largest biased exponent of a finite value
}

var formats = []format{
	{name: "f16", manBits: 10, bias: 15, expMask: 0x7c00, infBits: 0x7c00, toF32: F16ToF32, fromF32: F32ToF16, maxExpOK: 30},
	{name: "bf16", manBits: 7, bias: 127, expMask: 0x7f80, infBits: 0x7f80, toF32: BF16ToF32, fromF32: F32ToBF16, maxExpOK: 254},
}

// refValue is the exact value of the non-NaN pattern h, computed from the
// format definition in float64 (independent of the code under test).
func (f format) refValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>f.manBits) & (int(f.expMask) >> f.manBits)
	man := float64(h & (1<<f.manBits - 1))
	switch {
	case exp == int(f.expMask)>>f.manBits:
		return math.Inf(int(sign))
	case exp == 0:
		return sign * math.Ldexp(man, 1-f.bias-f.manBits)
	}
	return sign * math.Ldexp(1+man/float64(int(1)<<f.manBits), exp-f.bias)
}

func (f format) isNaN(h uint16) bool {
	return h&f.expMask == f.expMask && h&^(f.expMask|0x8000) != 0
}

// ladder is every non-negative finite value of a format in increasing order,
// followed by +Inf standing at 2^(emax+1), where round-to-nearest-even puts
// it (the largest finite pattern is odd, Inf is even).
type ladder struct {
	bits []uint16
	vals []float64
}

func (f format) ladder() ladder {
	var l ladder
	for h := uint16(0); h < f.infBits; h++ {
		l.bits = append(l.bits, h)
		l.vals = append(l.vals, f.refValue(h))
	}
	l.bits = append(l.bits, f.infBits)
	l.vals = append(l.vals, math.Ldexp(1, f.maxExpOK-f.bias+1))
	return l
}

// nearest is the reference rounding: the ladder entry nearest to x, ties to
// the even pattern.
func (l ladder) nearest(x float32) uint16 {
	var sign uint16
	v := float64(x)
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	n := len(l.vals)
	if v >= l.vals[n-1] {
		return sign | l.bits[n-1]
	}
	i := sort.SearchFloat64s(l.vals, v) // first vals[i] >= v
	if l.vals[i] == v {
		return sign | l.bits[i]
	}
	lo, hi := l.vals[i-1], l.vals[i]
	switch {
	case v-lo < hi-v:
		return sign | l.bits[i-1]
	case v-lo > hi-v:
		return sign | l.bits[i]
	case l.bits[i-1]&1 == 0:
		return sign | l.bits[i-1]
	}
	return sign | l.bits[i]
}

func TestToF32Exhaustive(t *testing.T) {
	for _, f := range formats {
		for i := 0; i < 1<<16; i++ {
			h := uint16(i)
			got := f.toF32(h)
			if f.isNaN(h) {
				if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (h&0x8000 != 0) {
					t.Fatalf("%s %#04x: got %v, want NaN with the same sign", f.name, h, got)
				}
				continue
			}
			want := f.refValue(h)
			if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("%s %#04x: got %v, want %v", f.name, h, got, want)
			}
		}
	}
}

func TestRoundTripExhaustive(t *testing.T) {
	for _, f := range formats {
		for i := 0; i < 1<<16; i++ {
			h := uint16(i)
			back := f.fromF32(f.toF32(h))
			if f.isNaN(h) {
				if !f.isNaN(back) || back&0x8000 != h&0x8000 {
					t.Fatalf("%s NaN %#04x came back as %#04x", f.name, h, back)
				}
				continue
			}
			if back != h {
				t.Fatalf("%s %#04x came back as %#04x", f.name, h, back)
			}
		}
	}
}

// TestRoundingAtMidpoints checks every midpoint between neighbouring values
// of each format, and the float32 values either side of it: this is where
// round-to-nearest-even can go wrong.
func TestRoundingAtMidpoints(t *testing.T) {
	for _, f := range formats {
		l := f.ladder()
		for i := 1; i < len(l.vals); i++ {
			mid := float32((l.vals[i-1] + l.vals[i]) / 2)
			if float64(mid) != (l.vals[i-1]+l.vals[i])/2 {
				t.Fatalf("%s: midpoint %v not exact in float32", f.name, mid)
			}
			for _, x := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))), float32(l.vals[i-1])} {
				for _, s := range []float32{x, -x} {
					if got, want := f.fromF32(s), l.nearest(s); got != want {
						t.Fatalf("%s(%v = %#08x): got %#04x, want %#04x", f.name, s, math.Float32bits(s), got, want)
					}
				}
			}
		}
	}
}

func TestRoundingRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for _, f := range formats {
		l := f.ladder()
		for range n {
			x := math.Float32frombits(rng.Uint32())
			got := f.fromF32(x)
			if math.IsNaN(float64(x)) {
				if !f.isNaN(got) || (got&0x8000 != 0) != math.Signbit(float64(x)) {
					t.Fatalf("%s(NaN %#08x) = %#04x, want NaN with the same sign", f.name, math.Float32bits(x), got)
				}
				continue
			}
			if want := l.nearest(x); got != want {
				t.Fatalf("%s(%v = %#08x): got %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
			}
		}
	}
}

func TestKnownValues(t *testing.T) {
	cases := []struct {
		x    float32
		bf16 uint16
		f16  uint16
	}{
		{0, 0x0000, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{1, 0x3f80, 0x3c00},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3f00, 0x3800},
		{65504, 0x4780, 0x7bff},                       // largest finite f16; bf16 rounds 65504 up to 65536
		{65520, 0x4780, 0x7c00},                       // f16 halfway to 2^16: ties to even = +Inf
		{65519, 0x4780, 0x7bff},                       // just below that halfway point
		{float32(math.Ldexp(1, -24)), 0x3380, 0x0001}, // smallest f16 subnormal
		{float32(math.Ldexp(1, -25)), 0x3300, 0x0000}, // halfway to it: ties to even = 0
		{float32(math.Ldexp(1.5, -25)), 0x3340, 0x0001},
		{float32(math.Ldexp(1, -14)), 0x3880, 0x0400}, // smallest f16 normal
		{float32(math.Inf(1)), 0x7f80, 0x7c00},
		{float32(math.Inf(-1)), 0xff80, 0xfc00},
		{1 + 1.0/256, 0x3f80, 0x3c04},     // bf16 tie, even is down
		{1 + 3.0/256, 0x3f82, 0x3c0c},     // bf16 tie, even is up
		{3.140625, 0x4049, 0x4248},        // exact in both
		{math.MaxFloat32, 0x7f80, 0x7c00}, // bf16 rounds max float32 to Inf
	}
	for _, c := range cases {
		if got := F32ToBF16(c.x); got != c.bf16 {
			t.Errorf("F32ToBF16(%v) = %#04x, want %#04x", c.x, got, c.bf16)
		}
		if got := F32ToF16(c.x); got != c.f16 {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", c.x, got, c.f16)
		}
	}
	// A NaN whose payload sits only in the low 16 bits must stay NaN.
	nan := math.Float32frombits(0x7f800001)
	if got := F32ToBF16(nan); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("F32ToBF16(low-payload NaN) = %#04x, not NaN", got)
	}
	if got := F32ToF16(nan); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("F32ToF16(low-payload NaN) = %#04x, not NaN", got)
	}
}

func TestSliceHelpers(t *testing.T) {
	src := []float32{1, -2.5, 0.333, 65504, float32(math.Inf(-1))}
	buf := make([]byte, 2*len(src))
	back := make([]float32, len(src))
	type codec struct {
		name   string
		enc    func([]byte, []float32) error
		dec    func([]float32, []byte) error
		scalar func(float32) uint16
		toF32  func(uint16) float32
	}
	for _, c := range []codec{
		{"bf16", EncodeBF16, DecodeBF16, F32ToBF16, BF16ToF32},
		{"f16", EncodeF16, DecodeF16, F32ToF16, F16ToF32},
	} {
		if err := c.enc(buf, src); err != nil {
			t.Fatal(err)
		}
		if err := c.dec(back, buf); err != nil {
			t.Fatal(err)
		}
		for i, x := range src {
			h := c.scalar(x)
			if buf[2*i] != byte(h) || buf[2*i+1] != byte(h>>8) {
				t.Errorf("%s: element %d encoded as % x, want little-endian %#04x", c.name, i, buf[2*i:2*i+2], h)
			}
			if want := c.toF32(h); back[i] != want {
				t.Errorf("%s: element %d decoded to %v, want %v", c.name, i, back[i], want)
			}
		}
		if err := c.enc(buf[:3], src); err == nil {
			t.Errorf("%s: encode into a short buffer: no error", c.name)
		}
		if err := c.dec(back, buf[:3]); err == nil {
			t.Errorf("%s: decode from a short buffer: no error", c.name)
		}
	}
}

func BenchmarkDecodeBF16(b *testing.B) {
	src := make([]byte, 2<<20)
	dst := make([]float32, 1<<20)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeBF16(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}
