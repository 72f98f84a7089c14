package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
)

// TestArgmaxMatchesReference checks Backend.Argmax against compute.Argmax,
// with every kernel set, on rows of random lengths (whole and partial
// lanes) that hold ties, NaNs, infinities and signed zeros where the
// passes could part ways: the first of equal maxima, a NaN before or at
// the maximum, a row of NaNs, a row of -Inf and NaN, -0 before +0.
func TestArgmaxMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	type row struct {
		name string
		v    []float32
	}
	var rows []row
	for _, n := range []int{1, 7, argmaxLanes - 1, argmaxLanes, argmaxLanes + 1, 1000, 4099, 248320} {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*20 - 10
		}
		rows = append(rows, row{fmt.Sprintf("random/%d", n), v})
		tie := append([]float32(nil), v...)
		a, b := r.IntN(n), r.IntN(n)
		tie[a], tie[b] = 50, 50
		rows = append(rows, row{fmt.Sprintf("tie/%d", n), tie})
		withNaN := append([]float32(nil), tie...)
		for range 1 + n/50 {
			withNaN[r.IntN(n)] = nan
		}
		withNaN[0] = nan
		rows = append(rows, row{fmt.Sprintf("nan/%d", n), withNaN})
		allNaN := make([]float32, n)
		for i := range allNaN {
			allNaN[i] = nan
		}
		rows = append(rows, row{fmt.Sprintf("all-nan/%d", n), allNaN})
		negInf := make([]float32, n)
		for i := range negInf {
			negInf[i] = -inf
			if i%3 == 0 {
				negInf[i] = nan
			}
		}
		rows = append(rows, row{fmt.Sprintf("-inf/%d", n), negInf})
		zeros := make([]float32, n)
		for i := range zeros {
			zeros[i] = -1
		}
		zeros[n/2] = float32(math.Copysign(0, -1))
		zeros[n-1] = 0
		rows = append(rows, row{fmt.Sprintf("zeros/%d", n), zeros})
		posInf := append([]float32(nil), v...)
		posInf[n-1] = inf
		rows = append(rows, row{fmt.Sprintf("+inf/%d", n), posInf})
	}
	for name, k := range map[string]*asm.Kernels{"generic": asm.Generic(), "avx2": asm.New(asm.Features{AVX2: true}), "best": asm.Detect()} {
		b := New(Options{Threads: 2, Kernels: k})
		for _, c := range rows {
			want := compute.Argmax(c.v)
			if got := b.argmax(c.v); got != want {
				t.Errorf("%s %s: argmax %d, want %d", name, c.name, got, want)
			}
		}
		// Several rows at once, split across the workers.
		const dim = 1000
		var all []float32
		var want []int32
		for _, c := range rows {
			if len(c.v) == dim {
				all = append(all, c.v...)
				want = append(want, int32(compute.Argmax(c.v)))
			}
		}
		got := make([]int32, len(want))
		if err := b.Argmax(context.Background(), got, &buffer{all}, dim); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: row %d of %d: %d, want %d", name, i, len(want), got[i], want[i])
			}
		}
		b.Close()
	}
}
