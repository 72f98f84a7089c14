#version 450
// dst[i, :] = table[ids[i], :] for the ids that fall in this chunk of the
// table (rows rowBase .. rowBase+rows-1).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 1) readonly buffer IDS { int ids[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint n;
	uint cols;
	uint rowBase;
	uint rows;
	uint idsOff;
} p;

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.n * p.cols) {
		return;
	}
	uint i = g / p.cols, c = g % p.cols;
	int id = ids[p.idsOff + i] - int(p.rowBase);
	if (id < 0 || id >= int(p.rows)) {
		return;
	}
	d[g] = WLOAD(w, DTYPE, uint(id) * p.cols + c);
}
