//go:build !noasm

package asm

import (
	"slices"
	"sync"
)

//go:noescape
func packTileBF16AVX512(dst *uint16, x *float32, steps, parts int)

//go:noescape
func tileBF16FMA(dst *float32, ldd int, w *uint16, groupBytes, steps int, x *float32, ldx, nb, ng, resume int)

//go:noescape
func tileBF16AMX3(cfg *byte, x *uint16, stepBytes, partBytes, parts int, w *uint16, groupBytes, steps, flags int, c *float32, ldc int)

//go:noescape
func tileBF16AMX(cfg *byte, x *uint16, stepBytes, tokBytes, partBytes, parts int, w *uint16, groupBytes, steps, flags int, c *float32, ldc int)

// tileConfig returns the AMX palette-1 configuration of tileBF16AMX for
// input tiles of m0 and m1 inputs (m1 0: one tile) and one or two weight
// groups: tiles 0-3 the sums, 4-5 the inputs, 6-7 the weights.
func tileConfig(m0, m1, groups int) (cfg [64]byte) {
	cfg[0] = 1
	set := func(t, rows int) {
		if rows > 0 {
			cfg[16+2*t] = 64
			cfg[48+t] = byte(rows)
		}
	}
	set(0, m0)
	set(4, m0)
	set(6, tileRows)
	set(2, m1)
	set(5, m1)
	if groups == 2 {
		set(1, m0)
		set(3, m1)
		set(7, tileRows)
	}
	return cfg
}

// tileConfig3 returns the configuration of tileBF16AMX3 for m inputs:
// tiles 0-2 the sums, 3 and 7 the inputs, 4-6 the weights.
func tileConfig3(m int) (cfg [64]byte) {
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64
		cfg[48+t] = byte(m)
		if t >= 4 && t <= 6 {
			cfg[48+t] = tileRows
		}
	}
	return cfg
}

// amxSums holds the sums of the last groups of a product whose rows end
// inside them, across its runs of columns.
var amxSums = sync.Pool{New: func() any { return new([]float32) }}

// Blocking of the tile products: a run of tileChunkSteps steps (1024
// columns) of the weights of tileRowBlock rows (1 MiB) and of 32 inputs'
// parts (up to 192 KiB) stay in L2 while they meet.
const (
	maxTileRuns    = 64 // runs of 32 inputs per call of matMulBF16TilesAMX
	tileRowBlock   = 512
	tileChunkSteps = 32
)

// matMulBF16TilesAMX is MatMulBF16Tiles on AMX tiles. The columns are cut
// into runs of 1024; per run, per block of 512 weight rows, each 32
// inputs meet the block's groups three (a single tile of inputs) or two
// at a time. The sums are kept in dst between runs (float32 stores and
// loads change nothing, so the order of the additions is that of one
// pass), except for the last groups of a product whose rows end inside
// them, which are summed in scratch.
func matMulBF16TilesAMX(dst []float32, ldd int, wp []uint16, rows, cols int, xp []uint16, n, parts int) {
	const tileBytes = 2 * tileCols * tileRows // one 1 KiB tile
	steps := cols / tileCols
	groups := (rows + tileRows - 1) / tileRows
	groupLen := steps * tileCols * tileRows        // the values of one weight group
	tileLen := steps * parts * tileCols * tileRows // the values of one input tile
	stepBytes := parts * tileBytes                 // one step of an input tile's parts
	if n > maxTileRuns*2*tileRows {
		// Products this wide run as several of at most maxTileRuns·32
		// inputs, each summed exactly as the whole.
		for i := 0; i < n; i += maxTileRuns * 2 * tileRows {
			m := min(maxTileRuns*2*tileRows, n-i)
			matMulBF16TilesAMX(dst[i*ldd:], ldd, wp, rows, cols, xp[i/tileRows*tileLen:][:(m+tileRows-1)/tileRows*tileLen], m, parts)
		}
		return
	}
	// The last groups' sums, where rows end inside them: per run of 32
	// inputs, the first row summed in scratch (the groups' place depends
	// on the kernel the run takes), or -1.
	var scratch []float32
	var scratchRow [maxTileRuns]int
	for i := range scratchRow {
		scratchRow[i] = -1
	}
	if rows%(2*tileRows) != 0 {
		p := amxSums.Get().(*[]float32)
		defer amxSums.Put(p)
		*p = slices.Grow((*p)[:0], n*2*tileRows)[:n*2*tileRows]
		scratch = *p
	}
	for s0 := 0; s0 < steps; s0 += tileChunkSteps {
		run := min(tileChunkSteps, steps-s0)
		resume := 0 // flag 4: the sums go on from those stored
		if s0 > 0 {
			resume = 4
		}
		for gb := 0; gb < groups; gb += tileRowBlock / tileRows {
			gbEnd := min(gb+tileRowBlock/tileRows, groups)
			for i0 := 0; i0 < n; i0 += 2 * tileRows {
				m := min(2*tileRows, n-i0)
				m0, m1 := min(m, tileRows), max(m-tileRows, 0)
				x := &xp[i0/tileRows*tileLen+s0*stepBytes/2]
				for g := gb; g < gbEnd; {
					r0 := g * tileRows
					w := &wp[g*groupLen+s0*tileCols*tileRows]
					if m1 == 0 && gbEnd-g >= 3 && r0+3*tileRows <= rows {
						// A few inputs stream the weights: three groups
						// at once keep more reads in flight.
						cfg := tileConfig3(m0)
						tileBF16AMX3(&cfg[0], x, stepBytes, tileBytes, parts, w, 2*groupLen, run, resume, &dst[i0*ldd+r0], 4*ldd)
						g += 3
						continue
					}
					ng := min(2, gbEnd-g)
					flags := resume
					if m1 > 0 {
						flags |= 1
					}
					if ng == 2 {
						flags |= 2
					}
					cfg := tileConfig(m0, m1, ng)
					c, ldc := &dst[i0*ldd+r0], 4*ldd
					if r0+ng*tileRows > rows {
						c, ldc = &scratch[i0*2*tileRows], 4*2*tileRows
						scratchRow[i0/(2*tileRows)] = r0
					}
					tileBF16AMX(&cfg[0], x, stepBytes, 2*tileLen, tileBytes, parts, w, 2*groupLen, run, flags, c, ldc)
					g += ng
				}
			}
		}
	}
	for i := range n {
		if r0 := scratchRow[i/(2*tileRows)]; r0 >= 0 {
			copy(dst[i*ldd+r0:i*ldd+rows], scratch[i*2*tileRows:])
		}
	}
}

