package compute

import "context"

// Packer is implemented by backends whose LoadWeight copies some weights
// into a layout of their own kernels (the CPU backend's tile layout of bf16
// matrices, its row-interleaved quantized blocks). It splits LoadWeight in
// two, so that a loader can pack where it likes (into a file it maps, and
// maps again on the next start instead of packing) and stop between pieces
// of a large matrix:
//
//	layout, size := p.Packing(dt, rows, cols)   // "" : LoadWeight keeps data
//	dst := make([]byte, size)
//	err := p.Pack(ctx, dst, dt, rows, cols, data)
//	w, err := p.LoadPacked(name, dt, rows, cols, dst)
//
// gives the weight LoadWeight(name, dt, rows, cols, data) gives, computing
// the same bits.
type Packer interface {
	// Packing returns the layout LoadWeight puts a rows×cols weight of dt
	// in, and its size in bytes; layout is "" when LoadWeight uses the
	// bytes as given. The name includes the layout's version: bytes packed
	// under one name, by any backend reporting it, load anywhere it is
	// reported.
	Packing(dt DType, rows, cols int) (layout string, size int)
	// Pack writes data, a weight's bytes as LoadWeight takes them, into
	// dst, of Packing's size, in Packing's layout. It returns ctx's error,
	// leaving dst partly written, when ctx is done before it finishes.
	Pack(ctx context.Context, dst []byte, dt DType, rows, cols int, data []byte) error
	// LoadPacked returns the weight LoadWeight returns for the bytes Pack
	// packed into packed, which the weight then reads in place: they must
	// stay mapped, and unchanged, as long as it is used.
	LoadPacked(name string, dt DType, rows, cols int, packed []byte) (Weight, error)
}
