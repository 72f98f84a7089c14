#version 450
// dst[i, rowBase + r] = sum_c w[r, c] * x[i, c] for up to 8 inputs i and a
// weight in a GGML block format (QTYPE): the decode-time matrix-vector
// product of quantized weights. As matvec.comp, one subgroup per weight
// row: lanes stride over the row 8 values at a time, dequantize them in
// float32 (quant.glsl) and reduce with subgroupAdd. Larger batches run as
// several dispatches of 8 inputs from input i0.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QTYPE = 4u;
// ROWS is the number of weight rows a workgroup covers (as in matvec.comp).
layout(constant_id = 2) const uint ROWS = 4;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 3) readonly buffer XV { vec4 x4[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows;     // rows in this weight chunk
	uint cols;     // a multiple of the block size
	uint n;        // inputs, 1..8
	uint rowBase;  // index of the chunk's first row in the whole weight
	uint dstRows;  // row length of dst (rows of the whole weight)
	uint rowBytes; // bytes of a weight row
	uint i0;       // first input of this batch
} p;

#include "quant.glsl"

const uint NMAX = 8;

void main() {
	uint lane = gl_SubgroupInvocationID;
	uint sg = gl_SubgroupSize;
	uint first = flatGroup() * ROWS;
	uint xb = p.cols / 4u;     // vec4s per input row
	uint xo = p.i0 * xb;       // vec4 offset of the batch in x
	uint ng = p.cols / 8u;     // groups of 8 values per row
	for (uint r = first + gl_SubgroupID; r < min(first + ROWS, p.rows); r += gl_NumSubgroups) {
		float acc[NMAX];
		[[unroll]] for (uint i = 0; i < NMAX; i++) {
			acc[i] = 0.0;
		}
		uint ro = r * p.rowBytes;
		for (uint gi = lane; gi < ng; gi += sg) {
			vec4 lo, hi;
			deq8(ro, 8u * gi, lo, hi);
			[[unroll]] for (uint i = 0; i < NMAX; i++) {
				if (i < p.n) {
					acc[i] += dot(lo, x4[xo + i * xb + 2u * gi]) + dot(hi, x4[xo + i * xb + 2u * gi + 1u]);
				}
			}
		}
		[[unroll]] for (uint i = 0; i < NMAX; i++) {
			if (i < p.n) {
				float s = subgroupAdd(acc[i]);
				if (lane == 0u) {
					d[(p.i0 + i) * p.dstRows + p.rowBase + r] = s;
				}
			}
		}
	}
}
