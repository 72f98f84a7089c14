package main

import (
	"bytes"
	"testing"
)

// TestDPBF16PS checks the hand encoding against the GNU assembler's output
// for the same instructions.
func TestDPBF16PS(t *testing.T) {
	cases := []struct {
		dst, src1, src2 int
		want            []byte
	}{
		// vdpbf16ps %zmm2,%zmm1,%zmm0
		{0, 1, 2, []byte{0x62, 0xf2, 0x76, 0x48, 0x52, 0xc2}},
		// vdpbf16ps %zmm31,%zmm17,%zmm9
		{9, 17, 31, []byte{0x62, 0x12, 0x76, 0x40, 0x52, 0xcf}},
	}
	for _, c := range cases {
		if got := dpbf16ps(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("VDPBF16PS z%d, z%d, z%d: got % x, want % x", c.dst, c.src1, c.src2, got, c.want)
		}
	}
}
