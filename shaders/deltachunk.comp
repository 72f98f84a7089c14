#version 450
// Chunked gated delta rule for prefill: one sequence, a window of nc chunks
// of C = 64 tokens starting at token t0, in three dispatches selected by
// the MODE constant (HF's torch_chunk_gated_delta_rule in its WY form).
// For a chunk of L tokens starting from state S0 ([dk, dv]), with G_r the
// cumulative log decay within the chunk and q already scaled by qScale:
//
//   (I - A) U0 = diag(beta) V,  (I - A) W = diag(beta e^G) K,
//       A[s][j] = -beta_s e^{G_s-G_j} (k_s·k_j) for j < s
//   u = U0 - W S0                        (the corrected values)
//   o_r = e^{G_r} S0ᵀ q_r + Σ_{s<=r} e^{G_r-G_s} (q_r·k_s) u_s
//   S = e^{G_last} S0 + Σ_s e^{G_last-G_s} k_s u_sᵀ
//
// MODE 0 (prep), workgroup (chunk, value head), all chunks in parallel:
//   cumulative decays G, the masked decayed query-key matrix M, and U0 and
//   W by forward substitution, one column per thread.
// MODE 1 (state), workgroup (column tile of BV, value head), sequential
//   over the chunks: saves each chunk's starting state H, replaces U0 by
//   u = U0 - W H, and advances the state; reads and writes st.
// MODE 2 (out), workgroup (chunk, value head, column tile of 64), all
//   chunks in parallel: o = diag(e^G) Q H + M u.
//
// Scratch sc (float offsets in push constants), per chunk c and value head
// h, ch = c*nv + h: U [ch][C][dv], W [ch][C][dk], M [ch][C][C], G [ch][C],
// H [ch][dk][dv]. Rows of a short last chunk are zero padded (g = 0,
// beta = 0, k = q = v = 0), which adds nothing.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define C 64u  // tokens per chunk
#define NT 128u // threads per workgroup
#define KT 16u  // contraction tile

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint MODE = 0;
// DK is dk rounded up to a power of two in [16, 256]; BV (MODE 1) is the
// number of state columns per workgroup, with DK*BV <= 4096.
layout(constant_id = 1) const uint DK = 128;
layout(constant_id = 2) const uint BV = 32;

layout(binding = 0) readonly buffer QKV { float qkv[]; };
layout(binding = 1) readonly buffer GS { float g[]; };
layout(binding = 2) readonly buffer BS { float beta[]; };
layout(binding = 3) writeonly buffer OS { float o[]; };
layout(binding = 4) buffer SS { float st[]; };
layout(binding = 5) buffer SC { float sc[]; };

layout(push_constant) uniform P {
	uint qOff, qRow, qHead;
	uint kOff, kRow, kHead;
	uint vOff, vRow, vHead;
	uint gateRow, outRow, n; // n: tokens of the whole sequence
	float qScale;
	uint nk, nv, dk, dv;
	uint t0, nc; // the window: first token, number of chunks
	uint uOff, wOff, mOff, gOff, hOff;
} p;

// Largest use: MODE 1 with S [DK*BV] + u [C*BV] + tile [1024] + G [C].
shared float sh[4096 + 2048 + 1024 + 64];

float kAt(uint t, uint kh, uint i) { return qkv[p.kOff + t * p.kRow + kh * p.kHead + i]; }
float qAt(uint t, uint kh, uint i) { return qkv[p.qOff + t * p.qRow + kh * p.qHead + i]; }
float vAt(uint t, uint h, uint j) { return qkv[p.vOff + t * p.vRow + h * p.vHead + j]; }

