#version 450
// Depthwise causal conv1d + SiLU over n tokens, one thread per channel,
// in place, with the last kernel-1 raw inputs kept in state. A dispatch
// covers the chCount channels from chBase whose taps are in w (one chunk of
// a weight split by rows).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;

layout(binding = 0) buffer XS { float x[]; };
layout(binding = 1) readonly buffer WS { uint w[]; };
layout(binding = 2) buffer SS { float st[]; };

layout(push_constant) uniform P {
	uint row, rowStride, n, channels, kernel, chBase, chCount;
} p;

const uint KMAX = 16;

void main() {
	uint lc = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (lc >= p.chCount) {
		return;
	}
	uint c = p.chBase + lc;
	uint k1 = p.kernel - 1u;
	float win[KMAX], taps[KMAX];
	for (uint j = 0; j < p.kernel; j++) {
		taps[j] = WLOAD(w, DTYPE, lc * p.kernel + j);
	}
	for (uint j = 0; j < k1; j++) {
		win[j] = st[j * p.channels + c];
	}
	for (uint t = 0; t < p.n; t++) {
		uint i = (p.row + t) * p.rowStride + c;
		win[k1] = x[i];
		float s = 0.0;
		for (uint j = 0; j < p.kernel; j++) {
			s += taps[j] * win[j];
		}
		x[i] = siluf(s);
		for (uint j = 0; j < k1; j++) {
			win[j] = win[j + 1u];
		}
	}
	for (uint j = 0; j < k1; j++) {
		st[j * p.channels + c] = win[j];
	}
}
