#version 450
// dst[i, rowBase + r] = sum_c w[r, c] * x[i, c] for many inputs and a
// weight in a GGML block format (QTYPE): the prefill matrix-matrix product
// of quantized weights, tiled 64 inputs x 64 weight rows x 32 columns
// through shared memory (16 KiB, the least any device has), 4x4 outputs
// per thread. Each thread dequantizes 8 weights of a tile (quant.glsl);
// the columns are whole blocks, so no tile straddles the row's end.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint QTYPE = 4u;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 2) readonly buffer XS { float x[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows;
	uint cols;
	uint n;
	uint rowBase;
	uint dstRows;
	uint rowBytes;
} p;

#include "quant.glsl"

const uint TM = 64, TN = 64, TK = 32;
shared float xs[TK][TM];
shared float ws[TK][TN];

void main() {
	uint tileN = gl_WorkGroupID.x * TN; // weight rows
	uint tileM = gl_WorkGroupID.y * TM; // inputs
	uint tid = gl_LocalInvocationID.x;
	uint tx = tid % 16u, ty = tid / 16u;
	// This thread's 8 weights of each tile: row wm, columns wk..wk+7.
	uint wm = tid / 4u, wk = 8u * (tid % 4u);
	uint wr = tileN + wm;
	float acc[4][4];
	[[unroll]] for (uint a = 0; a < 4; a++) {
		[[unroll]] for (uint b = 0; b < 4; b++) {
			acc[a][b] = 0.0;
		}
	}
	for (uint k0 = 0; k0 < p.cols; k0 += TK) {
		[[unroll]] for (uint l = 0; l < 8; l++) {
			uint idx = tid + 256u * l;
			uint k = idx % TK, m = idx / TK;
			uint xi = tileM + m;
			xs[k][m] = xi < p.n ? x[xi * p.cols + k0 + k] : 0.0;
		}
		vec4 lo = vec4(0.0), hi = vec4(0.0);
		if (wr < p.rows) {
			deq8(wr * p.rowBytes, k0 + wk, lo, hi);
		}
		[[unroll]] for (uint e = 0; e < 4; e++) {
			ws[wk + e][wm] = lo[e];
			ws[wk + 4u + e][wm] = hi[e];
		}
		barrier();
		[[unroll]] for (uint k = 0; k < TK; k++) {
			float av[4], bv[4];
			[[unroll]] for (uint a = 0; a < 4; a++) {
				av[a] = xs[k][ty + 16u * a];
				bv[a] = ws[k][tx + 16u * a];
			}
			[[unroll]] for (uint a = 0; a < 4; a++) {
				[[unroll]] for (uint b = 0; b < 4; b++) {
					acc[a][b] += av[a] * bv[b];
				}
			}
		}
		barrier();
	}
	[[unroll]] for (uint a = 0; a < 4; a++) {
		uint xi = tileM + ty + 16u * a;
		[[unroll]] for (uint b = 0; b < 4; b++) {
			uint r = tileN + tx + 16u * b;
			if (xi < p.n && r < p.rows) {
				d[xi * p.dstRows + p.rowBase + r] = acc[a][b];
			}
		}
	}
}
