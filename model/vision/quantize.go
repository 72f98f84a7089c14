package vision

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// matrixType returns the block format a matrix of cols columns is loaded
// in when Options.Quant is q: q where its rows are whole blocks, else Q8_0
// where they are (a K-quant's 256 does not divide every width of a small
// tower), else quant.Keep, as quant.Plan falls back for the text model.
func matrixType(q quant.Type, cols int) quant.Type {
	switch {
	case q == quant.Keep:
		return quant.Keep
	case q.Fits(cols):
		return q
	case quant.Q8_0.Fits(cols):
		return quant.Q8_0
	}
	return quant.Keep
}

// quantizeMatrix quantizes rows rows of cols values of dtype dt (F32, F16
// or BF16, little-endian) to the block format qt, the rows split over the
// CPUs.
func quantizeMatrix(qt quant.Type, dt compute.DType, data []byte, rows, cols int) ([]byte, error) {
	var row func(t quant.Type, dst, src []byte) error
	switch dt {
	case compute.BF16:
		row = quant.QuantizeRowBF16
	case compute.F16:
		row = quant.QuantizeRowF16
	case compute.F32:
		row = quant.QuantizeRowF32
	default:
		return nil, fmt.Errorf("vision: cannot quantize %v values", dt)
	}
	size, rb := dt.Size(), qt.RowBytes(cols)
	if len(data) != rows*cols*size || rb == 0 {
		return nil, fmt.Errorf("vision: %d bytes of %v for [%d, %d] in %v", len(data), dt, rows, cols, qt)
	}
	out := make([]byte, rows*rb)
	workers := max(1, min(runtime.GOMAXPROCS(0), rows))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Go(func() {
			for r := wk * rows / workers; r < (wk+1)*rows/workers && errs[wk] == nil; r++ {
				errs[wk] = row(qt, out[r*rb:(r+1)*rb], data[r*cols*size:(r+1)*cols*size])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return out, nil
}
