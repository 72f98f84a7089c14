package fp8

import (
	"math"
	"testing"
)

// TestE4M3 checks the table against known values of the format: the
// largest finite value 448, the smallest subnormal 2^-9, one, zeros and
// NaN, and that the values of the positive bytes increase.
func TestE4M3(t *testing.T) {
	for b, want := range map[uint8]float32{
		0x00: 0, 0x38: 1, 0xb8: -1, 0x7e: 448, 0xfe: -448, 0x01: 1.0 / 512, 0x08: 1.0 / 64, 0x40: 2, 0x3c: 1.5, 0x07: 7.0 / 512,
	} {
		if got := E4M3(b); got != want {
			t.Errorf("E4M3(%#02x) = %v, want %v", b, got, want)
		}
	}
	if !math.IsNaN(float64(E4M3(0x7f))) || !math.IsNaN(float64(E4M3(0xff))) {
		t.Error("0x7f and 0xff are not NaN")
	}
	if math.Signbit(float64(E4M3(0x80))) == false || E4M3(0x80) != 0 {
		t.Error("0x80 is not -0")
	}
	for b := 1; b < 0x7f; b++ {
		if !(E4M3(uint8(b)) > E4M3(uint8(b-1))) {
			t.Errorf("E4M3(%#02x) = %v is not above E4M3(%#02x) = %v", b, E4M3(uint8(b)), b-1, E4M3(uint8(b-1)))
		}
	}
}
