#version 450
// Non-causal multi-head attention within segments of segLen rows (the
// patches of one image frame), for SegmentAttention: every row attends
// over all the rows of its own segment.
//
// Workgroup (segment, head, block of RB query rows of the segment) keeps
// the block's queries in shared memory and walks the segment's keys in
// blocks of BK with an online softmax, so every K and V element it reads
// serves all RB rows. q, k and v are heads in one buffer x, each with its
// own (offset, row stride, head stride); o is [n, heads*dim], dense.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

const uint WG = 128;
const uint RB = 8;   // query rows per workgroup
const uint BK = 16;  // keys per block (WG = RB * BK)
const uint DMAX = 256;

layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer XS { float x[]; };
layout(binding = 1) writeonly buffer OS { float o[]; };

layout(push_constant) uniform P {
	uint qOff, qRow, qHead;
	uint kOff, kRow, kHead;
	uint vOff, vRow, vHead;
	uint heads, dim, segLen, segs;
	uint rowBlocks; // row blocks per segment: ceil(segLen / RB)
	float scale;
} p;

shared float qsh[RB][DMAX + 1]; // padded: rows in different banks
shared float sc[RB][BK];
shared float mrow[RB], lrow[RB], crow[RB];

void main() {
	uint wgi = flatGroup();
	if (wgi >= p.segs * p.heads * p.rowBlocks) {
		return;
	}
	uint seg = wgi / (p.heads * p.rowBlocks);
	uint h = (wgi / p.rowBlocks) % p.heads;
	uint s0 = seg * p.segLen;           // the segment's first row
	uint r0 = (wgi % p.rowBlocks) * RB; // the block's first row in the segment
	uint tid = gl_LocalInvocationID.x;

	for (uint i = tid; i < RB * p.dim; i += WG) {
		uint rr = i / p.dim, d = i % p.dim;
		uint r = r0 + rr;
		qsh[rr][d] = r < p.segLen ? x[p.qOff + (s0 + r) * p.qRow + h * p.qHead + d] : 0.0;
	}
	if (tid < RB) {
		mrow[tid] = -1.0 / 0.0;
		lrow[tid] = 0.0;
	}
	barrier();

	float acc0[RB], acc1[RB];
	[[unroll]] for (uint rr = 0; rr < RB; rr++) {
		acc0[rr] = 0.0;
		acc1[rr] = 0.0;
	}
	uint srow = tid % RB, skey = tid / RB; // this thread's score in a block
	uint d0 = tid, d1 = tid + WG;          // this thread's output dims
	uint kh = p.kOff + h * p.kHead, vh = p.vOff + h * p.vHead;
	for (uint base = 0; base < p.segLen; base += BK) {
		// Scores: one (row, key) per thread.
		uint s = base + skey;
		float score = -1.0 / 0.0;
		if (s < p.segLen) {
			uint kb = kh + (s0 + s) * p.kRow;
			float a = 0.0;
			for (uint i = 0; i < p.dim; i++) {
				a += qsh[srow][i] * x[kb + i];
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
			float sum = 0.0;
			float corr = exp(mold - mb); // exp(-inf) = 0 on the first block
			for (uint k = 0; k < BK; k++) {
				float e = exp(sc[tid][k] - mb); // past the segment: exp(-inf) = 0
				sc[tid][k] = e;
				sum += e;
			}
			mrow[tid] = mb;
			lrow[tid] = lrow[tid] * corr + sum;
			crow[tid] = corr;
		}
		barrier();
		// Weighted values: each V element read once for all rows.
		uint cnt = min(BK, p.segLen - base);
		[[unroll]] for (uint rr = 0; rr < RB; rr++) {
			acc0[rr] *= crow[rr];
			acc1[rr] *= crow[rr];
		}
		for (uint k = 0; k < cnt; k++) {
			uint vb = vh + (s0 + base + k) * p.vRow;
			float v0 = d0 < p.dim ? x[vb + d0] : 0.0;
			float v1 = d1 < p.dim ? x[vb + d1] : 0.0;
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
		if (r >= p.segLen) {
			break;
		}
		float inv = 1.0 / lrow[rr];
		uint ob = (s0 + r) * p.heads * p.dim + h * p.dim;
		if (d0 < p.dim) {
			o[ob + d0] = acc0[rr] * inv;
		}
		if (d1 < p.dim) {
			o[ob + d1] = acc1[rr] * inv;
		}
	}
}
