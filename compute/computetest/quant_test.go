package computetest

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/quant"
)

// dequantizing is a CPU backend that takes quantized weights by
// dequantizing them to F32 at LoadWeight: a backend that passes the
// quantized cases, to test them with.
type dequantizing struct{ *cpu.Backend }

func dequantizeLoad(b compute.Backend, name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	if dt.Quant() == quant.Keep {
		return b.LoadWeight(name, dt, rows, cols, data)
	}
	vals := make([]float32, rows*cols)
	if err := quant.DequantizeRow(dt.Quant(), vals, data); err != nil {
		return nil, err
	}
	f32 := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
	}
	return b.LoadWeight(name, compute.F32, rows, cols, f32)
}

func (d dequantizing) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	return dequantizeLoad(d.Backend, name, dt, rows, cols, data)
}

// QuantizesInputs is false: the weights are dequantized, the inputs kept.
func (d dequantizing) QuantizesInputs(compute.DType) bool { return false }

// perturbingDequantizing is the perturbed backend of
// TestSuiteCatchesPerturbation taking quantized weights.
type perturbingDequantizing struct{ perturbing }

func (p perturbingDequantizing) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	return dequantizeLoad(p.Backend, name, dt, rows, cols, data)
}

// QuantizesInputs is false: the weights are dequantized, the inputs kept.
func (p perturbingDequantizing) QuantizesInputs(compute.DType) bool { return false }

// TestQuantCases runs the quantized cases on a backend that takes the
// formats (they must pass), on a perturbed one (they must fail), on the
// CPU backend, which quantizes its inputs (they must pass, except for
// formats it rejects), and checks that a backend that rejects every format
// at LoadWeight gets a SkipError and nothing else.
func TestQuantCases(t *testing.T) {
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	for i, c := range quantCases() {
		rng := func() *rand.Rand { return rand.New(rand.NewPCG(uint64(i), 7)) }
		good := dequantizing{cpu.New(cpu.Options{Threads: 1})}
		if err := c.Fn(&Env{Ref: ref, DUT: good, Rng: rng(), Ctx: t.Context()}); err != nil {
			t.Errorf("%s on a dequantizing backend: %v", c.Name, err)
		}
		good.Close()
		bad := perturbingDequantizing{perturbing{cpu.New(cpu.Options{Threads: 1})}}
		err := c.Fn(&Env{Ref: ref, DUT: bad, Rng: rng(), Ctx: t.Context()})
		var skip *SkipError
		if err == nil || errors.As(err, &skip) {
			t.Errorf("%s: a perturbed backend got %v, want a mismatch", c.Name, err)
		}
		bad.Close()
		plain := cpu.New(cpu.Options{Threads: 2})
		if err := c.Fn(&Env{Ref: ref, DUT: plain, Rng: rng(), Ctx: t.Context()}); err != nil {
			t.Errorf("%s on the CPU backend: %v", c.Name, err)
		}
		plain.Close()
		if err := c.Fn(&Env{Ref: ref, DUT: rejecting{ref}, Rng: rng(), Ctx: t.Context()}); !errors.As(err, &skip) {
			t.Errorf("%s on a backend without quantized weights: %v, want a SkipError", c.Name, err)
		}
	}
}

// rejecting is a backend that takes no quantized weights.
type rejecting struct{ *cpu.Backend }

func (r rejecting) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	if dt.Quant() != quant.Keep {
		return nil, errors.New("no quantized weights")
	}
	return r.Backend.LoadWeight(name, dt, rows, cols, data)
}
