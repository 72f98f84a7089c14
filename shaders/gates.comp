#version 450
// Gated DeltaNet gates: g = -exp(aLog) * softplus(a + dtBias), beta = sigmoid(b).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE_A = DT_BF16;
layout(constant_id = 2) const uint DTYPE_DT = DT_BF16;

layout(binding = 0) writeonly buffer GS { float g[]; };
layout(binding = 1) writeonly buffer BS { float beta[]; };
layout(binding = 2) readonly buffer AS { float a[]; };
layout(binding = 3) readonly buffer BIN { float b[]; };
layout(binding = 4) readonly buffer ALOG { uint alog[]; };
layout(binding = 5) readonly buffer DTB { uint dtb[]; };

layout(push_constant) uniform P { uint n, heads; } p;

float softplus(float v) {
	if (v > 20.0) {
		return v;
	}
	if (v < -15.0) {
		return exp(v); // log(1 + e^v) without the rounding of 1 + e^v
	}
	return log(1.0 + exp(v));
}

void main() {
	uint i = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i >= p.n * p.heads) {
		return;
	}
	uint h = i % p.heads;
	g[i] = -exp(WLOAD(alog, DTYPE_A, h)) * softplus(a[i] + WLOAD(dtb, DTYPE_DT, h));
	beta[i] = sigmoidf(b[i]);
}
