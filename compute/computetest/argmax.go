package computetest

// The conformance cases of Argmax.

import (
	"fmt"
)

func testArgmax(e *Env) error {
	for _, sh := range [][2]int{{1, 1}, {1, 7}, {3, 65}, {2, 1000}, {5, 4099}, {1, 151936}} {
		rows, dim := sh[0], sh[1]
		vals := e.randVals(rows*dim, 3)
		if dim > 10 {
			// A tie between two maxima: the lower index must win.
			r := rows - 1
			vals[r*dim+dim-1] = 100
			vals[r*dim+dim/3] = 100
		}
		x, err := e.buf(vals)
		if err != nil {
			return err
		}
		want := make([]int32, rows)
		got := make([]int32, rows)
		if err := e.Ref.Argmax(e.Ctx, want, x.ref, dim); err != nil {
			return err
		}
		if err := e.DUT.Argmax(e.Ctx, got, x.dut, dim); err != nil {
			return fmt.Errorf("Argmax rows=%d dim=%d: %w", rows, dim, err)
		}
		for r := range want {
			if got[r] != want[r] {
				return fmt.Errorf("Argmax rows=%d dim=%d: row %d = %d, want %d", rows, dim, r, got[r], want[r])
			}
		}
		e.free(x)
	}
	return nil
}
