package vision

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// DefaultChunkRows is the default bound on the rows of one MLP product
// (Options.ChunkRows).
const DefaultChunkRows = 4096

// linear is a Linear layer: y = x · Wᵀ + b, W [out, in] in backend memory
// in its stored dtype (or the type Options.Quant names), b a [out] vector
// in backend memory.
type linear struct {
	name    string
	w       compute.Weight
	b       []float32 // as loaded; bias is its copy on the backend
	bias    compute.Weight
	in, out int
}

// apply computes dst[n, l.out] = x[n, l.in] · Wᵀ + b on the backend.
func (l *linear) apply(be compute.Backend, dst, x compute.Buffer, n int) {
	be.MatMul(dst, x, l.w, n)
	be.AddBias(dst, l.bias, n, l.out)
}

// vector loads v, a [len(v)] vector, onto be as a float32 weight (the
// values of the stored 16-bit ones exactly).
func vector(be compute.Backend, name string, v []float32) (compute.Weight, error) {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	w, err := be.LoadWeight(name, compute.F32, 1, len(v), data)
	if err != nil {
		return nil, fmt.Errorf("vision: %s: %w", name, err)
	}
	return w, nil
}
