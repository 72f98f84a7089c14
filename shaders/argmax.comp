#version 450
// Index of the largest element of each row (lowest index on ties, NaNs
// never chosen), one workgroup per row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer XS { float x[]; };
layout(binding = 1) writeonly buffer DS { int d[]; };

layout(push_constant) uniform P { uint rows, dim, dOff; } p;

shared float sv[256];
shared uint si[256];

const uint NONE = 0xffffffffu;

// better reports whether (v1, i1) beats (v2, i2).
bool better(float v1, uint i1, float v2, uint i2) {
	if (i1 == NONE) {
		return false;
	}
	if (i2 == NONE) {
		return true;
	}
	return v1 > v2 || (v1 == v2 && i1 < i2);
}

void main() {
	uint r = flatGroup();
	if (r >= p.rows) {
		return;
	}
	uint tid = gl_LocalInvocationID.x;
	float bv = 0.0;
	uint bi = NONE;
	for (uint i = tid; i < p.dim; i += 256u) {
		float v = x[r * p.dim + i];
		if (!isnan(v) && better(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	sv[tid] = bv;
	si[tid] = bi;
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (tid < s && better(sv[tid + s], si[tid + s], sv[tid], si[tid])) {
			sv[tid] = sv[tid + s];
			si[tid] = si[tid + s];
		}
		barrier();
	}
	if (tid == 0u) {
		d[p.dOff + r] = si[0] == NONE ? 0 : int(si[0]);
	}
}
