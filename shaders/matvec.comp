#version 450
// dst[i, rowBase + r] = sum_c w[r, c] * x[i, c] for up to 8 inputs i: the
// decode-time matrix-vector product. One subgroup per weight row: lanes
// stride over the columns (8 at a time with 128-bit loads when the row
// length allows) and reduce with subgroupAdd; no shared memory or barriers.
// Larger batches run as several dispatches of 8 inputs from input i0.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;
// ROWS is the number of weight rows a workgroup covers; the host sets it to
// the workgroup size over the subgroup size so each subgroup takes one row,
// but any actual subgroup size is correct (subgroups loop over the rows).
layout(constant_id = 2) const uint ROWS = 4;
// UNROLL is how many 128-bit weight loads each lane issues per iteration
// of the 16-bit path (more loads in flight; the GPU check compares 1 and 2).
layout(constant_id = 3) const uint UNROLL = 1;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 1) readonly buffer WV { uvec4 w4[]; };
layout(binding = 2) readonly buffer XS { float x[]; };
layout(binding = 3) readonly buffer XV { vec4 x4[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows;    // rows in this weight chunk
	uint cols;
	uint n;       // inputs, 1..8
	uint rowBase; // index of the chunk's first row in the whole weight
	uint dstRows; // row length of dst (rows of the whole weight)
	uint vec;     // 1: cols allows 128-bit loads
	uint i0;      // first input of this batch
} p;

const uint NMAX = 8;

// unpack8 converts the eight 16-bit weights of q to floats.
void unpack8(uvec4 q, out vec4 lo, out vec4 hi) {
	if (DTYPE == DT_BF16) {
		lo = uintBitsToFloat(uvec4(q.x << 16, q.x & 0xffff0000u, q.y << 16, q.y & 0xffff0000u));
		hi = uintBitsToFloat(uvec4(q.z << 16, q.z & 0xffff0000u, q.w << 16, q.w & 0xffff0000u));
	} else {
		lo = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
		hi = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
	}
}

void main() {
	uint lane = gl_SubgroupInvocationID;
	uint xo = p.i0 * p.cols; // element offset of the batch in x
	uint sg = gl_SubgroupSize;
	uint first = flatGroup() * ROWS;
	for (uint r = first + gl_SubgroupID; r < min(first + ROWS, p.rows); r += gl_NumSubgroups) {
		float acc[NMAX];
		[[unroll]] for (uint i = 0; i < NMAX; i++) {
			acc[i] = 0.0;
		}
		if (p.vec != 0u) {
			if (DTYPE == DT_F32) {
				uint nb = p.cols / 4u;
				uint wb = r * nb;
				for (uint b = lane; b < nb; b += sg) {
					vec4 wv = uintBitsToFloat(w4[wb + b]);
					[[unroll]] for (uint i = 0; i < NMAX; i++) {
						if (i < p.n) {
							acc[i] += dot(wv, x4[(xo >> 2) + i * nb + b]);
						}
					}
				}
			} else {
				uint nb = p.cols / 8u;
				uint wb = r * nb;
				uint xb = p.cols / 4u;
				uint b = lane;
				// UNROLL loads per lane, all issued before any is used; then
				// the remaining blocks one at a time.
				for (; UNROLL > 1u && b + (UNROLL - 1u) * sg < nb; b += UNROLL * sg) {
					uvec4 qs[4];
					[[unroll]] for (uint u = 0; u < UNROLL; u++) {
						qs[u] = w4[wb + b + u * sg];
					}
					[[unroll]] for (uint u = 0; u < UNROLL; u++) {
						uint bu = b + u * sg;
						vec4 lo, hi;
						unpack8(qs[u], lo, hi);
						[[unroll]] for (uint i = 0; i < NMAX; i++) {
							if (i < p.n) {
								acc[i] += dot(lo, x4[(xo >> 2) + i * xb + 2u * bu]) + dot(hi, x4[(xo >> 2) + i * xb + 2u * bu + 1u]);
							}
						}
					}
				}
				for (; b < nb; b += sg) {
					vec4 lo, hi;
					unpack8(w4[wb + b], lo, hi);
					[[unroll]] for (uint i = 0; i < NMAX; i++) {
						if (i < p.n) {
							acc[i] += dot(lo, x4[(xo >> 2) + i * xb + 2u * b]) + dot(hi, x4[(xo >> 2) + i * xb + 2u * b + 1u]);
						}
					}
				}
			}
		} else {
			uint wb = r * p.cols;
			for (uint c = lane; c < p.cols; c += sg) {
				float wv = WLOAD(w, DTYPE, wb + c);
				[[unroll]] for (uint i = 0; i < NMAX; i++) {
					if (i < p.n) {
						acc[i] += wv * x[xo + i * p.cols + c];
					}
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
