#version 450
// Per-head normalisations, one workgroup per (row, head):
//   MODE 0: d = x / sqrt(mean(x²) + eps) * (1 + w)          (RMSNorm, HeadRMSNorm)
//   MODE 1: d = x / sqrt(mean(x²) + eps) * w * silu(z)      (GatedRMSNorm)
//   MODE 2: d = x / sqrt(sum(x²) + eps)                     (L2Norm)
// d may alias x: each thread rewrites only the elements it read.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;
layout(constant_id = 2) const uint MODE = 0;

layout(binding = 0) readonly buffer XS { float x[]; };
layout(binding = 1) writeonly buffer DS { float d[]; };
layout(binding = 2) readonly buffer WS { uint w[]; };
layout(binding = 3) readonly buffer ZS { float z[]; };

layout(push_constant) uniform P {
	uint n, count, dim;
	uint xOff, xRow, xHead;
	uint dOff, dRow, dHead;
	uint zOff, zRow, zHead;
	float eps;
} p;

shared float red[64];

void main() {
	uint g = flatGroup();
	if (g >= p.n * p.count) {
		return;
	}
	uint r = g / p.count, h = g % p.count;
	uint xb = p.xOff + r * p.xRow + h * p.xHead;
	uint db = p.dOff + r * p.dRow + h * p.dHead;
	uint zb = p.zOff + r * p.zRow + h * p.zHead;
	uint tid = gl_LocalInvocationID.x;
	float ss = 0.0;
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		float v = x[xb + i];
		ss += v * v;
	}
	ss = subgroupAdd(ss);
	if (subgroupElect()) {
		red[gl_SubgroupID] = ss;
	}
	barrier();
	ss = 0.0;
	for (uint k = 0; k < gl_NumSubgroups; k++) {
		ss += red[k];
	}
	float inv = MODE == 2u ? inversesqrt(ss + p.eps) : inversesqrt(ss / float(p.dim) + p.eps);
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		float v = x[xb + i] * inv;
		if (MODE == 0u) {
			v *= 1.0 + WLOAD(w, DTYPE, i);
		} else if (MODE == 1u) {
			v *= WLOAD(w, DTYPE, i) * siluf(z[zb + i]);
		}
		d[db + i] = v;
	}
}
