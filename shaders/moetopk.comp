#version 450
// A mixture of experts' routing, one workgroup per row: the k largest of
// the row's ne router logits (ties to the lower index, NaN never above a
// number), written in ascending expert order to ids[r*k + j], with their
// softmax renormalised over the k: exp(l_j - l_max) / sum of those, in
// float32, the sum taken in the order of selection (largest first). The
// logits order the experts as their softmax does, so the choice is the
// host's (model/moe.go routeRow). Weights' bits go to ids[wOff + r*k + j].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(binding = 0) readonly buffer LS { float lg[]; };
layout(binding = 1) writeonly buffer RS { uint ids[]; };

layout(push_constant) uniform P {
	uint rows, ne, k;
	uint wOff; // word offset of the weights in ids
} p;

const uint NONE = 0xffffffffu;
const uint KMAX = 32u;

shared float bv[64];
shared uint bi[64];
shared uint chosen[KMAX];

// better reports whether (v, i) ranks before (w, j): a larger value, or
// the same value at a lower index; NONE ranks last.
bool better(float v, uint i, float w, uint j) {
	if (i == NONE) {
		return false;
	}
	if (j == NONE) {
		return true;
	}
	return v > w || (v == w && i < j);
}

void main() {
	uint r = flatGroup();
	if (r >= p.rows) {
		return;
	}
	uint t = gl_LocalInvocationID.x;
	uint base = r * p.ne;
	for (uint j = 0u; j < p.k; j++) {
		float v = 0.0;
		uint vi = NONE;
		for (uint e = t; e < p.ne; e += 64u) {
			bool taken = false;
			for (uint q = 0u; q < j; q++) {
				taken = taken || chosen[q] == e;
			}
			float x = lg[base + e];
			if (isnan(x)) {
				x = uintBitsToFloat(0xff800000u); // -inf
			}
			if (!taken && better(x, e, v, vi)) {
				v = x;
				vi = e;
			}
		}
		bv[t] = v;
		bi[t] = vi;
		barrier();
		for (uint s = 32u; s > 0u; s >>= 1) {
			if (t < s && better(bv[t + s], bi[t + s], bv[t], bi[t])) {
				bv[t] = bv[t + s];
				bi[t] = bi[t + s];
			}
			barrier();
		}
		if (t == 0u) {
			chosen[j] = bi[0];
		}
		barrier();
	}
	if (t != 0u) {
		return;
	}
	// Weights in the order of selection, then both sorted by expert.
	float top = lg[base + chosen[0]];
	float w[KMAX];
	float sum = 0.0;
	for (uint j = 0u; j < p.k; j++) {
		w[j] = exp(lg[base + chosen[j]] - top);
		sum += w[j];
	}
	for (uint j = 1u; j < p.k; j++) {
		for (uint q = j; q > 0u && chosen[q] < chosen[q - 1u]; q--) {
			uint ce = chosen[q];
			chosen[q] = chosen[q - 1u];
			chosen[q - 1u] = ce;
			float cw = w[q];
			w[q] = w[q - 1u];
			w[q - 1u] = cw;
		}
	}
	for (uint j = 0u; j < p.k; j++) {
		ids[r * p.k + j] = chosen[j];
		ids[p.wOff + r * p.k + j] = floatBitsToUint(w[j] / sum);
	}
}
