#version 450
// x += y, then d = x / sqrt(mean(x²) + eps) * (1 + w), one workgroup per
// row: the residual add and the following RMSNorm as one dispatch. The
// sums of squares are accumulated as norm.comp does, so the result is the
// same as an add followed by the norm.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;

layout(binding = 0) buffer XS { float x[]; };
layout(binding = 1) writeonly buffer DS { float d[]; };
layout(binding = 2) readonly buffer WS { uint w[]; };
layout(binding = 3) readonly buffer YS { float y[]; };

layout(push_constant) uniform P {
	uint n, dim;
	float eps;
} p;

shared float red[64];

void main() {
	uint r = flatGroup();
	if (r >= p.n) {
		return;
	}
	uint b = r * p.dim;
	uint tid = gl_LocalInvocationID.x;
	float ss = 0.0;
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		float v = x[b + i] + y[b + i];
		x[b + i] = v;
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
	float inv = inversesqrt(ss / float(p.dim) + p.eps);
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		// Each thread reads back only the sums it wrote.
		d[b + i] = x[b + i] * inv * (1.0 + WLOAD(w, DTYPE, i));
	}
}
