package quant

import (
	"bytes"
	"maps"
	"slices"
	"testing"
)

// The quantizers against llama.cpp's own files: every quantized tensor of
// ksmall-{q8_0,q6_k,q4_k_m,q5_k_m}.gguf is quantized again here from the same
// tensor of ksmall-bf16.gguf (the file llama-quantize read) and compared
// block by block.

type blockStats struct {
	blocks, same    int
	errOurs, errRef float64 // squared error against the BF16 values, summed
}

// compareTensor quantizes src's values to q and compares with ref's blocks.
func compareTensor(t *testing.T, q Type, src, ref *ggufTensor) blockStats {
	t.Helper()
	x := src.floats(t)
	ours := make([]byte, len(ref.data))
	if err := QuantizeRow(q, ours, x); err != nil {
		t.Fatal(err)
	}
	var st blockStats
	bb := q.BlockBytes()
	for i := 0; i < len(ours); i += bb {
		st.blocks++
		if bytes.Equal(ours[i:i+bb], ref.data[i:i+bb]) {
			st.same++
		}
	}
	st.errOurs = sqErr(t, q, x, ours)
	st.errRef = sqErr(t, q, x, ref.data)
	return st
}

func sqErr(t *testing.T, q Type, x []float32, blocks []byte) float64 {
	y := make([]float32, len(x))
	if err := DequantizeRow(q, y, blocks); err != nil {
		t.Fatal(err)
	}
	var e float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		e += d * d
	}
	return e
}

func TestQuantizersMatchLlamaCpp(t *testing.T) {
	bf16 := openGGUF(t, "ksmall-bf16.gguf")
	for _, file := range []string{"ksmall-q8_0.gguf", "ksmall-q6_k.gguf", "ksmall-q4_k_m.gguf", "ksmall-q5_k_m.gguf"} {
		t.Run(file, func(t *testing.T) {
			f := openGGUF(t, file)
			total := map[Type]*blockStats{}
			for _, ref := range f.tensors {
				q, ok := TypeFromGGML(ref.typ)
				if !ok {
					continue
				}
				src := bf16.byName[ref.name]
				if src == nil || src.typ != ggmlBF16 || src.cols() != ref.cols() || src.rows() != ref.rows() {
					t.Fatalf("%s: no BF16 source of the same shape for %v tensor %s %v", file, q, ref.name, ref.ne)
				}
				st := compareTensor(t, q, src, ref)
				if total[q] == nil {
					total[q] = &blockStats{}
				}
				tot := total[q]
				tot.blocks += st.blocks
				tot.same += st.same
				tot.errOurs += st.errOurs
				tot.errRef += st.errRef
				// ggml's reference quantizers are deterministic float32 code
				// that this package follows operation by operation (no FMA on
				// either side), so every block must be llama.cpp's. Should a
				// platform ever round differently, the tensor's squared error
				// must still not exceed llama.cpp's; the 1e-12 relative slack
				// is float64 summation noise in sqErr, nothing else.
				if st.same != st.blocks {
					t.Errorf("%s: %d of %d %v blocks differ from llama.cpp's", ref.name, st.blocks-st.same, st.blocks, q)
				}
				if st.errOurs > st.errRef*(1+1e-12) {
					t.Errorf("%s: squared error %.12g > llama.cpp's %.12g", ref.name, st.errOurs, st.errRef)
				}
			}
			for _, q := range slices.Sorted(maps.Keys(total)) {
				tot := total[q]
				t.Logf("%s %v: %d/%d blocks identical (%.4f%%), error ratio ours/llama.cpp %.9f",
					file, q, tot.same, tot.blocks, 100*float64(tot.same)/float64(tot.blocks), tot.errOurs/tot.errRef)
			}
		})
	}
}
