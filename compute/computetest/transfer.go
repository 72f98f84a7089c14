package computetest

// The conformance cases of Upload, Download, Copy and Embed.

import (
	"fmt"
)

func testUploadDownload(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4099} {
		p, err := e.randBuf(n, 1)
		if err != nil {
			return err
		}
		if err := e.check(fmt.Sprintf("n=%d", n), p, nil); err != nil {
			return err
		}
		// Partial upload at an offset, then a partial download.
		if n > 4 {
			part := e.randVals(n/2, 3)
			if err := e.Ref.Upload(p.ref, 3, part); err != nil {
				return err
			}
			if err := e.DUT.Upload(p.dut, 3, part); err != nil {
				return fmt.Errorf("Upload at offset 3: %w", err)
			}
			got := make([]float32, n-5)
			if err := e.DUT.Download(e.Ctx, got, p.dut, 2); err != nil {
				return fmt.Errorf("Download at offset 2: %w", err)
			}
			want := append(append([]float32{p.vals[2]}, part...), p.vals[3+len(part):]...)[:n-5]
			for i := range want {
				if got[i] != want[i] {
					return fmt.Errorf("n=%d: partial download element %d = %g, want %g", n, i, got[i], want[i])
				}
			}
		}
		e.free(p)
	}
	// A fresh buffer is zeroed.
	z, err := e.DUT.NewBuffer(37)
	if err != nil {
		return err
	}
	got := make([]float32, 37)
	for i := range got {
		got[i] = 1
	}
	if err := e.DUT.Download(e.Ctx, got, z, 0); err != nil {
		return err
	}
	for i, v := range got {
		if v != 0 {
			return fmt.Errorf("NewBuffer not zeroed: element %d = %g", i, v)
		}
	}
	e.DUT.Free(z)
	e.DUT.Free(nil)
	// Out-of-range transfers are errors, not panics.
	p, err := e.randBuf(5, 1)
	if err != nil {
		return err
	}
	if err := e.DUT.Upload(p.dut, 3, make([]float32, 3)); err == nil {
		return fmt.Errorf("Upload past the end succeeded")
	}
	if err := e.DUT.Download(e.Ctx, make([]float32, 6), p.dut, 0); err == nil {
		return fmt.Errorf("Download past the end succeeded")
	}
	e.free(p)
	return nil
}

func testCopy(e *Env) error {
	src, err := e.randBuf(301, 1)
	if err != nil {
		return err
	}
	dst, err := e.randBuf(257, 1)
	if err != nil {
		return err
	}
	for _, c := range [][3]int{{0, 0, 1}, {5, 17, 64}, {1, 3, 255}, {200, 250, 51}} {
		e.Ref.Copy(dst.ref, c[0], src.ref, c[1], c[2])
		e.DUT.Copy(dst.dut, c[0], src.dut, c[1], c[2])
	}
	// Copy within one buffer, non-overlapping.
	e.Ref.Copy(dst.ref, 0, dst.ref, 100, 50)
	e.DUT.Copy(dst.dut, 0, dst.dut, 100, 50)
	err = e.check("Copy", dst, nil)
	e.free(src, dst)
	return err
}

func testEmbed(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range [][2]int{{1, 1}, {7, 3}, {50, 17}, {33, 256}, {130, 65}} {
			rows, cols := sh[0], sh[1]
			w, err := e.weight("embed", dt, rows, cols, e.normal(1))
			if err != nil {
				return err
			}
			ids := []int32{int32(rows - 1), 0, int32(rows / 2), int32(rows - 1), int32(e.Rng.IntN(rows))}
			dst, err := e.randBuf(len(ids)*cols+3, 1)
			if err != nil {
				return err
			}
			e.Ref.Embed(dst.ref, w.ref, ids)
			e.DUT.Embed(dst.dut, w.dut, ids)
			ids[0] = 12345 // the backend must have copied ids
			if err := e.check(fmt.Sprintf("Embed %v [%d, %d]", dt, rows, cols), dst, nil); err != nil {
				return err
			}
			e.free(dst)
		}
	}
	return nil
}