void prep() {
	const uint SA = 0u, SK = C * C, SQ = SK + C * KT, SG = SQ + C * KT, SB = SG + C;
	uint c = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
	uint kh = h / (p.nv / p.nk);
	uint tb = p.t0 + c * C;
	uint L = min(C, p.n - tb);
	uint ch = c * p.nv + h;
	if (tid < C) {
		float gv = 0.0, bv = 0.0;
		if (tid < L) {
			uint gi = (p.gateRow + tb + tid) * p.nv + h;
			gv = g[gi];
			bv = beta[gi];
		}
		sh[SG + tid] = gv;
		sh[SB + tid] = bv;
	}
	barrier();
	if (tid == 0u) {
		float acc = 0.0;
		for (uint r = 0u; r < C; r++) {
			acc += sh[SG + r];
			sh[SG + r] = acc;
		}
	}
	barrier();
	if (tid < C) {
		sc[p.gOff + ch * C + tid] = sh[SG + tid];
	}
	// k_r·k_col and q_r·k_col for col = tid % C, r = tid / C + 2m.
	uint col = tid % C, r0 = tid / C;
	float kk[C / 2u], qk[C / 2u];
	for (uint m = 0u; m < C / 2u; m++) {
		kk[m] = 0.0;
		qk[m] = 0.0;
	}
	for (uint i0 = 0u; i0 < p.dk; i0 += KT) {
		barrier();
		for (uint e = tid; e < C * KT; e += NT) {
			uint r = e / KT, i = i0 + e % KT;
			float kv = 0.0, qv = 0.0;
			if (r < L && i < p.dk) {
				kv = kAt(tb + r, kh, i);
				qv = qAt(tb + r, kh, i);
			}
			sh[SK + e] = kv;
			sh[SQ + e] = qv;
		}
		barrier();
		for (uint ii = 0u; ii < KT; ii++) {
			float kc = sh[SK + col * KT + ii];
			for (uint m = 0u; m < C / 2u; m++) {
				uint r = r0 + 2u * m;
				kk[m] += sh[SK + r * KT + ii] * kc;
				qk[m] += sh[SQ + r * KT + ii] * kc;
			}
		}
	}
	// A (strictly lower) into shared memory; M (lower, with the diagonal)
	// to the scratch.
	for (uint m = 0u; m < C / 2u; m++) {
		uint r = r0 + 2u * m;
		float d = col <= r ? exp(sh[SG + r] - sh[SG + col]) : 0.0;
		sh[SA + r * C + col] = col < r ? -sh[SB + r] * d * kk[m] : 0.0;
		sc[p.mOff + ch * C * C + r * C + col] = d * p.qScale * qk[m];
	}
	barrier();
	// Forward substitution, one right-hand-side column per thread: columns
	// 0..dv-1 are beta v (giving U0), the rest beta e^G k (giving W).
	for (uint cc = tid; cc < p.dv + p.dk; cc += NT) {
		bool isV = cc < p.dv;
		float x[C];
		for (uint s = 0u; s < C; s++) {
			float v = 0.0;
			if (s < L) {
				v = isV ? sh[SB + s] * vAt(tb + s, h, cc) : sh[SB + s] * exp(sh[SG + s]) * kAt(tb + s, kh, cc - p.dv);
			}
			for (uint j = 0u; j < s; j++) {
				v += sh[SA + s * C + j] * x[j];
			}
			x[s] = v;
			if (isV) {
				sc[p.uOff + (ch * C + s) * p.dv + cc] = v;
			} else {
				sc[p.wOff + (ch * C + s) * p.dk + cc - p.dv] = v;
			}
		}
	}
}

void state() {
	const uint SS = 0u, SU = DK * BV, ST = SU + C * BV, SG = ST + 1024u;
	const uint RG = NT / BV;     // row groups
	const uint KR = 1024u / DK;  // key rows per tile
	uint jt = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
	uint kh = h / (p.nv / p.nk);
	uint j = tid % BV, rg = tid / BV;
	uint jg = jt * BV + j;
	bool live = jg < p.dv;
	uint sb = h * p.dk * p.dv + jg;
	// The thread's rows i = rg + RG*m of the state, in registers; step 1
	// reads the whole tile from shared memory.
	float s[32];
	[[unroll]] for (uint m = 0u; m < DK / RG; m++) {
		uint i = rg + RG * m;
		s[m] = live && i < p.dk ? st[sb + i * p.dv] : 0.0;
	}
	for (uint c = 0u; c < p.nc; c++) {
		uint tb = p.t0 + c * C;
		uint L = min(C, p.n - tb);
		uint ch = c * p.nv + h;
		barrier();
		if (tid < C) {
			sh[SG + tid] = sc[p.gOff + ch * C + tid];
		}
		[[unroll]] for (uint m = 0u; m < DK / RG; m++) {
			uint i = rg + RG * m;
			sh[SS + i * BV + j] = s[m];
			if (live && i < p.dk) {
				sc[p.hOff + ch * p.dk * p.dv + i * p.dv + jg] = s[m];
			}
		}
		// u = U0 - W S for rows s = rg + RG*m.
		float acc[C / 4u];
		for (uint m = 0u; m < C / RG; m++) {
			acc[m] = 0.0;
		}
		for (uint i0 = 0u; i0 < p.dk; i0 += KT) {
			barrier();
			for (uint e = tid; e < C * KT; e += NT) {
				uint s = e / KT, i = i0 + e % KT;
				sh[ST + e] = s < L && i < p.dk ? sc[p.wOff + (ch * C + s) * p.dk + i] : 0.0;
			}
			barrier();
			for (uint ii = 0u; ii < KT; ii++) {
				float sv = sh[SS + (i0 + ii) * BV + j];
				[[unroll]] for (uint m = 0u; m < C / RG; m++) {
					acc[m] += sh[ST + (rg + RG * m) * KT + ii] * sv;
				}
			}
		}
		for (uint m = 0u; m < C / RG; m++) {
			uint s = rg + RG * m;
			float u = 0.0;
			if (live && s < L) {
				uint ui = p.uOff + (ch * C + s) * p.dv + jg;
				u = sc[ui] - acc[m];
				sc[ui] = u;
			}
			sh[SU + s * BV + j] = u;
		}
		barrier();
		// S = e^{G_last} S + Σ_s e^{G_last-G_s} k_s u_sᵀ; each thread
		// updates its own rows i = rg + RG*m.
		float gl = sh[SG + C - 1u];
		float dl = exp(gl);
		[[unroll]] for (uint m = 0u; m < DK / RG; m++) {
			s[m] *= dl;
		}
		for (uint s0 = 0u; s0 < L; s0 += KR) {
			barrier();
			for (uint e = tid; e < KR * DK; e += NT) {
				uint s = s0 + e / DK, i = e % DK;
				sh[ST + e] = s < L && i < p.dk ? exp(gl - sh[SG + s]) * kAt(tb + s, kh, i) : 0.0;
			}
			barrier();
			for (uint ss = 0u; ss < KR; ss++) {
				float u = sh[SU + (s0 + ss) * BV + j];
				[[unroll]] for (uint m = 0u; m < DK / RG; m++) {
					s[m] += sh[ST + ss * DK + rg + RG * m] * u;
				}
			}
		}
	}
	[[unroll]] for (uint m = 0u; m < DK / RG; m++) {
		uint i = rg + RG * m;
		if (live && i < p.dk) {
			st[sb + i * p.dv] = s[m];
		}
	}
}

