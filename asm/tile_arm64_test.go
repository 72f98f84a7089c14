//go:build !noasm

package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTileNEON checks the NEON 4x4 register tiles directly against a float64
// reference: every k that is a multiple of 8 up to 256, every nb from 1 to 4,
// unaligned operands, row strides larger than k, an output stride larger than
// four with sentinels between the rows, and guard bands around the output.
// The tile adds to dst, so dst starts with random values.
func TestTileNEON(t *testing.T) {
	if !DetectFeatures().NEON {
		t.Skip("no NEON")
	}
	r := rand.New(rand.NewPCG(11, 12))
	const ldd = 4 + 3
	for k := 8; k <= 256; k += 8 {
		for nb := 1; nb <= 4; nb++ {
			off := (k/8 + nb) % 3
			ldw, ldx := k+off+1, k+5
			x := offset(randF32(r, 4*ldx), off+1)
			init := randF32(r, nb*ldd)
			for _, kind := range []string{"bf16", "f16", "f32"} {
				var wv func(i int) float64
				var call func(dst *float32)
				switch kind {
				case "f32":
					w := offset(randF32(r, 4*ldw), off)
					wv = func(i int) float64 { return float64(w[i]) }
					call = func(dst *float32) { tileF32NEON(dst, ldd, &w[0], ldw, &x[0], ldx, k, nb) }
				default:
					ek, tile := kinds[0], tileBF16NEON
					if kind == "f16" {
						ek, tile = kinds[1], tileF16NEON
					}
					w := offset(randU16(r, ek, 4*ldw), off)
					wv = func(i int) float64 { return float64(ek.conv(w[i])) }
					call = func(dst *float32) { tile(dst, ldd, &w[0], ldw, &x[0], ldx, k, nb) }
				}
				what := fmt.Sprintf("tile%sNEON k=%d nb=%d", kind, k, nb)
				buf, dst := guarded((nb-1)*ldd + 4)
				for j := range nb {
					copy(dst[j*ldd:j*ldd+4], init[j*ldd:j*ldd+4])
				}
				call(&dst[0])
				checkGuards(t, what, buf)
				for j := range nb {
					for row := range 4 {
						want, abs := ref(k, func(p int) float64 { return wv(row*ldw + p) },
							func(p int) float64 { return float64(x[j*ldx+p]) })
						want += float64(init[j*ldd+row])
						check(t, what, dst[j*ldd+row], want, abs+abs32(init[j*ldd+row]))
					}
					for row := 4; row < ldd && j < nb-1; row++ {
						if dst[j*ldd+row] != sentinel {
							t.Fatalf("%s: wrote dst[%d] between rows and stride", what, j*ldd+row)
						}
					}
				}
			}
		}
	}
}

func abs32(v float32) float64 {
	if v < 0 {
		return -float64(v)
	}
	return float64(v)
}
