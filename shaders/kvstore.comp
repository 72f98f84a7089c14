#version 450
// Writes the keys and values of n new tokens into the KV caches at
// positions pos..pos+n-1: kc[(pos+t)*width + h*dim + d] = k head h of
// token t, element d (and likewise for v), one thread per element.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer KS { float k[]; };
layout(binding = 1) readonly buffer VS { float v[]; };
layout(binding = 2) writeonly buffer KC { float kc[]; };
layout(binding = 3) writeonly buffer VC { float vc[]; };

layout(push_constant) uniform P {
	uint kOff, kRow, kHead;
	uint vOff, vRow, vHead;
	uint n, kvHeads, dim, pos;
} p;

void main() {
	uint i = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	uint width = p.kvHeads * p.dim;
	if (i >= p.n * width) {
		return;
	}
	uint t = i / width, h = (i % width) / p.dim, d = i % p.dim;
	uint dst = (p.pos + t) * width + h * p.dim + d;
	kc[dst] = k[p.kOff + t * p.kRow + h * p.kHead + d];
	vc[dst] = v[p.vOff + t * p.vRow + h * p.vHead + d];
}
