#version 450
// Causal attention over the KV cache, one workgroup per (query head, token),
// online softmax over blocks of 128 positions. Thread tid owns output
// elements tid and tid + 128 (head dims up to 256).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer QS { float q[]; };
layout(binding = 1) readonly buffer KC { float kc[]; };
layout(binding = 2) readonly buffer VC { float vc[]; };
layout(binding = 3) writeonly buffer OS { float o[]; };

layout(push_constant) uniform P {
	uint qOff, qRow, qHead;
	uint heads, kvHeads, dim;
	uint pos, outRow;
	float scale;
} p;

const uint B = 128;
shared float qsh[256];
shared float sc[B];
shared float red[64];

float wgMax(float v) {
	v = subgroupMax(v);
	if (subgroupElect()) {
		red[gl_SubgroupID] = v;
	}
	barrier();
	float m = red[0];
	for (uint k = 1; k < gl_NumSubgroups; k++) {
		m = max(m, red[k]);
	}
	barrier();
	return m;
}

float wgSum(float v) {
	v = subgroupAdd(v);
	if (subgroupElect()) {
		red[gl_SubgroupID] = v;
	}
	barrier();
	float s = 0.0;
	for (uint k = 0; k < gl_NumSubgroups; k++) {
		s += red[k];
	}
	barrier();
	return s;
}

void main() {
	uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
	uint tid = gl_LocalInvocationID.x;
	uint kvh = h / (p.heads / p.kvHeads);
	uint width = p.kvHeads * p.dim;
	uint qb = p.qOff + t * p.qRow + h * p.qHead;
	for (uint i = tid; i < p.dim; i += B) {
		qsh[i] = q[qb + i];
	}
	barrier();
	uint L = p.pos + t + 1u;
	float m = -1.0 / 0.0;
	float l = 0.0;
	float o0 = 0.0, o1 = 0.0;
	for (uint base = 0; base < L; base += B) {
		uint s = base + tid;
		float score = -1.0 / 0.0;
		if (s < L) {
			uint kb = s * width + kvh * p.dim;
			float acc = 0.0;
			for (uint i = 0; i < p.dim; i++) {
				acc += qsh[i] * kc[kb + i];
			}
			score = acc * p.scale;
		}
		float mnew = max(m, wgMax(score));
		float corr = exp(m - mnew);
		float e = s < L ? exp(score - mnew) : 0.0;
		sc[tid] = e;
		l = l * corr + wgSum(e); // wgSum's barriers also publish sc
		o0 *= corr;
		o1 *= corr;
		uint cnt = min(B, L - base);
		for (uint k = 0; k < cnt; k++) {
			float pk = sc[k];
			uint vb = (base + k) * width + kvh * p.dim;
			if (tid < p.dim) {
				o0 += pk * vc[vb + tid];
			}
			if (tid + B < p.dim) {
				o1 += pk * vc[vb + tid + B];
			}
		}
		barrier();
		m = mnew;
	}
	uint ob = (p.outRow + t) * p.heads * p.dim + h * p.dim;
	if (tid < p.dim) {
		o[ob + tid] = o0 / l;
	}
	if (tid + B < p.dim) {
		o[ob + tid + B] = o1 / l;
	}
}
