#version 450
// Combines the per-split partial results of attention.comp: one workgroup
// per (token, query head) row R = t*heads + h. Split s holds the
// unnormalised output O_s, the running max m_s and the sum l_s of its
// cache positions; the row's result is sum_s e^(m_s - M) O_s divided by
// sum_s e^(m_s - M) l_s with M the largest m_s. Only the splits that start
// before the row's causal limit pos + t + 1 were written.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer PS { float part[]; };
layout(binding = 3) writeonly buffer OS { float o[]; };

layout(push_constant) uniform P {
	uint heads, dim, n, pos, outRow;
	uint splitLen, nsplit, partML;
} p;

void main() {
	uint R = flatGroup();
	if (R >= p.n * p.heads) {
		return;
	}
	uint t = R / p.heads, h = R % p.heads;
	uint used = min(p.nsplit, (p.pos + t + p.splitLen) / p.splitLen); // ceil((pos+t+1) / splitLen)
	uint pb = R * p.nsplit;
	float M = -1.0 / 0.0;
	for (uint s = 0; s < used; s++) {
		M = max(M, part[p.partML + 2u * (pb + s)]);
	}
	float l = 0.0;
	for (uint s = 0; s < used; s++) {
		l += exp(part[p.partML + 2u * (pb + s)] - M) * part[p.partML + 2u * (pb + s) + 1u];
	}
	float inv = 1.0 / l;
	uint ob = (p.outRow + t) * p.heads * p.dim + h * p.dim;
	for (uint d = gl_LocalInvocationID.x; d < p.dim; d += gl_WorkGroupSize.x) {
		float acc = 0.0;
		for (uint s = 0; s < used; s++) {
			acc += exp(part[p.partML + 2u * (pb + s)] - M) * part[(pb + s) * p.dim + d];
		}
		o[ob + d] = acc * inv;
	}
}
