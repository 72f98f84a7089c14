//go:build !noasm

package asm

import "sync"

//go:noescape
func tileBF16AMX(cfg *byte, w *uint16, lda int, x *uint16, groupBytes, partBytes, parts, steps, groups int, c *float32)

// tileConfig is the AMX palette-1 configuration of tileBF16AMX: all eight
// tiles 16 rows of 64 bytes.
var tileConfig = func() (cfg [64]byte) {
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	return cfg
}()

var (
	// amxSums holds the sums of one kernel call (32 rows × 32 inputs).
	amxSums = sync.Pool{New: func() any { return new([32 * 32]float32) }}
	// amxPad holds a last block of fewer than 32 weight rows, zero-padded.
	amxPad = sync.Pool{New: func() any { return new([]uint16) }}
)

// tileRowBlock is the weight rows a tile product keeps in L2 while the
// packed inputs stream past them, 32 rows (one kernel call) at a time.
const tileRowBlock = 128

// matMulBF16TilesAMX is MatMulBF16Tiles on AMX tiles: per block of 128
// weight rows, each pair of input groups (32 inputs) meets the block's
// rows 32 at a time, so both stay in L2; a last block of fewer than 32
// rows is copied into zero-padded scratch first.
func matMulBF16TilesAMX(dst []float32, ldd int, w []uint16, rows, cols int, xp []uint16, n, parts int) {
	steps := cols / tileCols
	groups := (n + tileInputs - 1) / tileInputs
	groupLen := steps * tileCols * tileInputs
	partBytes := 2 * len(xp) / parts
	cfg := tileConfig
	c := amxSums.Get().(*[32 * 32]float32)
	defer amxSums.Put(c)
	full := rows / 32 * 32
	var pad []uint16
	if full < rows {
		p := amxPad.Get().(*[]uint16)
		defer amxPad.Put(p)
		if cap(*p) < 32*cols {
			*p = make([]uint16, 32*cols)
		}
		pad = (*p)[:32*cols]
		clear(pad[copy(pad, w[full*cols:rows*cols]):])
	}
	for rb := 0; rb < rows; rb += tileRowBlock {
		rbEnd := min(rb+tileRowBlock, rows)
		for g := 0; g < groups; g += 2 {
			ng := min(2, groups-g)
			i0 := g * tileInputs
			m := min(2*tileInputs, n-i0)
			for r0 := rb; r0 < rbEnd; r0 += 32 {
				wp := &w[r0*cols]
				if r0 == full {
					wp = &pad[0]
				}
				tileBF16AMX(&cfg[0], wp, 2*cols, &xp[g*groupLen], 2*groupLen, partBytes, parts, steps, ng, &c[0])
				rs := min(32, rows-r0)
				for i := range m {
					out := dst[(i0+i)*ldd+r0:][:rs]
					for r := range out {
						out[r] = c[r*32+i]
					}
				}
			}
		}
	}
}
