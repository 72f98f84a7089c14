//go:build !noasm

package asm

//go:noescape
func tileBF16OP(dst *float32, ldd int, w *uint16, groupBytes, steps int, x *float32, ldx, nb, ng, resume int)

// Blocking of the outer-product tile products of many inputs: a run of
// tileOPRunSteps steps (256 columns, one segment) of tileOPBlockInputs
// inputs (120 KiB of float32) stays in L2 while every group meets it, and
// a group's 8 KiB of the run in L1 with the 6 KiB of the six inputs the
// kernel reads at a time (one thread, 4096×4096, Zen 5 on the AVX2 set:
// runs of 512 and 1024 columns ran at 0.85-0.95 times the rate).
const (
	tileOPRunSteps    = 8
	tileOPBlockInputs = 120
)

// matMulBF16TilesOPAVX2 is MatMulBF16TilesOP on AVX2 (see tileOPGroups:
// one input streams six groups' weights at once, keeping more reads in
// flight). More than tileOPBlockInputs/2 inputs are blocked by runs of columns and of
// inputs as above; the sums carried between runs in dst are those of one pass.
// A last group that ends inside its 16 rows is summed in scratch.
func matMulBF16TilesOPAVX2(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) {
	steps := cols / tileCols
	groupLen := steps * tileCols * tileRows
	full := rows / tileRows
	if n > tileOPBlockInputs/2 {
		for s0 := 0; s0 < steps; s0 += tileOPRunSteps {
			run, resume := min(tileOPRunSteps, steps-s0), min(s0, 1)
			for i0 := 0; i0 < n; i0 += tileOPBlockInputs {
				tileOPGroups(dst[i0*ldd:], ldd, wp[s0*tileCols*tileRows:], groupLen, full, run, x[i0*cols+s0*tileCols:], cols, min(tileOPBlockInputs, n-i0), resume)
			}
		}
	} else {
		tileOPGroups(dst, ldd, wp, groupLen, full, steps, x, cols, n, 0)
	}
	if r0 := full * tileRows; r0 < rows {
		var scratch [tileOPInputs * tileRows]float32
		for i := 0; i < n; i += tileOPInputs {
			nb := min(tileOPInputs, n-i)
			tileBF16OP(&scratch[0], tileRows, &wp[full*groupLen], 2*groupLen, steps, &x[i*cols], cols, nb, 1, 0)
			for j := range nb {
				copy(dst[(i+j)*ldd+r0:(i+j)*ldd+rows], scratch[j*tileRows:])
			}
		}
	}
}

// tileOPGroups runs tileBF16OP over the full groups of 16 rows (weights
// wp, groups groupLen values apart, steps steps) and n inputs (x, cols
// apart): per chunk of groups, every group's inputs six at a time, then
// the last n%6 inputs of the chunk's groups together (6/(n%6) groups),
// which keeps 12 sums in flight where one group's would be few.
func tileOPGroups(dst []float32, ldd int, wp []uint16, groupLen, full, steps int, x []float32, cols, n, resume int) {
	rem := n % tileOPInputs
	body := n - rem
	for g := 0; g < full; {
		ng := 1
		if rem > 0 {
			ng = min(tileOPInputs/rem, full-g)
			if ng == 4 || ng == 5 {
				ng = 3
			}
		}
		for h := g; h < g+ng; h++ {
			for i := 0; i < body; i += tileOPInputs {
				tileBF16OP(&dst[i*ldd+h*tileRows], ldd, &wp[h*groupLen], 2*groupLen, steps, &x[i*cols], cols, tileOPInputs, 1, resume)
			}
		}
		if rem > 0 {
			tileBF16OP(&dst[body*ldd+g*tileRows], ldd, &wp[g*groupLen], 2*groupLen, steps, &x[body*cols], cols, rem, ng, resume)
		}
		g += ng
	}
}
