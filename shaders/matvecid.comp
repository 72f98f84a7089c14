#version 450
// A mixture of experts' indexed product (llama.cpp's mul_mat_id): for
// every pair p (row r's j-th chosen expert e, p = r*k + j),
//   d[p, row] = sum_c W_e[row, c] * x[xr, c],  xr = p (perPair) or r,
// with W a stack of experts' [rows, cols] matrices of dtype DTYPE (a float
// dtype or a GGML block format), expert e at byte (e - e0)*stride of this
// chunk. The pairs come from moeplan.comp's tasks (up to 8 pairs of one
// expert), one per workgroup row, so a task reads its expert's rows once
// for all its pairs and no expert nobody chose is read. As matvec.comp,
// one subgroup per weight row: lanes stride over the row 8 values at a
// time and reduce with subgroupAdd, each pair in its own sum, so a pair's
// result does not depend on the pairs that share its task.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
// QTYPE is the weight's dtype code (compute.DType): F32, F16, BF16 or a
// block format of quant.glsl.
layout(constant_id = 1) const uint QTYPE = 3u;
// ROWS is the number of weight rows a workgroup covers (as in matvec.comp).
layout(constant_id = 2) const uint ROWS = 4;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 1) readonly buffer WV { uvec4 w4[]; };
layout(binding = 2) readonly buffer RS { uint ids[]; };
layout(binding = 3) readonly buffer XV { vec4 x4[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows;     // rows of one expert's matrix
	uint cols;     // a multiple of 8 (and of the block size)
	uint e0, ne;   // the experts of this chunk: e0..e0+ne-1
	uint stride;   // bytes from one expert to the next (a multiple of 16)
	uint rowBytes; // bytes of a weight row
	uint k;        // experts per row
	uint perPair;  // 1: x has a row per pair; 0: a row per row of the step
	uint planOff;  // word offset of the plan in ids
	uint maxTasks;
} p;

#include "quant.glsl"

const uint NMAX = 8;

// load8 returns the 8 values c..c+7 (c a multiple of 8) of the row at byte
// ro.
void load8(uint ro, uint c, out vec4 lo, out vec4 hi) {
	if (QTYPE == DT_F32) {
		uint v = (ro + 4u * c) >> 4;
		lo = uintBitsToFloat(w4[v]);
		hi = uintBitsToFloat(w4[v + 1u]);
	} else if (QTYPE == DT_BF16) {
		uvec4 q = w4[(ro + 2u * c) >> 4];
		lo = uintBitsToFloat(uvec4(q.x << 16, q.x & 0xffff0000u, q.y << 16, q.y & 0xffff0000u));
		hi = uintBitsToFloat(uvec4(q.z << 16, q.z & 0xffff0000u, q.w << 16, q.w & 0xffff0000u));
	} else if (QTYPE == DT_F16) {
		uvec4 q = w4[(ro + 2u * c) >> 4];
		lo = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
		hi = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
	} else {
		deq8(ro, c, lo, hi);
	}
}

void main() {
	uint task = gl_WorkGroupID.y;
	if (task >= ids[p.planOff]) {
		return;
	}
	uint to = p.planOff + 1u + 3u * task;
	uint e = ids[to], s = ids[to + 1u], n = ids[to + 2u];
	if (e < p.e0 || e >= p.e0 + p.ne) {
		return;
	}
	uint sorted = p.planOff + 1u + 3u * p.maxTasks;
	uint pr[NMAX], xo[NMAX];
	uint xb = p.cols / 4u; // vec4s per input row
	[[unroll]] for (uint i = 0; i < NMAX; i++) {
		pr[i] = i < n ? ids[sorted + s + i] : 0u;
		xo[i] = (p.perPair != 0u ? pr[i] : pr[i] / p.k) * xb;
	}
	uint lane = gl_SubgroupInvocationID;
	uint sg = gl_SubgroupSize;
	uint first = gl_WorkGroupID.x * ROWS;
	uint base = (e - p.e0) * p.stride;
	uint ng = p.cols / 8u;
	for (uint r = first + gl_SubgroupID; r < min(first + ROWS, p.rows); r += gl_NumSubgroups) {
		float acc[NMAX];
		[[unroll]] for (uint i = 0; i < NMAX; i++) {
			acc[i] = 0.0;
		}
		uint ro = base + r * p.rowBytes;
		for (uint gi = lane; gi < ng; gi += sg) {
			vec4 lo, hi;
			load8(ro, 8u * gi, lo, hi);
			[[unroll]] for (uint i = 0; i < NMAX; i++) {
				if (i < n) {
					acc[i] += dot(lo, x4[xo[i] + 2u * gi]) + dot(hi, x4[xo[i] + 2u * gi + 1u]);
				}
			}
		}
		[[unroll]] for (uint i = 0; i < NMAX; i++) {
			if (i < n) {
				float sum = subgroupAdd(acc[i]);
				if (lane == 0u) {
					d[pr[i] * p.rows + r] = sum;
				}
			}
		}
	}
}
