package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkActivation runs the activation kernels over 12288 values (the 9B
// MLP width) in every kernel set, plus the plain loops on float64 math.Exp
// they replace; each reports ns/elem.
//
//	go test ./asm/ -run X -bench Activation -benchtime 2000x
func BenchmarkActivation(b *testing.B) {
	const n = 12288
	r := rand.New(rand.NewPCG(17, 18))
	x := make([]float32, n)
	y := make([]float32, n)
	for i := range x {
		x[i] = (r.Float32()*2 - 1) * 8
		y[i] = r.Float32()*2 - 1
	}
	dst := make([]float32, n)
	perElem := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
	}
	sig := func(v float32) float32 { return float32(1 / (1 + math.Exp(-float64(v)))) }
	plain := map[string]func(){
		"Exp": func() {
			for i, v := range x {
				dst[i] = float32(math.Exp(float64(v)))
			}
		},
		"Sigmoid": func() {
			for i, v := range x {
				dst[i] = sig(v)
			}
		},
		"SiLU": func() {
			for i, v := range x {
				dst[i] = v * sig(v)
			}
		},
		"SiLUMul": func() {
			for i, v := range x {
				dst[i] = v * sig(v) * y[i]
			}
		},
		"SigmoidMul": func() {
			for i, v := range x {
				dst[i] = y[i] * sig(v)
			}
		},
	}
	for _, name := range []string{"Exp", "Sigmoid", "SiLU", "SiLUMul", "SigmoidMul"} {
		b.Run(name+"/math.Exp", func(b *testing.B) {
			for b.Loop() {
				plain[name]()
			}
			perElem(b)
		})
		for _, k := range benchSets(b) {
			b.Run(fmt.Sprintf("%s/%s", name, k.Name()), func(b *testing.B) {
				for b.Loop() {
					switch name {
					case "Exp":
						k.Exp(dst, x)
					case "Sigmoid":
						k.Sigmoid(dst, x)
					case "SiLU":
						copy(dst, x)
						k.SiLU(dst)
					case "SiLUMul":
						k.SiLUMul(dst, x, y)
					case "SigmoidMul":
						copy(dst, y)
						k.SigmoidMul(dst, x)
					}
				}
				perElem(b)
			})
		}
	}
}
