#version 450
// Rotate-half rotary embedding of the first rotary elements of each head,
// in place; table holds per row [cos(rotary/2) | sin(rotary/2)].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) buffer XS { float x[]; };
layout(binding = 1) readonly buffer TS { float table[]; };

layout(push_constant) uniform P {
	uint n, count, off, rowStride, headStride, rotary, tableOff;
} p;

void main() {
	uint half_ = p.rotary / 2u;
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.n * p.count * half_) {
		return;
	}
	uint i = g % half_, h = (g / half_) % p.count, r = g / (half_ * p.count);
	uint base = p.off + r * p.rowStride + h * p.headStride;
	float c = table[p.tableOff + r * p.rotary + i];
	float s = table[p.tableOff + r * p.rotary + half_ + i];
	float a = x[base + i], b = x[base + i + half_];
	x[base + i] = a * c - b * s;
	x[base + i + half_] = b * c + a * s;
}
