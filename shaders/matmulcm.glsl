// The body of the cooperative-matrix matmul shaders matmulcm16.comp and
// matmulcm8.comp, which define T, the side of the device's f16 tiles.
//
// dst[i, rowBase + r] = sum_c w[r, c] * x[i, c] for many inputs on
// cooperative matrices (VK_KHR_cooperative_matrix, TxTxT tiles of f16 inputs
// with f32 accumulators, T = 16 or 8): the prefill product on tensor cores.
//
// A workgroup of four subgroups computes 64 inputs x 64 weight rows, each
// subgroup a 32x32 block of (32/T)^2 accumulator tiles, stepping through the
// columns 32 at a time through shared memory.
//
// Precision: f16 holds 11 significant bits, too few for float32
// activations, so each activation is split as x*s = hi + lo with hi =
// x*s rounded to 11 significant bits and lo = f16(x*s - hi), and both
// halves are multiplied (22 bits, about float32's 24). s is a power of two per input row that brings
// the row's largest magnitude to [2^14, 2^15), so neither half overflows
// f16 and lo stays clear of f16's subnormals; the result is divided by s
// exactly. Weights are exact in f16 when stored as f16, and bf16 weights
// are too for magnitudes in f16's normal range (the backend checks the
// largest magnitude of a weight before using this shader); smaller ones
// keep an absolute error under 2^-25.
//
// With QUANT defined (matmulcmq16.comp, matmulcmq8.comp), DTYPE is a GGML
// block format and each thread dequantizes 8 weights of a tile at a time
// (quant.glsl, float32 values exact as quant.DequantizeRow gives them).
// Those values have up to 24 significant bits, so the weights are split
// like the activations, w = whi + wlo (whi to 11 bits, wlo the f16 of the
// rest), and the product is xhi·whi + xlo·whi + xhi·wlo: 22 bits of each
// weight, the dropped xlo·wlo under 2^-22 relative, plus an absolute error
// under 2^-24 for weights below f16's normal range. The backend uses it only
// for weights whose block scales keep every value within f16's range.

const uint R = 32u / T; // accumulator tiles per side of a subgroup's block

// Constant 0 is the workgroup size: four subgroups.
layout(local_size_x_id = 0) in;
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
	uint rowBytes; // QUANT: bytes of a weight row
} p;

#ifdef QUANT
#define QTYPE DTYPE
#include "quant.glsl"
#endif

const uint TM = 64, TN = 64, TK = 32;
const uint LD = TK + 8; // row stride of the tiles in shared memory (halves), 16-byte multiple

shared float16_t xhi[TM * LD];
shared float16_t xlo[TM * LD];
shared float16_t ws[TN * LD];
#ifdef QUANT
shared float16_t wlo[TN * LD];
#endif
shared uint rowMax[TM];       // bits of max |x| per input row (non-negative floats order as uints)
shared float rowScale[TM];
shared float stage[4 * T * T]; // one accumulator tile per subgroup on its way out

