#version 450
// x[r, i] += b[i] for n rows of dim, in place, one thread per element.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BDT = DT_BF16; // the bias's dtype

layout(binding = 0) buffer XS { float x[]; };
layout(binding = 1) readonly buffer BS { uint bias[]; };

layout(push_constant) uniform P {
	uint n, dim;
} p;

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.n * p.dim) {
		return;
	}
	x[g] += WLOAD(bias, BDT, g % p.dim);
}
