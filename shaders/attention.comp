#version 450
// Causal grouped-query attention over the KV cache, tiled over queries and
// split over the KV length (flash-decoding style).
//
// The "rows" of KV head kvh are its (token, query head) pairs, r = t*G + g
// for the G = heads/kvHeads query heads that share it. Workgroup (row block
// of RB rows of one KV head, split s) keeps those rows' queries in shared
// memory and walks cache positions [s*splitLen, (s+1)*splitLen) in blocks
// of BK with an online softmax, so every K and V element it reads serves
// all RB rows (the query heads of a group and neighbouring tokens). Each
// row stops at its own causal limit L = pos + t + 1.
//
// With one split (nsplit == 1) the normalised output goes to o. Otherwise
// each split writes its unnormalised partial output, max and sum to part
// (row R = t*heads + h, split s: R*nsplit + s) and attnmerge.comp combines
// them; a split that starts at or after a row's limit writes nothing for it.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

const uint WG = 128;
const uint RB = 8;   // query rows per workgroup
const uint BK = 16;  // cache positions per block (WG = RB * BK)
const uint DMAX = 256;

layout(local_size_x = 128) in;
// KVDT is the caches' element type: F32, or BF16/F16 packed two per word
// (as kvstore.comp writes them).
layout(constant_id = 0) const uint KVDT = DT_F32;

layout(binding = 0) readonly buffer QS { float q[]; };
layout(binding = 1) readonly buffer KC { uint kc[]; };
layout(binding = 2) readonly buffer VC { uint vc[]; };
layout(binding = 3) writeonly buffer OS { float o[]; };
layout(binding = 4) writeonly buffer PS { float part[]; };

layout(push_constant) uniform P {
	uint qOff, qRow, qHead;
	uint heads, kvHeads, dim;
	uint pos, outRow;
	float scale;
	uint n;         // tokens
	uint splitLen;  // cache positions per split, a multiple of BK
	uint nsplit;
	uint rowBlocks; // row blocks per KV head: ceil(n*G / RB)
	uint partML;    // element offset of the (max, sum) pairs in part
} p;

shared float qsh[RB][DMAX + 1]; // padded: rows in different banks
shared float sc[RB][BK];
shared float mrow[RB], lrow[RB], crow[RB];
shared uint lim[RB];

void main() {
	uint wgi = flatGroup();
	if (wgi >= p.kvHeads * p.rowBlocks) {
		return;
	}
	uint kvh = wgi / p.rowBlocks;
	uint r0 = (wgi % p.rowBlocks) * RB;
	uint G = p.heads / p.kvHeads;
	uint nrows = p.n * G;
	uint split = gl_WorkGroupID.z;
	uint tid = gl_LocalInvocationID.x;
	uint width = p.kvHeads * p.dim;
	uint kvo = kvh * p.dim;

	// Queries and per-row state.
	for (uint i = tid; i < RB * p.dim; i += WG) {
		uint rr = i / p.dim, d = i % p.dim;
		uint r = r0 + rr;
		float v = 0.0;
		if (r < nrows) {
			uint t = r / G, h = kvh * G + r % G;
			v = q[p.qOff + t * p.qRow + h * p.qHead + d];
		}
		qsh[rr][d] = v;
	}
	if (tid < RB) {
		uint r = r0 + tid;
		lim[tid] = r < nrows ? p.pos + r / G + 1u : 0u;
		mrow[tid] = -1.0 / 0.0;
		lrow[tid] = 0.0;
	}
	barrier();
	uint start = split * p.splitLen;
	uint rlast = min(r0 + RB, nrows) - 1u;
	uint end = min(start + p.splitLen, p.pos + rlast / G + 1u); // furthest limit of the block's rows
	if (start >= end) {
		return; // uniform: no row of this block reaches the split
	}

	float acc0[RB], acc1[RB];
	[[unroll]] for (uint rr = 0; rr < RB; rr++) {
		acc0[rr] = 0.0;
		acc1[rr] = 0.0;
	}
	uint srow = tid % RB, skey = tid / RB; // this thread's score in a block
	uint d0 = tid, d1 = tid + WG;          // this thread's output dims
	for (uint base = start; base < end; base += BK) {
		// Scores: one (row, position) per thread.
		uint s = base + skey;
		float score = -1.0 / 0.0;
		if (s < lim[srow]) {
			uint kb = s * width + kvo;
			float a = 0.0;
			for (uint i = 0; i < p.dim; i++) {
				a += qsh[srow][i] * WLOAD(kc, KVDT, kb + i);
			}
			score = a * p.scale;
		}
		sc[srow][skey] = score;
		barrier();
		// Online softmax update, one thread per row.
		if (tid < RB) {
			float mold = mrow[tid];
			float mb = mold;
			for (uint k = 0; k < BK; k++) {
				mb = max(mb, sc[tid][k]);
			}
			float corr = 1.0, sum = 0.0;
			if (mb != -1.0 / 0.0) {
				corr = exp(mold - mb); // exp(-inf) = 0 on the first block
				for (uint k = 0; k < BK; k++) {
					float e = exp(sc[tid][k] - mb); // masked: exp(-inf) = 0
					sc[tid][k] = e;
					sum += e;
				}
			} else {
				for (uint k = 0; k < BK; k++) {
					sc[tid][k] = 0.0;
				}
			}
			mrow[tid] = mb;
			lrow[tid] = lrow[tid] * corr + sum;
			crow[tid] = corr;
		}
		barrier();
		// Weighted values: each V element read once for all rows.
		uint cnt = min(BK, end - base);
		[[unroll]] for (uint rr = 0; rr < RB; rr++) {
			acc0[rr] *= crow[rr];
			acc1[rr] *= crow[rr];
		}
		for (uint k = 0; k < cnt; k++) {
			uint vb = (base + k) * width + kvo;
			float v0 = d0 < p.dim ? WLOAD(vc, KVDT, vb + d0) : 0.0;
			float v1 = d1 < p.dim ? WLOAD(vc, KVDT, vb + d1) : 0.0;
			[[unroll]] for (uint rr = 0; rr < RB; rr++) {
				float w = sc[rr][k];
				acc0[rr] += w * v0;
				acc1[rr] += w * v1;
			}
		}
		barrier();
	}

	for (uint rr = 0; rr < RB; rr++) {
		uint r = r0 + rr;
		if (r >= nrows || start >= lim[rr]) {
			continue;
		}
		uint t = r / G, h = kvh * G + r % G;
		if (p.nsplit == 1u) {
			float inv = 1.0 / lrow[rr];
			uint ob = (p.outRow + t) * p.heads * p.dim + h * p.dim;
			if (d0 < p.dim) {
				o[ob + d0] = acc0[rr] * inv;
			}
			if (d1 < p.dim) {
				o[ob + d1] = acc1[rr] * inv;
			}
		} else {
			uint pi = (t * p.heads + h) * p.nsplit + split;
			if (d0 < p.dim) {
				part[pi * p.dim + d0] = acc0[rr];
			}
			if (d1 < p.dim) {
				part[pi * p.dim + d1] = acc1[rr];
			}
			if (tid == 0u) {
				part[p.partML + 2u * pi] = mrow[rr];
				part[p.partML + 2u * pi + 1u] = lrow[rr];
			}
		}
	}
}