void main() {
	uint tileN = gl_WorkGroupID.x * TN; // weight rows
	uint tileM = gl_WorkGroupID.y * TM; // inputs
	uint tid = gl_LocalInvocationID.x;
	uint nt = gl_WorkGroupSize.x;
	uint sg = gl_SubgroupID;
	uint subM = (sg / 2u) * 32u, subN = (sg % 2u) * 32u;

	// The scale of each input row from its largest magnitude.
	for (uint m = tid; m < TM; m += nt) {
		rowMax[m] = 0u;
	}
	barrier();
	for (uint m = 0; m < TM; m++) {
		uint xi = tileM + m;
		float mx = 0.0;
		if (xi < p.n) {
			for (uint c = tid; c < p.cols; c += nt) {
				mx = max(mx, abs(x[xi * p.cols + c]));
			}
		}
		mx = subgroupMax(mx);
		if (subgroupElect() && mx > 0.0) {
			atomicMax(rowMax[m], floatBitsToUint(mx));
		}
	}
	barrier();
	for (uint m = tid; m < TM; m += nt) {
		uint bits = rowMax[m];
		int e = int((bits >> 23) & 0xffu) - 127; // exponent of the largest magnitude
		rowScale[m] = bits == 0u ? 1.0 : exp2(float(clamp(14 - e, -126, 126)));
	}
	barrier();

	coopmat<float, gl_ScopeSubgroup, T, T, gl_MatrixUseAccumulator> acc[R][R];
	[[unroll]] for (uint i = 0; i < R; i++) {
		[[unroll]] for (uint j = 0; j < R; j++) {
			acc[i][j] = coopmat<float, gl_ScopeSubgroup, T, T, gl_MatrixUseAccumulator>(0.0);
		}
	}
	for (uint k0 = 0; k0 < p.cols; k0 += TK) {
		for (uint idx = tid; idx < TM * TK; idx += nt) {
			uint m = idx / TK, k = idx % TK;
			uint xi = tileM + m, c = k0 + k;
			float v = (xi < p.n && c < p.cols) ? x[xi * p.cols + c] * rowScale[m] : 0.0;
			// hi: v rounded to f16's 11 significant bits within float32,
			// by integer arithmetic, so no compiler can fold the
			// round trip through f16 away.
			float hi = uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xffffe000u);
			xhi[m * LD + k] = float16_t(hi);
			xlo[m * LD + k] = float16_t(v - hi);
#ifndef QUANT
			uint wr = tileN + m;
			ws[m * LD + k] = float16_t((wr < p.rows && c < p.cols) ? WLOAD(w, DTYPE, wr * p.cols + c) : 0.0);
#endif
		}
#ifdef QUANT
		// Columns are whole blocks, so a 32-column step never passes the
		// row's end.
		for (uint g = tid; g < TN * TK / 8u; g += nt) {
			uint m = g / (TK / 8u), k = 8u * (g % (TK / 8u));
			uint wr = tileN + m;
			vec4 q[2] = {vec4(0.0), vec4(0.0)};
			if (wr < p.rows) {
				deq8(wr * p.rowBytes, k0 + k, q[0], q[1]);
			}
			[[unroll]] for (uint e = 0; e < 8u; e++) {
				float v = q[e / 4u][e % 4u];
				float hi = uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xffffe000u);
				ws[m * LD + k + e] = float16_t(hi);
				wlo[m * LD + k + e] = float16_t(v - hi);
			}
		}
#endif
		barrier();
		for (uint kk = 0; kk < TK; kk += T) {
			coopmat<float16_t, gl_ScopeSubgroup, T, T, gl_MatrixUseA> ah[R], al[R];
			coopmat<float16_t, gl_ScopeSubgroup, T, T, gl_MatrixUseB> bw[R];
#ifdef QUANT
			coopmat<float16_t, gl_ScopeSubgroup, T, T, gl_MatrixUseB> bl[R];
#endif
			[[unroll]] for (uint i = 0; i < R; i++) {
				coopMatLoad(ah[i], xhi, (subM + i * T) * LD + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
				coopMatLoad(al[i], xlo, (subM + i * T) * LD + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
				// B[k][r] = w[r][k]: the weight tile read column-major.
				coopMatLoad(bw[i], ws, (subN + i * T) * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
#ifdef QUANT
				coopMatLoad(bl[i], wlo, (subN + i * T) * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
#endif
			}
			[[unroll]] for (uint i = 0; i < R; i++) {
				[[unroll]] for (uint j = 0; j < R; j++) {
#ifdef QUANT
					acc[i][j] = coopMatMulAdd(ah[i], bl[j], acc[i][j]);
#endif
					acc[i][j] = coopMatMulAdd(al[i], bw[j], acc[i][j]);
					acc[i][j] = coopMatMulAdd(ah[i], bw[j], acc[i][j]);
				}
			}
		}
		barrier();
	}

	uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
	[[unroll]] for (uint i = 0; i < R; i++) {
		[[unroll]] for (uint j = 0; j < R; j++) {
			coopMatStore(acc[i][j], stage, sg * T * T, T, gl_CooperativeMatrixLayoutRowMajor);
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			for (uint e = lane; e < T * T; e += lanes) {
				uint m = subM + i * T + e / T, r = subN + j * T + e % T;
				uint xi = tileM + m, wr = tileN + r;
				if (xi < p.n && wr < p.rows) {
					d[xi * p.dstRows + p.rowBase + wr] = stage[sg * T * T + e] / rowScale[m];
				}
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
		}
	}
}