// Blocking of the FMA tile products of many inputs (prefill on CPUs
// without AMX): a run of tileFMARunSteps steps (1024 columns, whole
// segments) of tileFMABlockInputs inputs (256 KiB of float32) stays in
// L2 while every group meets it, and a group's 32 KiB of the run in L1
// while 8 inputs at a time meet it. A product of fewer inputs streams
// each group's weights once for all of them.
const (
	tileFMARunSteps    = 32
	tileFMABlockInputs = 64
)

// matMulBF16TilesFMAAVX512 is MatMulBF16TilesFMA on AVX-512: the inputs
// eight at a time, or fewer with up to four groups of 16 rows at once (one
// input streams four groups' weights, as the matrix-vector kernels read
// four rows); a group's weights, up to a few hundred KiB, stay in L2
// between runs of inputs. More than tileFMABlockInputs/2 inputs are
// blocked by runs of columns and of inputs as above; the sums carried
// between runs in dst are those of one pass. A last group that ends
// inside its 16 rows is summed in scratch.
func matMulBF16TilesFMAAVX512(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) {
	steps := cols / tileCols
	groupLen := steps * tileCols * tileRows
	full := rows / tileRows
	var scratch [tileFMAInputs * tileRows]float32
	if n > tileFMABlockInputs/2 {
		for s0 := 0; s0 < steps; s0 += tileFMARunSteps {
			run, resume := min(tileFMARunSteps, steps-s0), min(s0, 1)
			for i0 := 0; i0 < n; i0 += tileFMABlockInputs {
				i1 := min(i0+tileFMABlockInputs, n)
				for g := range full {
					w := &wp[g*groupLen+s0*tileCols*tileRows]
					for i := i0; i < i1; i += tileFMAInputs {
						tileBF16FMA(&dst[i*ldd+g*tileRows], ldd, w, 2*groupLen, run, &x[i*cols+s0*tileCols], cols, min(tileFMAInputs, i1-i), 1, resume)
					}
				}
			}
		}
	} else {
		for g := 0; g < full; {
			ng := 1
			if n <= tileFMAInputs/2 {
				ng = min(tileFMAInputs/n, 4)
				for ng > full-g || ng == 3 {
					ng--
				}
			}
			for i := 0; i < n; i += tileFMAInputs {
				nb := min(tileFMAInputs/ng, n-i)
				tileBF16FMA(&dst[i*ldd+g*tileRows], ldd, &wp[g*groupLen], 2*groupLen, steps, &x[i*cols], cols, nb, ng, 0)
			}
			g += ng
		}
	}
	if r0 := full * tileRows; r0 < rows {
		for i := 0; i < n; i += tileFMAInputs {
			nb := min(tileFMAInputs, n-i)
			tileBF16FMA(&scratch[0], tileRows, &wp[full*groupLen], 2*groupLen, steps, &x[i*cols], cols, nb, 1, 0)
			for j := range nb {
				copy(dst[(i+j)*ldd+r0:(i+j)*ldd+rows], scratch[j*tileRows:])
			}
		}
	}
}
