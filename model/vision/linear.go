package vision

import (
	"context"
	"fmt"

	"github.com/govinfer/govinfer/compute"
)

// DefaultChunkRows is the default number of rows multiplied per backend
// call (Options.ChunkRows).
const DefaultChunkRows = 256

// linear is a Linear layer: y = x · Wᵀ + b, W [out, in] in backend memory
// in its stored dtype, b a float32 [out] vector.
type linear struct {
	name    string
	w       compute.Weight
	b       []float32
	in, out int
}

// products runs every matrix product of the tower on its backend's
// kernels (the text model's). Activations live in Go slices between
// products: each product uploads its inputs chunk by chunk into in,
// multiplies into out and downloads the results. This is the one place
// where the tower meets the backend's matrix kernels; keeping the
// activations in backend buffers (for a GPU) needs the LayerNorm, GELU,
// bias and attention operations the backend does not have yet.
type products struct {
	be      compute.Backend
	chunk   int // rows per backend call
	in, out compute.Buffer
}

// newProducts allocates the staging buffers for products with inputs and
// outputs up to maxIn and maxOut wide.
func newProducts(be compute.Backend, chunk, maxIn, maxOut int) (*products, error) {
	p := &products{be: be, chunk: chunk}
	var err error
	if p.in, err = be.NewBuffer(chunk * maxIn); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	if p.out, err = be.NewBuffer(chunk * maxOut); err != nil {
		be.Free(p.in)
		return nil, fmt.Errorf("vision: %w", err)
	}
	return p, nil
}

// free releases the staging buffers.
func (p *products) free() {
	p.be.Free(p.in)
	p.be.Free(p.out)
	p.in, p.out = nil, nil
}

// apply computes dst[n, l.out] = x[n, l.in] · Wᵀ + b.
func (p *products) apply(ctx context.Context, l *linear, dst, x []float32, n int) error {
	if len(x) < n*l.in || len(dst) < n*l.out {
		return fmt.Errorf("vision: %s: %d rows need %d inputs and %d outputs, have %d and %d",
			l.name, n, n*l.in, n*l.out, len(x), len(dst))
	}
	for r0 := 0; r0 < n; r0 += p.chunk {
		rows := min(p.chunk, n-r0)
		if err := p.be.Upload(p.in, 0, x[r0*l.in:(r0+rows)*l.in]); err != nil {
			return fmt.Errorf("vision: %s: %w", l.name, err)
		}
		p.be.MatMul(p.out, p.in, l.w, rows)
		d := dst[r0*l.out : (r0+rows)*l.out]
		if err := p.be.Download(ctx, d, p.out, 0); err != nil {
			return fmt.Errorf("vision: %s: %w", l.name, err)
		}
		for r := range rows {
			add(d[r*l.out:(r+1)*l.out], l.b)
		}
	}
	return nil
}
