#version 450
// dst[i, :] = table[ids[i], :] for a table in a GGML block format (QTYPE)
// and the ids that fall in this chunk of it (rows rowBase ..
// rowBase+rows-1): one thread dequantizes 8 values (quant.glsl).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QTYPE = 4u;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 1) readonly buffer IDS { int ids[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint n;
	uint cols;
	uint rowBase;
	uint rows;
	uint idsOff;
	uint rowBytes;
} p;

#include "quant.glsl"

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	uint ng = p.cols / 8u;
	if (g >= p.n * ng) {
		return;
	}
	uint i = g / ng, c = 8u * (g % ng);
	int id = ids[p.idsOff + i] - int(p.rowBase);
	if (id < 0 || id >= int(p.rows)) {
		return;
	}
	vec4 lo, hi;
	deq8(uint(id) * p.rowBytes, c, lo, hi);
	uint o = i * p.cols + c;
	[[unroll]] for (uint e = 0; e < 4; e++) {
		d[o + e] = lo[e];
		d[o + 4u + e] = hi[e];
	}
}
