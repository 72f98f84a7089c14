#version 450
// Weighted sums of rows (compute.Backend.SumRows): row r of d is
//   sum over j in [start[r], start[r+1]) of weight[j] * s[src[j], :],
// the terms added in order of j from the first product, one thread per
// element of a result row. start, src and weight's bits are read from the
// words of the ring buffer at startOff, srcOff and wOff.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer DS { float d[]; };
layout(binding = 1) readonly buffer SS { float s[]; };
layout(binding = 2) readonly buffer RS { uint ring[]; };

layout(push_constant) uniform P {
	uint rows, dim;
	uint startOff, srcOff, wOff;
} p;

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.rows * p.dim) {
		return;
	}
	uint r = g / p.dim, i = g % p.dim;
	uint lo = ring[p.startOff + r], hi = ring[p.startOff + r + 1u];
	float acc = 0.0;
	for (uint j = lo; j < hi; j++) {
		float t = uintBitsToFloat(ring[p.wOff + j]) * s[ring[p.srcOff + j] * p.dim + i];
		acc = j == lo ? t : acc + t;
	}
	d[g] = acc;
}
