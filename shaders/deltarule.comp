#version 450
// Recurrent gated delta rule for one sequence. Workgroup (column block,
// value head); each thread owns one column j of the head's [Dk, Dv] state,
// kept in registers across the n tokens:
//   S = exp(g) S;  u = beta (v - Sᵀk);  S += k uᵀ;  o = Sᵀ (q * qScale)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DK = 128;

layout(binding = 0) readonly buffer QKV { float qkv[]; };
layout(binding = 1) readonly buffer GS { float g[]; };
layout(binding = 2) readonly buffer BS { float beta[]; };
layout(binding = 3) writeonly buffer OS { float o[]; };
layout(binding = 4) buffer SS { float st[]; };

layout(push_constant) uniform P {
	uint qOff, qRow, qHead;
	uint kOff, kRow, kHead;
	uint vOff, vRow, vHead;
	uint gateRow, outRow, n;
	float qScale;
	uint nk, nv, dv;
} p;

shared float ks[DK];
shared float qs[DK];

void main() {
	uint h = gl_WorkGroupID.y;
	uint j = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	uint tid = gl_LocalInvocationID.x;
	bool live = j < p.dv;
	uint kh = h / (p.nv / p.nk);
	uint sb = h * DK * p.dv + j;
	float s[DK];
	if (live) {
		for (uint i = 0; i < DK; i++) {
			s[i] = st[sb + i * p.dv];
		}
	}
	for (uint t = 0; t < p.n; t++) {
		barrier();
		for (uint i = tid; i < DK; i += gl_WorkGroupSize.x) {
			ks[i] = qkv[p.kOff + t * p.kRow + kh * p.kHead + i];
			qs[i] = qkv[p.qOff + t * p.qRow + kh * p.qHead + i] * p.qScale;
		}
		barrier();
		if (live) {
			uint gi = (p.gateRow + t) * p.nv + h;
			float decay = exp(g[gi]);
			float u = 0.0;
			for (uint i = 0; i < DK; i++) {
				s[i] *= decay;
				u += s[i] * ks[i];
			}
			u = beta[gi] * (qkv[p.vOff + t * p.vRow + h * p.vHead + j] - u);
			float acc = 0.0;
			for (uint i = 0; i < DK; i++) {
				s[i] += ks[i] * u;
				acc += s[i] * qs[i];
			}
			o[(p.outRow + t) * p.nv * p.dv + h * p.dv + j] = acc;
		}
	}
	if (live) {
		for (uint i = 0; i < DK; i++) {
			st[sb + i * p.dv] = s[i];
		}
	}
}
