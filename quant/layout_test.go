package quant

import (
	"math/rand/v2"
	"testing"
)

// TestLayoutRoundTrips checks that the K-quant field packers are the
// inverses of their readers: every 6-bit scale and min in every position,
// and random 6-bit Q6_K values.
func TestLayoutRoundTrips(t *testing.T) {
	for v := range 64 {
		var sc, m [8]uint8
		for j := range 8 {
			sc[j], m[j] = uint8((v+j)%64), uint8((v+5*j+1)%64)
		}
		s := make([]byte, 12)
		PutQ4KScaleMins(s, &sc, &m)
		if gs, gm := Q4KScaleMins(s); gs != sc || gm != m {
			t.Fatalf("scales %v mins %v read back as %v %v", sc, m, gs, gm)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		var q, got [qkK]uint8
		for i := range q {
			q[i] = uint8(r.IntN(64))
		}
		blk := make([]byte, q6KBytes)
		PutQ6KValues(blk, &q)
		Q6KValues(&got, blk)
		if got != q {
			t.Fatal("Q6_K values do not round-trip")
		}
	}
}
