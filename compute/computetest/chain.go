package computetest

// The conformance cases of a chain of operations.

import (
	"math"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// testChain issues a dependent sequence of operations with no download in
// between, the way a model step does, so that a deferred backend must order
// them correctly.
func testChain(e *Env) error {
	const n, dim, hidden = 3, 64, 96
	emb, err := e.weight("emb", compute.BF16, 11, dim, e.normal(1))
	if err != nil {
		return err
	}
	up, err := e.weight("up", compute.BF16, hidden, dim, e.normal(0.2))
	if err != nil {
		return err
	}
	down, err := e.weight("down", compute.F16, dim, hidden, e.normal(0.2))
	if err != nil {
		return err
	}
	norm, err := e.weight("norm", compute.F32, 1, dim, e.normal(0.2))
	if err != nil {
		return err
	}
	x, err := e.randBuf(n*dim, 1)
	if err != nil {
		return err
	}
	h, err := e.randBuf(n*dim, 1)
	if err != nil {
		return err
	}
	a, err := e.randBuf(n*hidden, 1)
	if err != nil {
		return err
	}
	ids := []int32{3, 10, 0}
	refB := e.Ref
	if iq, ok := e.DUT.(InputQuantizer); ok && iq.QuantizesInputs(compute.BF16) {
		// A backend that rounds the bf16 products' inputs drifts through
		// the layers by far more than float32 rounding: the reference
		// rounds them too (on the pure-Go kernels), and the comparison
		// checks the rest of the chain.
		r := cpu.New(cpu.Options{Threads: 2, Kernels: asm.Generic(), BF16Inputs: true})
		defer r.Close()
		refB = r
	}
	for _, be := range []struct {
		b          compute.Backend
		x, h, a    compute.Buffer
		emb, u, d  compute.Weight
		normWeight compute.Weight
	}{
		{refB, x.ref, h.ref, a.ref, emb.ref, up.ref, down.ref, norm.ref},
		{e.DUT, x.dut, h.dut, a.dut, emb.dut, up.dut, down.dut, norm.dut},
	} {
		b := be.b
		b.Embed(be.x, be.emb, ids)
		for layer := 0; layer < 3; layer++ {
			b.RMSNorm(be.h, be.x, be.normWeight, n, dim, 1e-6)
			b.MatMul(be.a, be.h, be.u, n)
			b.SiLUMul(be.a, be.a, be.a, n*hidden)
			b.MatMul(be.h, be.a, be.d, n)
			b.Add(be.x, be.h, n*dim)
		}
		b.Copy(be.h, 0, be.x, 0, n*dim)
	}
	// Errors compound through the layers; compare relative to the
	// magnitude of the final activations.
	ref, _, err := e.download(h)
	if err != nil {
		return err
	}
	var mag float64
	for _, v := range ref {
		mag = max(mag, math.Abs(float64(v)))
	}
	err = e.check("Chain", h, func(int) float64 { return tol(mag, dim*hidden) })
	e.free(x, h, a)
	return err
}
