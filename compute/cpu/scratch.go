package cpu

// workerScratch is the memory one worker slot of the pool keeps between
// operations, grown on demand, so that steady-state steps do not allocate.
// Slot i is used only by the goroutine running slot i of pool.run.
type workerScratch struct {
	f32 []float32 // small vectors (delta rule recurrence, conv window)

	delta     *deltaScratch // chunked delta rule
	deltaDims [4]int        // chunk, dk, dv, group it was sized for

	group groupScratch // attention decode

	block     *attnScratch // blocked attention
	blockDims [2]int       // rows, dim it was sized for
}

// floats returns n float32s of scratch, contents undefined.
func (w *workerScratch) floats(n int) []float32 {
	if cap(w.f32) < n {
		w.f32 = make([]float32, n)
	}
	return w.f32[:n]
}

// deltaScratch returns chunked delta rule scratch for chunks of up to c
// tokens, at least as large as newDeltaScratch(c, dk, dv, group).
func (w *workerScratch) deltaScratch(c, dk, dv, group int) *deltaScratch {
	d := &w.deltaDims
	if w.delta == nil || c > d[0] || dk > d[1] || dv > d[2] || group > d[3] {
		*d = [4]int{max(c, d[0]), max(dk, d[1]), max(dv, d[2]), max(group, d[3])}
		w.delta = newDeltaScratch(d[0], d[1], d[2], d[3])
	}
	return w.delta
}

// attnScratch returns blocked attention scratch for up to rows query rows
// of dim elements.
func (w *workerScratch) attnScratch(rows, dim int) *attnScratch {
	d := &w.blockDims
	if w.block == nil || rows > d[0] || dim > d[1] {
		*d = [2]int{max(rows, d[0]), max(dim, d[1])}
		w.block = newAttnScratch(d[0], d[1])
	}
	return w.block
}

// grow returns s with length n, reallocated (contents lost) if too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
