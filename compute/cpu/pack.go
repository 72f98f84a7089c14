package cpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// The weights LoadWeight copies into a layout of the kernels (bf16
// matrices into the tile layout, blocks of Q8_0, Q4_K and Q6_K into the
// row-interleaved one) go through Packing, Pack and LoadPacked
// (compute.Packer), which a loader may also call itself: to pack into a
// file it maps again on the next start, or to stop a load midway.

// packGroupChunk is the groups of 16 rows a worker packs between looks at
// the context: 2 MiB of the 9B's 4096-column bf16 rows.
const packGroupChunk = 16

// Packing implements compute.Packer: the layout LoadWeight gives a
// rows×cols weight of dt, and its bytes.
func (b *Backend) Packing(dt compute.DType, rows, cols int) (layout string, size int) {
	if rows <= 0 || cols <= 0 {
		return "", 0
	}
	if q := dt.Quant(); q != quant.Keep {
		if !b.k.PacksQ(q) || b.noPack || asm.PackedQBytes(q, rows, cols) == 0 {
			return "", 0
		}
		return asm.PackedQLayout + "-" + q.String(), asm.PackedQBytes(q, rows, cols)
	}
	if dt != compute.BF16 || !b.tiles || asm.TileBF16WeightLen(rows, cols) == 0 {
		return "", 0
	}
	return asm.TileBF16Layout, 2 * asm.TileBF16WeightLen(rows, cols)
}

// Pack implements compute.Packer: groups of 16 rows pack over the workers,
// each looking at ctx every packGroupChunk groups.
func (b *Backend) Pack(ctx context.Context, dst []byte, dt compute.DType, rows, cols int, data []byte) error {
	layout, size := b.Packing(dt, rows, cols)
	if layout == "" {
		return fmt.Errorf("cpu: Pack: %v weights of %d×%d keep their layout", dt, rows, cols)
	}
	if err := checkWeightBytes("", dt, rows, cols, data); err != nil {
		return fmt.Errorf("cpu: Pack: %w", err)
	}
	if len(dst) != size {
		return fmt.Errorf("cpu: Pack: %d bytes for a packed %d×%d %v weight, want %d", len(dst), rows, cols, dt, size)
	}
	q := dt.Quant()
	if q == quant.Keep && (uintptr(unsafe.Pointer(unsafe.SliceData(data)))%2 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%2 != 0) {
		if uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%2 != 0 {
			return errors.New("cpu: Pack: bf16 output off a 2-byte boundary")
		}
		data = append(make([]byte, 0, len(data)+8), data...)
	}
	groups := (rows + 15) / 16
	gb, rb := size/groups, len(data)/rows // packed bytes per group, stored bytes per row
	var mu sync.Mutex
	var firstErr error
	b.pool.parallelFor(groups, max(1, parallelGrain/(16*cols)), func(lo, hi int) {
		for g0 := lo; g0 < hi; g0 += packGroupChunk {
			if ctx.Err() != nil {
				return
			}
			g1 := min(hi, g0+packGroupChunk)
			r0, r1 := g0*16, min(g1*16, rows)
			out, in := dst[g0*gb:g1*gb], data[r0*rb:r1*rb]
			var err error
			if q != quant.Keep {
				err = asm.PackQ(q, out, in, r1-r0, cols)
			} else {
				err = asm.PackTileBF16Weights(u16(out), u16(in), r1-r0, cols)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
		}
	})
	if firstErr != nil {
		return fmt.Errorf("cpu: Pack: %w", firstErr)
	}
	return ctx.Err()
}

// cmpErr returns the first of two errors that is not nil.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// u16 views 2-byte-aligned bytes as uint16 values.
func u16(b []byte) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// LoadPacked implements compute.Packer: the weight reads packed in place.
func (b *Backend) LoadPacked(name string, dt compute.DType, rows, cols int, packed []byte) (compute.Weight, error) {
	layout, size := b.Packing(dt, rows, cols)
	switch {
	case layout == "":
		return nil, fmt.Errorf("cpu: weight %s: %v weights of %d×%d are not packed", name, dt, rows, cols)
	case len(packed) != size:
		return nil, fmt.Errorf("cpu: weight %s: %d packed bytes for [%d, %d] %v, want %d", name, len(packed), rows, cols, dt, size)
	}
	b.populateWeight(packed)
	w := &weight{name: name, dt: dt, rows: rows, cols: cols}
	if dt.Quant() != quant.Keep {
		w.packed = packed
		return w, nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(packed)))%2 != 0 {
		return nil, fmt.Errorf("cpu: weight %s: packed bf16 weights off a 2-byte boundary", name)
	}
	w.tiles = u16(packed)
	if rows*cols <= smallWeight {
		// The float32 copy of a small weight, read element by element.
		f := make([]float32, rows*cols)
		for r := 0; r < rows; r++ {
			w.row(f[r*cols:(r+1)*cols], r) // converts from the tiles while f32 is unset
		}
		w.f32 = f
	}
	return w, nil
}

// checkWeightBytes checks the shape of a weight and the size of its
// stored bytes.
func checkWeightBytes(name string, dt compute.DType, rows, cols int, data []byte) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("cpu: weight %s: bad shape [%d, %d]", name, rows, cols)
	}
	if q := dt.Quant(); q != quant.Keep {
		if _, ok := asm.InputType(q); !ok || !q.Fits(cols) {
			return fmt.Errorf("cpu: weight %s: %v weights with rows of %d values are not supported", name, q, cols)
		}
		if want := rows * dt.RowBytes(cols); len(data) != want {
			return fmt.Errorf("cpu: weight %s: %d bytes for [%d, %d] %v, want %d", name, len(data), rows, cols, dt, want)
		}
		return nil
	}
	size := dt.Size()
	if size == 0 {
		return fmt.Errorf("cpu: weight %s: unsupported dtype %v", name, dt)
	}
	if want := rows * cols * size; len(data) != want {
		return fmt.Errorf("cpu: weight %s: %d bytes for [%d, %d] %v, want %d", name, len(data), rows, cols, dt, want)
	}
	return nil
}
