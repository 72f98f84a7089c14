package cpu

import "github.com/govinfer/govinfer/compute"

// SwiGLU implements compute.Backend: each row is SiLUMul of its two
// halves, rows split across the workers.
func (b *Backend) SwiGLU(dst, x compute.Buffer, n, width int) {
	d, xs := Data(dst)[:n*width], Data(x)[:2*n*width]
	b.eachRow(n, width, func(r int) {
		row := xs[2*r*width : 2*(r+1)*width]
		b.k.SiLUMul(d[r*width:(r+1)*width], row[:width], row[width:])
	})
}
