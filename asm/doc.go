// Package asm holds the numeric inner loops of the CPU backend: dot products,
// matrix-vector and matrix-matrix products over bf16, f16 and f32 weights with
// f32 activations and f32 accumulation, the f32 vector helpers axpy and scale,
// the elementwise activations (exp, sigmoid, SiLU and the gated products
// SiLUMul and SigmoidMul) on a float32 exponential accurate to about 1 ulp,
// and the products with GGML-quantized weights (Q8_0, Q4_K, Q5_K, Q6_K) on 8-bit
// quantized inputs, bit for bit those of package quant's integer dot
// products.
//
// Every kernel has a plain Go twin that states its contract and serves as the
// fallback. Hand-written assembly versions exist for amd64 (AVX2+FMA+F16C, and
// AVX-512 F/BW/VL with an AVX512_BF16 path using VDPBF16PS; the AVX-512
// sets run the AVX2 quantized kernels on GGML's layout, and with
// AVX512_VNNI the packed products of Q8_0, Q4_K and Q6_K weights, 16 rows
// interleaved: see PackQ) and for arm64 (NEON, with SDOT for the quantized
// products where FEAT_DotProd is present). The assembly lives in
// generated files; run "go generate" in this directory after changing
// internal/asmgen. Building with the "noasm" tag leaves only the Go twins.
//
// A kernel set is a [Kernels] value built by [New] from a [Features] mask, so
// the pure-Go, AVX2 and AVX-512 sets can be used side by side; nothing is
// chosen through package-level state. All kernels are safe for concurrent use
// on disjoint outputs and do not allocate.
//
// BF16 values are stored as the top 16 bits of a float32 (uint16); F16 values
// are IEEE 754 binary16 (uint16).
package asm

//go:generate go run ./internal/asmgen -out .
