package quant

// The bit layouts of the K-quant blocks' packed fields, for code that
// rearranges blocks (asm's packed weights) and for the quantizers.

// Q4KScaleMins returns the eight 6-bit scales and mins packed in the 12
// scale bytes s of a Q4_K or Q5_K block (ggml's get_scale_min_k4; see
// scaleMinK4).
func Q4KScaleMins(s []byte) (sc, m [8]uint8) {
	for j := range 8 {
		sc[j], m[j] = scaleMinK4(j, s)
	}
	return sc, m
}

// PutQ4KScaleMins packs the eight 6-bit scales and mins (each at most 63)
// into the 12 scale bytes s, Q4KScaleMins' inverse.
func PutQ4KScaleMins(s []byte, sc, m *[8]uint8) {
	for j := range 4 {
		s[j] = sc[j] | (sc[j+4]>>4)<<6
		s[j+4] = m[j] | (m[j+4]>>4)<<6
		s[j+8] = sc[j+4]&0x0f | m[j+4]<<4
	}
}

// Q6KValues sets q to the 256 6-bit values (0..63, before the −32) of the
// Q6_K block blk: in each half h, value l (l < 32) takes ql[l]'s low
// nibble and qh[l] bits 0-1, value l+32 ql[l+32]'s low nibble and bits 2-3,
// value l+64 ql[l]'s high nibble and bits 4-5, value l+96 ql[l+32]'s high
// nibble and bits 6-7.
func Q6KValues(q *[qkK]uint8, blk []byte) {
	for h := range 2 {
		ql, qh := blk[64*h:64*h+64], blk[128+32*h:128+32*h+32]
		v := q[128*h : 128*h+128]
		for l := range 32 {
			v[l] = ql[l]&0x0f | (qh[l]&3)<<4
			v[l+32] = ql[l+32]&0x0f | (qh[l]>>2&3)<<4
			v[l+64] = ql[l]>>4 | (qh[l]>>4&3)<<4
			v[l+96] = ql[l+32]>>4 | (qh[l]>>6)<<4
		}
	}
}

// PutQ6KValues writes the 256 6-bit values q (0..63) into ql and qh of
// the Q6_K block blk, Q6KValues' inverse.
func PutQ6KValues(blk []byte, q *[qkK]uint8) {
	for h := range 2 {
		ql, qh := blk[64*h:64*h+64], blk[128+32*h:128+32*h+32]
		v := q[128*h : 128*h+128]
		for l := range 32 {
			ql[l] = v[l]&0x0f | v[l+64]<<4
			ql[l+32] = v[l+32]&0x0f | v[l+96]<<4
			qh[l] = v[l]>>4 | v[l+32]>>4<<2 | v[l+64]>>4<<4 | v[l+96]>>4<<6
		}
	}
}
