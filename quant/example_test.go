package quant_test

import (
	"fmt"

	"github.com/govinfer/govinfer/quant"
)

// A weight row quantized to Q8_0, dequantized, and multiplied with an
// activation vector by the float twin (exact here) and by the 8-bit path
// (the activations rounded to Q8_0 blocks with an fp16 scale).
func Example() {
	w := make([]float32, 64)
	x := make([]float32, 64)
	for i := range w {
		w[i] = float32(i%3-1) * 127 // block max 127: d = 1 exactly
		x[i] = 0.25 * float32(i%4)
	}
	row := make([]byte, quant.Q8_0.RowBytes(len(w)))
	if err := quant.QuantizeRow(quant.Q8_0, row, w); err != nil {
		panic(err)
	}
	back := make([]float32, len(w))
	if err := quant.DequantizeRow(quant.Q8_0, back, row); err != nil {
		panic(err)
	}
	a := make([]quant.BlockQ8_0, len(x)/32)
	quant.QuantizeQ8_0(a, x)
	fmt.Println(len(row), back[0], back[1], back[2])
	fmt.Println(quant.DotQ8_0(row, x), quant.DotQ8_0Q8_0(row, a))
	// Output:
	// 68 -127 0 127
	// -31.75 -31.498077
}

func ExamplePlan() {
	for _, name := range []string{
		"model.language_model.layers.3.linear_attn.out_proj.weight",
		"model.language_model.layers.4.mlp.down_proj.weight",
		"model.language_model.layers.6.mlp.down_proj.weight",
		"model.language_model.layers.0.linear_attn.in_proj_a.weight",
	} {
		t, why, err := quant.Plan(quant.MixQ4KM, name, 4096, 4096, 32)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%v: %s\n", t, why)
	}
	// Output:
	// Q8_0: linear-attention out_proj, the most quantization-sensitive matrix: Q8_0
	// Q4_K: MLP down projection of layer 4 of 32: Q4_K
	// Q6_K: MLP down projection of layer 6 of 32, one of llama.cpp's use_more_bits layers: Q6_K
	// keep: linear-attention in_proj_a/in_proj_b: kept, as Qwen's FP8 checkpoints keep them
}
