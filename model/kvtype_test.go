package model

import (
	"fmt"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// kvTypeTolerance bounds the golden logit error of 16-bit KV caches,
// max|diff| / max|golden| over every golden case's logits (all positions
// where the golden has them). Measured (TestKVCacheTypeGoldens -v; on
// lavapipe tiny bf16 9.2e-4 and the rest alike): tiny bf16 9.4e-4, f16
// 1.4e-4; small bf16 1.9e-3, f16 2.4e-4 (float32 caches: about 1e-6).
const kvTypeTolerance = 1e-2

// TestKVCacheTypeGoldens measures the logit error of bf16 and f16 KV
// caches on the goldens, and checks that prefill with them is still
// bitwise independent of cuts at multiples of 64 and that restored state
// continues exactly, so prefix reuse stays exact with any cache type.
func TestKVCacheTypeGoldens(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	checkKVTypes(t, be, []string{"tiny", "small"}, true)
}

// checkKVTypes measures the golden error of 16-bit KV caches on be with the
// named models and, when exactness is set, checks cut invariance and
// restores with them.
func checkKVTypes(t *testing.T, be compute.Backend, models []string, exactness bool) {
	for _, dt := range []compute.DType{compute.BF16, compute.F16} {
		for _, name := range models {
			t.Run(fmt.Sprintf("%v/%s", dt, name), func(t *testing.T) {
				gm := loadGolden(t, name, Options{Backend: be, KVCacheType: dt})
				if f32 := loadGolden(t, name, Options{Backend: be}).m; 2*gm.m.KVBytesPerToken() != f32.KVBytesPerToken() {
					t.Errorf("%v caches take %d bytes per token, f32 ones %d", dt, gm.m.KVBytesPerToken(), f32.KVBytesPerToken())
				}
				worst := 0.0
				for _, c := range gm.g.Cases {
					all := c.AllLogits != nil
					seq, logits := prefill(t, gm.m, c.Prompt, 0, all)
					seq.Close()
					want := gm.floats(t, c.LastLogits.Tensor)
					if all {
						want = gm.floats(t, c.AllLogits.Tensor)
					}
					worst = max(worst, relErr(logits, want))
				}
				t.Logf("%v KV cache, %s: golden logits max|diff|/max|golden| = %.2g", dt, name, worst)
				if worst > kvTypeTolerance {
					t.Errorf("%v KV cache: golden logit error %.3g > %.3g", dt, worst, kvTypeTolerance)
				}
				if exactness {
					checkPrefillCuts(t, gm.m)
					checkRestore(t, gm.m)
				}
			})
		}
	}
}
