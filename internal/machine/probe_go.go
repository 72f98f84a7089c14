package machine

import (
	"encoding/binary"
)

// readProbe is a read loop: it XORs buf together as uint64 words, so every
// byte is loaded once, and returns the result (which keeps the loads live
// and lets tests check that all of buf was read).
type readProbe struct {
	name  string
	block int // len(buf) must be a positive multiple of block
	read  func(buf []byte) uint64
}

// computeProbe is a register-only loop of independent multiply-add chains.
type computeProbe struct {
	name string
	// flops is the number of floating-point operations per iteration, a
	// multiply-add counting as two.
	flops float64
	// run runs n >= 1 iterations and returns a value that depends on all
	// of them: perIter times n (exact while that stays below 2^24).
	run     func(n int) float32
	perIter float32
}

// Scalar is the prefix of the names of the pure-Go probes.
const Scalar = "scalar go"

// goReadProbe reads with eight independent uint64 accumulators.
var goReadProbe = readProbe{Scalar + " loads", 64, readXorGo}

// goFMAProbe runs twelve independent float32 chains.
var goFMAProbe = computeProbe{Scalar + " float32 x12", 12 * 2, fmaGo, 12}

// readXorGo XORs buf, a multiple of 64 bytes, together as little-endian
// uint64 words.
func readXorGo(buf []byte) uint64 {
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for len(buf) >= 64 {
		a0 ^= binary.LittleEndian.Uint64(buf[0:])
		a1 ^= binary.LittleEndian.Uint64(buf[8:])
		a2 ^= binary.LittleEndian.Uint64(buf[16:])
		a3 ^= binary.LittleEndian.Uint64(buf[24:])
		a4 ^= binary.LittleEndian.Uint64(buf[32:])
		a5 ^= binary.LittleEndian.Uint64(buf[40:])
		a6 ^= binary.LittleEndian.Uint64(buf[48:])
		a7 ^= binary.LittleEndian.Uint64(buf[56:64])
		buf = buf[64:]
	}
	return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7
}

// fmaGo runs n iterations of twelve independent chains acc = acc*x + x
// with x = 1 (read from a variable the compiler cannot fold, so each
// iteration does 12 multiplies and 12 adds) and returns the sum of the
// chains, 12n.
func fmaGo(n int) float32 {
	x := one
	var a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 float32
	for range n {
		a0 = a0*x + x
		a1 = a1*x + x
		a2 = a2*x + x
		a3 = a3*x + x
		a4 = a4*x + x
		a5 = a5*x + x
		a6 = a6*x + x
		a7 = a7*x + x
		a8 = a8*x + x
		a9 = a9*x + x
		a10 = a10*x + x
		a11 = a11*x + x
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11
}

// one is 1, in a variable so that fmaGo's products are computed.
var one float32 = 1
