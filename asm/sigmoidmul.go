package asm

// sigmoidMulGo sets dst[i] = x[i] * sigmoid(gate[i]) (see sigmoid32) for i <
// len(dst), the attention output gate. It needs len(x), len(gate) >= len(dst);
// dst may be x or gate.
func sigmoidMulGo(dst, x, gate []float32) {
	x = x[:len(dst)]
	gate = gate[:len(dst)]
	for i, v := range x {
		dst[i] = v * sigmoid32(gate[i])
	}
}
