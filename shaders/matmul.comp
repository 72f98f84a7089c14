#version 450
// dst[i, rowBase + r] = sum_c w[r, c] * x[i, c] for many inputs: the
// prefill matrix-matrix product, tiled 64 inputs x 64 weight rows x 16
// columns through shared memory, 4x4 outputs per thread.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint DTYPE = DT_BF16;

layout(binding = 0) readonly buffer WS { uint w[]; };
layout(binding = 2) readonly buffer XS { float x[]; };
layout(binding = 4) writeonly buffer DS { float d[]; };

layout(push_constant) uniform P {
	uint rows;
	uint cols;
	uint n;
	uint rowBase;
	uint dstRows;
} p;

const uint TM = 64, TN = 64, TK = 16;
shared float xs[TK][TM];
shared float ws[TK][TN];

void main() {
	uint tileN = gl_WorkGroupID.x * TN; // weight rows
	uint tileM = gl_WorkGroupID.y * TM; // inputs
	uint tid = gl_LocalInvocationID.x;
	uint tx = tid % 16u, ty = tid / 16u;
	float acc[4][4];
	[[unroll]] for (uint a = 0; a < 4; a++) {
		[[unroll]] for (uint b = 0; b < 4; b++) {
			acc[a][b] = 0.0;
		}
	}
	for (uint k0 = 0; k0 < p.cols; k0 += TK) {
		[[unroll]] for (uint l = 0; l < 4; l++) {
			uint idx = tid + 256u * l;
			uint k = idx % TK, m = idx / TK;
			uint c = k0 + k;
			uint xi = tileM + m, wr = tileN + m;
			xs[k][m] = (xi < p.n && c < p.cols) ? x[xi * p.cols + c] : 0.0;
			ws[k][m] = (wr < p.rows && c < p.cols) ? WLOAD(w, DTYPE, wr * p.cols + c) : 0.0;
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
			uint wr = tileN + tx + 16u * b;
			if (xi < p.n && wr < p.rows) {
				d[xi * p.dstRows + p.rowBase + wr] = acc[a][b];
			}
		}
	}
}
