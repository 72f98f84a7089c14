// Dequantizers of GGML's block formats (package quant has the layouts and
// the reference dequantizers; /work/shared/spec/quant-formats.md the element
// orders). Included after the declaration of the weight as `uint w[]` and
// of the specialisation constant QTYPE (a compute.DType code).
//
// Rows are whole blocks and start at any even byte offset (Q8_0 and Q6_K
// blocks are 34 and 210 bytes), so 32-bit reads of block fields that may
// straddle two words go through qWord. Every product is `precise` (no fused
// multiply-add), so each value is the float32 value quant.DequantizeRow
// computes, bit for bit: (d·sc)·q − dmin·m for the K-quants, each step
// rounded to float32.
#define DT_Q8_0 4u
#define DT_Q4_K 5u
#define DT_Q5_K 6u
#define DT_Q6_K 7u

// QVALS is the number of values in a block, QBYTES its size in bytes.
const uint QVALS = QTYPE == DT_Q8_0 ? 32u : 256u;
const uint QBYTES = QTYPE == DT_Q8_0 ? 34u : (QTYPE == DT_Q4_K ? 144u : (QTYPE == DT_Q5_K ? 176u : 210u));

// qByte returns the byte at offset o.
uint qByte(uint o) { return (w[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }

// qWord returns the 32 bits at the even offset o.
uint qWord(uint o) {
	uint i = o >> 2;
	if ((o & 2u) == 0u) {
		return w[i];
	}
	return (w[i] >> 16) | (w[i + 1u] << 16);
}

// qF16 returns the fp16 value at the even offset o.
float qF16(uint o) { return unpackHalf2x16((w[o >> 2] >> ((o & 2u) * 8u)) & 0xffffu).x; }

// nibbles returns nibble `hi` (0 low, 1 high) of the four bytes of v.
vec4 nibbles(uint v, uint hi) {
	uint s = 4u * hi;
	return vec4(float((v >> s) & 15u), float((v >> (s + 8u)) & 15u), float((v >> (s + 16u)) & 15u), float((v >> (s + 24u)) & 15u));
}

// scaleMinK4 unpacks sub-block j's 6-bit scale and min of the Q4_K or Q5_K
// block at byte bo (ggml's get_scale_min_k4; the 12 scale bytes start at
// bo+4).
void scaleMinK4(uint bo, uint j, out float sc, out float m) {
	uint s = bo + 4u;
	if (j < 4u) {
		sc = float(qByte(s + j) & 63u);
		m = float(qByte(s + j + 4u) & 63u);
	} else {
		uint b = qByte(s + j + 4u);
		sc = float((b & 15u) | ((qByte(s + j - 4u) >> 6) << 4));
		m = float((b >> 4) | ((qByte(s + j) >> 6) << 4));
	}
}

// deq8 dequantizes the 8 values c..c+7 (c a multiple of 8) of the row
// whose first block starts at byte rowOff.
void deq8(uint rowOff, uint c, out vec4 lo, out vec4 hi) {
	uint bo = rowOff + (c / QVALS) * QBYTES;
	uint j = c % QVALS;
	if (QTYPE == DT_Q8_0) {
		float d = qF16(bo);
		uint a = qWord(bo + 2u + j), b = qWord(bo + 6u + j);
		lo = vec4(float(bitfieldExtract(int(a), 0, 8)), float(bitfieldExtract(int(a), 8, 8)),
			float(bitfieldExtract(int(a), 16, 8)), float(bitfieldExtract(int(a), 24, 8))) * d;
		hi = vec4(float(bitfieldExtract(int(b), 0, 8)), float(bitfieldExtract(int(b), 8, 8)),
			float(bitfieldExtract(int(b), 16, 8)), float(bitfieldExtract(int(b), 24, 8))) * d;
	} else if (QTYPE == DT_Q4_K || QTYPE == DT_Q5_K) {
		// Values 64g+l (low nibbles, sub-block 2g) and 64g+32+l (high
		// nibbles, sub-block 2g+1) come from qs[32g+l].
		uint g = j >> 6, h = (j >> 5) & 1u, l = j & 31u;
		float sc, m;
		scaleMinK4(bo, 2u * g + h, sc, m);
		precise float d1 = qF16(bo) * sc;
		precise float m1 = qF16(bo + 2u) * m;
		uint qs = bo + (QTYPE == DT_Q4_K ? 16u : 48u) + 32u * g + l;
		vec4 qa = nibbles(qWord(qs), h), qb = nibbles(qWord(qs + 4u), h);
		if (QTYPE == DT_Q5_K) {
			// The fifth bit: bit 2g+h of qh[l].
			uint sh = 2u * g + h;
			uint ha = qWord(bo + 16u + l) >> sh, hb = qWord(bo + 20u + l) >> sh;
			qa += 16.0 * vec4(float(ha & 1u), float((ha >> 8) & 1u), float((ha >> 16) & 1u), float((ha >> 24) & 1u));
			qb += 16.0 * vec4(float(hb & 1u), float((hb >> 8) & 1u), float((hb >> 16) & 1u), float((hb >> 24) & 1u));
		}
		precise vec4 a = d1 * qa - m1;
		precise vec4 b = d1 * qb - m1;
		lo = a;
		hi = b;
	} else {
		// Q6_K: half hf of 128 values; quarter qq of it takes the low
		// (qq 0, 1) or high (2, 3) nibbles of ql[32(qq&1)+l] and bits
		// 2qq..2qq+1 of qh[l], with scale 2qq + l/16 of the half.
		uint hf = j >> 7, qq = (j >> 5) & 3u, l = j & 31u;
		uint ql = bo + 64u * hf + 32u * (qq & 1u) + l;
		uint qh = bo + 128u + 32u * hf + l;
		uint la = qWord(ql), lb = qWord(ql + 4u);
		uint ha = qWord(qh) >> (2u * qq), hb = qWord(qh + 4u) >> (2u * qq);
		uint ns = 4u * (qq >> 1);
		int sc = bitfieldExtract(int(qByte(bo + 192u + 8u * hf + (l >> 4) + 2u * qq)), 0, 8);
		precise float ds = qF16(bo + 208u) * float(sc);
		vec4 qa, qb;
		[[unroll]] for (uint k = 0; k < 4u; k++) {
			qa[k] = float(int(((la >> (8u * k + ns)) & 15u) | (((ha >> (8u * k)) & 3u) << 4)) - 32);
			qb[k] = float(int(((lb >> (8u * k + ns)) & 15u) | (((hb >> (8u * k)) & 3u) << 4)) - 32);
		}
		precise vec4 a = ds * qa;
		precise vec4 b = ds * qb;
		lo = a;
		hi = b;
	}
}
