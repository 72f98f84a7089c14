#version 450
// LayerNorm with weight and bias, one workgroup per row:
//   d = (x - mean(x)) / sqrt(var(x) + eps) * w + b
// with the row's mean and (biased) variance, the variance from a second
// pass over the centred values. d may alias x: each thread rewrites only
// the elements it read, after every thread's last read of the row.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WDT = DT_BF16; // the weight's dtype
layout(constant_id = 2) const uint BDT = DT_BF16; // the bias's dtype

layout(binding = 0) readonly buffer XS { float x[]; };
layout(binding = 1) writeonly buffer DS { float d[]; };
layout(binding = 2) readonly buffer WS { uint w[]; };
layout(binding = 3) readonly buffer BS { uint bias[]; };

layout(push_constant) uniform P {
	uint n, dim;
	float eps;
} p;

shared float red[64];

// rowSum returns the sum of v over the workgroup.
float rowSum(float v) {
	v = subgroupAdd(v);
	if (subgroupElect()) {
		red[gl_SubgroupID] = v;
	}
	barrier();
	float s = 0.0;
	for (uint k = 0; k < gl_NumSubgroups; k++) {
		s += red[k];
	}
	barrier(); // red is reused by the next sum
	return s;
}

void main() {
	uint r = flatGroup();
	if (r >= p.n) {
		return;
	}
	uint base = r * p.dim;
	uint tid = gl_LocalInvocationID.x;
	float s = 0.0;
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		s += x[base + i];
	}
	float mean = rowSum(s) / float(p.dim);
	float ss = 0.0;
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		float e = x[base + i] - mean;
		ss += e * e;
	}
	float inv = inversesqrt(rowSum(ss) / float(p.dim) + p.eps);
	for (uint i = tid; i < p.dim; i += gl_WorkGroupSize.x) {
		d[base + i] = (x[base + i] - mean) * inv * WLOAD(w, WDT, i) + WLOAD(bias, BDT, i);
	}
}
