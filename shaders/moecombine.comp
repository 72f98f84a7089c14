#version 450
// A mixture of experts' output, one thread per element: for n rows of dim,
//   d[r] = sum_j w[r*k + j] * eo[r*k + j] + sigmoid(gate[r]) * d[r],
// d holding the shared expert's output on entry; the terms are added in
// order of j from the first product, the shared expert's last (as
// compute.Backend.SumRows adds the host path's). The weights' bits are
// read from ids at wOff (moetopk.comp's).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer ES { float eo[]; };
layout(binding = 1) readonly buffer GS { float gate[]; };
layout(binding = 2) readonly buffer RS { uint ids[]; };
layout(binding = 4) buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows, dim, k;
	uint wOff;
} p;

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.rows * p.dim) {
		return;
	}
	uint r = g / p.dim, i = g % p.dim;
	float acc = 0.0;
	for (uint j = 0u; j < p.k; j++) {
		uint q = r * p.k + j;
		float t = uintBitsToFloat(ids[p.wOff + q]) * eo[q * p.dim + i];
		acc = j == 0u ? t : acc + t;
	}
	acc += sigmoidf(gate[r]) * d[g];
	d[g] = acc;
}
