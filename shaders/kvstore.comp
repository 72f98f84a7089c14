#version 450
// Writes the keys and values of n new tokens into the KV caches at
// positions pos..pos+n-1: element (pos+t)*width + h*dim + d of kc = k head
// h of token t, element d (and likewise for v). The caches hold KVDT
// elements: F32 words, one thread per element, or BF16/F16 halves packed
// two per word (the even element in the low half), one thread per word,
// rounded to nearest, ties to even, as package half rounds.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KVDT = DT_F32;

layout(binding = 0) readonly buffer KS { float k[]; };
layout(binding = 1) readonly buffer VS { float v[]; };
layout(binding = 2) writeonly buffer KC { uint kc[]; };
layout(binding = 3) writeonly buffer VC { uint vc[]; };

layout(push_constant) uniform P {
	uint kOff, kRow, kHead;
	uint vOff, vRow, vHead;
	uint n, kvHeads, dim, pos;
} p;

// toBF16 rounds x to bfloat16; NaN stays NaN (quiet).
uint toBF16(float x) {
	uint b = floatBitsToUint(x);
	if ((b & 0x7fffffffu) > 0x7f800000u) {
		return (b >> 16) | 0x40u;
	}
	return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

// toF16 rounds x to IEEE binary16: overflow to infinity, subnormals, NaN
// stays NaN (quiet).
uint toF16(float x) {
	uint b = floatBitsToUint(x);
	uint sign = (b >> 16) & 0x8000u;
	uint e = (b >> 23) & 0xffu;
	uint m = b & 0x7fffffu;
	if (e == 0xffu) {
		return sign | 0x7c00u | (m != 0u ? 0x200u | (m >> 13) : 0u);
	}
	int he = int(e) - 127 + 15;
	if (he >= 31) {
		return sign | 0x7c00u;
	}
	if (he <= 0) {
		if (he < -10) {
			return sign;
		}
		uint mm = m | 0x800000u;
		uint shift = uint(14 - he);
		uint h = mm >> shift;
		uint rem = mm & ((1u << shift) - 1u);
		uint halfway = 1u << (shift - 1u);
		if (rem > halfway || (rem == halfway && (h & 1u) == 1u)) {
			h++;
		}
		return sign | h;
	}
	uint h = (uint(he) << 10) | (m >> 13);
	uint rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) {
		h++;
	}
	return sign | h;
}

uint toHalf(float x) { return KVDT == DT_BF16 ? toBF16(x) : toF16(x); }

// kOf and vOf return element e (token-major over the new tokens) of the
// new keys and values.
float kOf(uint e) {
	uint width = p.kvHeads * p.dim;
	uint t = e / width, h = (e % width) / p.dim, d = e % p.dim;
	return k[p.kOff + t * p.kRow + h * p.kHead + d];
}

float vOf(uint e) {
	uint width = p.kvHeads * p.dim;
	uint t = e / width, h = (e % width) / p.dim, d = e % p.dim;
	return v[p.vOff + t * p.vRow + h * p.vHead + d];
}

void main() {
	uint i = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	uint width = p.kvHeads * p.dim;
	if (KVDT == DT_F32) {
		if (i >= p.n * width) {
			return;
		}
		kc[p.pos * width + i] = floatBitsToUint(kOf(i));
		vc[p.pos * width + i] = floatBitsToUint(vOf(i));
		return;
	}
	// Word i of the new rows: elements 2i and 2i+1 (width is even).
	if (2u * i >= p.n * width) {
		return;
	}
	uint w = (p.pos * width) / 2u + i;
	kc[w] = toHalf(kOf(2u * i)) | (toHalf(kOf(2u * i + 1u)) << 16);
	vc[w] = toHalf(vOf(2u * i)) | (toHalf(vOf(2u * i + 1u)) << 16);
}
