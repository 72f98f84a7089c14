#version 450
// Elementwise d = f(a, b) over rows x count heads x dim elements, each
// operand with its own (offset, row stride, head stride) layout:
//   MODE 0: d = silu(a) * b      (SiLUMul)
//   MODE 1: d = a + b            (Add)
//   MODE 2: d = a * sigmoid(b)   (SigmoidMul)
// d may alias a or b: each thread reads its inputs before its one write.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;

layout(binding = 0) writeonly buffer DS { float d[]; };
layout(binding = 1) readonly buffer AS { float a[]; };
layout(binding = 2) readonly buffer BS { float b[]; };

layout(push_constant) uniform P {
	uint rows, count, dim;
	uint dOff, dRow, dHead;
	uint aOff, aRow, aHead;
	uint bOff, bRow, bHead;
} p;

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.rows * p.count * p.dim) {
		return;
	}
	uint i = g % p.dim, h = (g / p.dim) % p.count, r = g / (p.dim * p.count);
	float av = a[p.aOff + r * p.aRow + h * p.aHead + i];
	float bv = b[p.bOff + r * p.bRow + h * p.bHead + i];
	float v;
	if (MODE == 0u) {
		v = siluf(av) * bv;
	} else if (MODE == 1u) {
		v = av + bv;
	} else {
		v = av * sigmoidf(bv);
	}
	d[p.dOff + r * p.dRow + h * p.dHead + i] = v;
}
