package asm

// siluMulGo sets dst[i] = silu(gate[i]) * up[i] (see silu32) for i < len(dst),
// the gated MLP activation. It needs len(gate), len(up) >= len(dst); dst may be
// gate or up.
func siluMulGo(dst, gate, up []float32) {
	gate = gate[:len(dst)]
	up = up[:len(dst)]
	for i, g := range gate {
		dst[i] = silu32(g) * up[i]
	}
}
