package main

import (
	"strings"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/internal/machine"
)

// TestBenchInt8Peak checks that a quantized model's prefill is measured
// against the int8 dot peak on every kernel set with packed quantized
// products (AVX512_VNNI, AVX-VNNI or AVX2), and against the FMA peak otherwise, and
// that the table names the int8 loop of the kernel set.
func TestBenchInt8Peak(t *testing.T) {
	rep := machine.Report{Int8: true, FMA: machine.Rate{Value: 100}, DotInt8: machine.Rate{Value: 400}, DotInt8One: machine.Rate{Value: 200}}
	for _, k := range []*asm.Kernels{asm.Generic(), asm.New(asm.Features{AVX2: true}), asm.New(asm.Features{AVX2: true, AVXVNNI: true}), asm.Detect()} {
		for _, quantized := range []bool{false, true} {
			res := benchResult{PrefillGFLOPS: 80}
			res.setMachine(rep, k, false, false, quantized)
			want, frac := "fma_f32", 0.8
			if quantized && (k.Features().AVX2 || k.Features().AVX512VNNI) {
				want, frac = "dot_int8", 0.2
			}
			if res.PrefillPeak != want || res.PrefillPeakFraction != frac {
				t.Errorf("%s quantized=%v: prefill_peak %q at %v, want %q at %v", k.Name(), quantized, res.PrefillPeak, res.PrefillPeakFraction, want, frac)
			}
			var b strings.Builder
			res.print(&b)
			loop := "VPMADDUBSW+VPMADDWD ymm"
			if k.Features().AVX512VNNI {
				loop = "VPDPBUSD zmm"
			} else if k.Features().AVXVNNI {
				loop = "VPDPBUSD ymm, AVX-VNNI"
			}
			if !strings.Contains(b.String(), "int8 dot ") || !strings.Contains(b.String(), loop) {
				t.Errorf("%s: table without the int8 peak of %s:\n%s", k.Name(), loop, b.String())
			}
		}
	}
}
