package vision

import "math"

// This file holds what the tower computes in Go rather than on the
// backend: the patches' positions in the grid, the interpolated position
// embeddings and the rotary tables, in float64 and rounded once.

// patchPos returns the row and column, in the patch grid of one frame of
// h x w patches, of patch q of the frame in merge-block order: blocks of
// m x m patches row-major over the frame, patches row-major inside a block
// (Hugging Face's patch order, that of pixel_values).
func patchPos(q, w, m int) (row, col int) {
	b, i := q/(m*m), q%(m*m)
	bw := w / m
	return (b/bw)*m + i/m, (b%bw)*m + i%m
}

// interpTaps returns, for each of n output positions along an axis, the two
// table indices and the weight of the second one of a bilinear
// interpolation with align_corners over a table side long: output i reads
// source i*(side-1)/(n-1) (0 when n is 1).
func interpTaps(n, side int) (lo, hi []int, frac []float64) {
	lo, hi, frac = make([]int, n), make([]int, n), make([]float64, n)
	for i := range n {
		var src float64
		if n > 1 {
			src = float64(i) * float64(side-1) / float64(n-1)
		}
		f := math.Floor(src)
		lo[i] = int(f)
		hi[i] = min(lo[i]+1, side-1)
		frac[i] = src - f
	}
	return lo, hi, frac
}

// addPosEmbed adds to x, [t*h*w, d] rows in patch order, the learned
// position table [side*side, d] bilinearly interpolated to the h x w patch
// grid (the same for every frame). When pos is not nil it also receives the
// interpolated rows.
func addPosEmbed(x, pos, table []float32, d, side int, grid [3]int, m int) {
	t, h, w := grid[0], grid[1], grid[2]
	rl, rh, rf := interpTaps(h, side)
	cl, ch, cf := interpTaps(w, side)
	acc := make([]float64, d)
	row := make([]float32, d)
	for q := range h * w {
		r, c := patchPos(q, w, m)
		taps := [4]int{rl[r]*side + cl[c], rl[r]*side + ch[c], rh[r]*side + cl[c], rh[r]*side + ch[c]}
		wts := [4]float64{(1 - rf[r]) * (1 - cf[c]), (1 - rf[r]) * cf[c], rf[r] * (1 - cf[c]), rf[r] * cf[c]}
		clear(acc)
		for k, tap := range taps {
			wt := wts[k]
			if wt == 0 {
				continue
			}
			src := table[tap*d : (tap+1)*d]
			for j, v := range src {
				acc[j] += wt * float64(v)
			}
		}
		for j, v := range acc {
			row[j] = float32(v)
		}
		for f := range t {
			p := f*h*w + q
			dst := x[p*d : (p+1)*d]
			for j, v := range row {
				dst[j] += v
			}
			if pos != nil {
				copy(pos[p*d:(p+1)*d], row)
			}
		}
	}
}

// rotaryTable returns the cos and sin of the 2-D rotary angles of every
// patch of a grid, [t*h*w, headDim/2] each, in patch order: for a patch at
// (row, col), angles row*invFreq then col*invFreq (headDim/4 each).
func rotaryTable(invFreq []float64, grid [3]int, m int) (cos, sin []float32) {
	t, h, w := grid[0], grid[1], grid[2]
	half := 2 * len(invFreq)
	n := t * h * w
	cos, sin = make([]float32, n*half), make([]float32, n*half)
	for q := range h * w {
		r, c := patchPos(q, w, m)
		base := q * half
		for j, f := range invFreq {
			sr, cr := math.Sincos(float64(r) * f)
			sc, cc := math.Sincos(float64(c) * f)
			cos[base+j], sin[base+j] = float32(cr), float32(sr)
			cos[base+len(invFreq)+j], sin[base+len(invFreq)+j] = float32(cc), float32(sc)
		}
	}
	for f := 1; f < t; f++ {
		copy(cos[f*h*w*half:(f+1)*h*w*half], cos[:h*w*half])
		copy(sin[f*h*w*half:(f+1)*h*w*half], sin[:h*w*half])
	}
	return cos, sin
}
