//go:build cgo

package vulkan

import "github.com/govinfer/govinfer/compute"

// SwiGLU implements compute.Backend: the elementwise shader's SiLUMul with
// the gate and up halves as two layouts of x's rows.
func (b *Backend) SwiGLU(dst, x compute.Buffer, n, width int) {
	const op = "SwiGLU"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	if !ok1 || !ok2 || n <= 0 || width <= 0 || !b.span(op, "dst", d, 0, n*width) || !b.span(op, "x", xs, 0, 2*n*width) {
		return
	}
	if d.raw == xs.raw {
		b.failf("SwiGLU: dst is x")
		return
	}
	gate := compute.Heads{RowStride: 2 * width, HeadStride: width, Count: 1, Dim: width}
	up := gate
	up.Off = width
	b.eltwise(0, n, 1, width, d, flat(width), xs, gate, xs, up)
}
