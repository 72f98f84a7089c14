package vision

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/govinfer/govinfer/asm"
)

// This file holds the tower's operations other than its weight products
// (which are in linear.go): Go loops over float32 rows, with float64 sums
// where rounding could show at the goldens' 1e-4, and attention on package
// asm's float32 kernels.

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

// applyRotary rotates, rotate-half style over the whole head, the heads of
// the q and k parts of n rows of qkv ([n, 3*heads*hd]: q, k, v, each head
// major), with the per-row cos and sin of rotaryTable (cos and sin are the
// same for element i and i + hd/2).
func applyRotary(qkv []float32, n, heads, hd int, cos, sin []float32) {
	d := heads * hd
	half := hd / 2
	for r := range n {
		cs, sn := cos[r*half:(r+1)*half], sin[r*half:(r+1)*half]
		for part := range 2 {
			for hh := range heads {
				v := qkv[r*3*d+part*d+hh*hd:][:hd]
				for i := range half {
					a, b := float64(v[i]), float64(v[i+half])
					c, s := float64(cs[i]), float64(sn[i])
					v[i] = float32(a*c - b*s)
					v[i+half] = float32(b*c + a*s)
				}
			}
		}
	}
}

// attention computes non-causal attention within each segment of segLen
// consecutive rows (one frame of one image): out [n, heads*hd] from qkv
// [n, 3*heads*hd], heads concatenated head-major. Scores and the weighted
// sums of values run on k's float32 products (each a chain of fused
// multiply-adds), the softmax sums in float64. The work is split over the
// machine's cores by (segment, head, block of queries); a cancelled ctx
// stops it early with ctx's error.
func attention(ctx context.Context, k *asm.Kernels, out, qkv []float32, n, segLen, heads, hd int) error {
	const qBlock = 32
	d := heads * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	segs := n / segLen
	qBlocks := (segLen + qBlock - 1) / qBlock
	jobs := segs * heads * qBlocks
	// The keys transposed, [hd, segLen] per (segment, head), so that the
	// scores are a plain product.
	kt := make([]float32, n*d)
	for seg := range segs {
		for hh := range heads {
			blk := kt[(seg*heads+hh)*hd*segLen:][:hd*segLen]
			for j := range segLen {
				key := qkv[(seg*segLen+j)*3*d+d+hh*hd:][:hd]
				for e, v := range key {
					blk[e*segLen+j] = v
				}
			}
		}
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	workers := min(runtime.GOMAXPROCS(0), jobs)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			scores := make([]float32, qBlock*segLen)
			o := make([]float32, qBlock*hd)
			for {
				j := int(next.Add(1) - 1)
				if j >= jobs || failed.Load() != nil {
					return
				}
				if err := ctx.Err(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				seg, rest := j/(heads*qBlocks), j%(heads*qBlocks)
				hh, qb := rest/qBlocks, rest%qBlocks
				s0 := seg * segLen
				q0 := s0 + qb*qBlock
				nq := min(qBlock, s0+segLen-q0)
				keys := kt[(seg*heads+hh)*hd*segLen:][:hd*segLen]
				vals := qkv[s0*3*d+2*d+hh*hd:]
				err := k.GemmF32(scores, segLen, qkv[q0*3*d+hh*hd:], 3*d, 1, keys, segLen, nq, segLen, hd, false)
				sums := [qBlock]float64{}
				for i := range nq {
					row := scores[i*segLen : (i+1)*segLen]
					mx := float32(math.Inf(-1))
					for kj, s := range row {
						row[kj] = s * scale
						mx = max(mx, row[kj])
					}
					for kj := range row {
						row[kj] -= mx
					}
					k.Exp(row, row)
					var sum float64
					for _, e := range row {
						sum += float64(e)
					}
					sums[i] = sum
				}
				if err == nil {
					err = k.GemmF32(o, hd, scores, segLen, 1, vals, 3*d, nq, hd, segLen, false)
				}
				if err != nil {
					// The shapes are the tower's own: a failure is a bug.
					err = fmt.Errorf("vision: attention: %w", err)
					failed.CompareAndSwap(nil, &err)
					return
				}
				for i := range nq {
					inv := 1 / sums[i]
					dst := out[(q0+i)*d+hh*hd:][:hd]
					for e, v := range o[i*hd : (i+1)*hd] {
						dst[e] = float32(float64(v) * inv)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// layerNorm computes dst[r] = (x[r] - mean) / sqrt(var + eps) * w + b for n
// rows of d; dst may be x.
func layerNorm(dst, x, w, b []float32, n, d int, eps float64) {
	for r := range n {
		src := x[r*d : (r+1)*d]
		var mean float64
		for _, v := range src {
			mean += float64(v)
		}
		mean /= float64(d)
		var variance float64
		for _, v := range src {
			e := float64(v) - mean
			variance += e * e
		}
		variance /= float64(d)
		inv := 1 / math.Sqrt(variance+eps)
		o := dst[r*d : (r+1)*d]
		for i, v := range src {
			o[i] = float32((float64(v)-mean)*inv*float64(w[i]) + float64(b[i]))
		}
	}
}

// geluTanh applies PyTorch's tanh approximation of GELU in place.
func geluTanh(x []float32) {
	const c = 0.7978845608028654 // sqrt(2/pi)
	for i, v := range x {
		f := float64(v)
		x[i] = float32(0.5 * f * (1 + math.Tanh(c*(f+0.044715*f*f*f))))
	}
}

// geluErf applies the exact GELU, x * Phi(x), in place.
func geluErf(x []float32) {
	for i, v := range x {
		f := float64(v)
		x[i] = float32(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
	}
}

// add computes dst += x elementwise.
func add(dst, x []float32) {
	for i, v := range x {
		dst[i] += v
	}
}