void outp() {
	const uint BO = 64u; // output columns per workgroup
	const uint SA = 0u, SB = C * KT, SG = SB + KT * BO;
	uint c = gl_WorkGroupID.x, h = gl_WorkGroupID.y, jt = gl_WorkGroupID.z, tid = gl_LocalInvocationID.x;
	uint kh = h / (p.nv / p.nk);
	uint tb = p.t0 + c * C;
	uint L = min(C, p.n - tb);
	uint ch = c * p.nv + h;
	uint j = tid % BO, r0 = tid / BO; // rows r0 + 2m
	uint jg = jt * BO + j;
	if (tid < C) {
		sh[SG + tid] = sc[p.gOff + ch * C + tid];
	}
	float acc[C / 2u];
	for (uint m = 0u; m < C / 2u; m++) {
		acc[m] = 0.0;
	}
	// Q H over the key dimension.
	for (uint i0 = 0u; i0 < p.dk; i0 += KT) {
		barrier();
		for (uint e = tid; e < C * KT; e += NT) {
			uint r = e / KT, i = i0 + e % KT;
			sh[SA + e] = r < L && i < p.dk ? qAt(tb + r, kh, i) : 0.0;
		}
		for (uint e = tid; e < KT * BO; e += NT) {
			uint i = i0 + e / BO, jj = jt * BO + e % BO;
			sh[SB + e] = i < p.dk && jj < p.dv ? sc[p.hOff + ch * p.dk * p.dv + i * p.dv + jj] : 0.0;
		}
		barrier();
		for (uint ii = 0u; ii < KT; ii++) {
			float sv = sh[SB + ii * BO + j];
			for (uint m = 0u; m < C / 2u; m++) {
				acc[m] += sh[SA + (r0 + 2u * m) * KT + ii] * sv;
			}
		}
	}
	for (uint m = 0u; m < C / 2u; m++) {
		acc[m] *= exp(sh[SG + r0 + 2u * m]) * p.qScale;
	}
	// + M u over the chunk's tokens.
	for (uint s0 = 0u; s0 < L; s0 += KT) {
		barrier();
		for (uint e = tid; e < C * KT; e += NT) {
			uint r = e / KT, s = s0 + e % KT;
			sh[SA + e] = sc[p.mOff + (ch * C + r) * C + s];
		}
		for (uint e = tid; e < KT * BO; e += NT) {
			uint s = s0 + e / BO, jj = jt * BO + e % BO;
			sh[SB + e] = s < L && jj < p.dv ? sc[p.uOff + (ch * C + s) * p.dv + jj] : 0.0;
		}
		barrier();
		for (uint ss = 0u; ss < KT; ss++) {
			float u = sh[SB + ss * BO + j];
			for (uint m = 0u; m < C / 2u; m++) {
				acc[m] += sh[SA + (r0 + 2u * m) * KT + ss] * u;
			}
		}
	}
	if (jg < p.dv) {
		for (uint m = 0u; m < C / 2u; m++) {
			uint r = r0 + 2u * m;
			if (r < L) {
				o[(p.outRow + tb + r) * p.nv * p.dv + h * p.dv + jg] = acc[m];
			}
		}
	}
}

void main() {
	if (MODE == 0u) {
		prep();
	} else if (MODE == 1u) {
		state();
	} else {
		outp();
	}
}
