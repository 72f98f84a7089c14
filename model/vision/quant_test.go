package vision

import (
	"context"
	"encoding/binary"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// quantGuardQ8_0 bounds the relative error of the Q8_0 tower's embeddings
// against the float64 goldens: the bound the text model's quantized tests
// put on Q8_0 logits (model/quant_test.go's quantGuard["q8_0"]).
const quantGuardQ8_0 = 0.15

// dequantizedSource returns vl-tiny's tower with every matrix that
// Options.Quant q quantizes replaced by its quantized values, widened
// back to F32: a float tower with the quantized tower's weights.
func dequantizedSource(t *testing.T, q quant.Type) (*Config, memSource, int) {
	t.Helper()
	cfg, src := tinySource(t)
	changed := 0
	for name, ts := range src {
		if !strings.HasSuffix(name, ".weight") || len(ts.Shape) < 2 || strings.HasSuffix(name, "pos_embed.weight") {
			continue
		}
		rows, cols := ts.Shape[0], len(ts.Data)/2/ts.Shape[0]
		qt := matrixType(q, cols)
		if qt == quant.Keep {
			continue
		}
		if ts.DType != safetensors.BF16 {
			t.Fatalf("%s is %s; the test expects BF16", name, ts.DType)
		}
		qd, err := quantizeMatrix(qt, compute.BF16, ts.Data, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, cols)
		data := make([]byte, 4*rows*cols)
		for r := range rows {
			if err := quant.DequantizeRow(qt, row, qd[r*qt.RowBytes(cols):(r+1)*qt.RowBytes(cols)]); err != nil {
				t.Fatal(err)
			}
			for i, v := range row {
				binary.LittleEndian.PutUint32(data[4*(r*cols+i):], math.Float32bits(v))
			}
		}
		ts.DType, ts.Data = safetensors.F32, data
		src[name] = ts
		changed++
	}
	return cfg, src, changed
}

// TestQuantizedTower encodes the golden images with the tower's matrices
// in Q8_0 on every backend: the embeddings within the text model's Q8_0
// bound of the float64 goldens and, on backends that multiply the
// dequantized weights by unquantized inputs (Vulkan), within the goldens'
// own 1e-4 of a float tower holding the same quantized weights.
func TestQuantizedTower(t *testing.T) {
	g, f := readGolden(t)
	names := make([]string, 0, len(g.Images))
	for name := range g.Images {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, tb := range testBackends {
		t.Run(tb.name, func(t *testing.T) {
			be := tb.open(t)
			tw := openTiny(t, Options{Backend: be, Quant: quant.Q8_0})
			cfg, src, changed := dequantizedSource(t, quant.Q8_0)
			if changed == 0 {
				t.Fatal("no matrix of vl-tiny fits Q8_0")
			}
			ref, err := newTower(cfg, src, Options{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			qin, _ := be.(interface{ QuantizesInputs(compute.DType) bool })
			exact := qin == nil || !qin.QuantizesInputs(compute.Q8_0)
			var worst, worstRef float64
			for _, name := range names {
				im := g.Images[name]
				pv := floats(t, f, im.PixelValues)
				got, err := tw.Encode(context.Background(), pv, im.Grid)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				e := relErr(t, name, got, floats(t, f, im.Embeds))
				worst = max(worst, e)
				if e > quantGuardQ8_0 {
					t.Errorf("%s: Q8_0 embeddings: rel err %.3g against the goldens > %g", name, e, quantGuardQ8_0)
				}
				want, err := ref.Encode(context.Background(), pv, im.Grid)
				if err != nil {
					t.Fatal(err)
				}
				er := relErr(t, name, got, want)
				worstRef = max(worstRef, er)
				if exact && er > g.Tolerances.EmbedsRelMax {
					t.Errorf("%s: Q8_0 embeddings: rel err %.3g against the float tower of the same weights > %g", name, er, g.Tolerances.EmbedsRelMax)
				}
			}
			t.Logf("%d matrices in Q8_0: rel err %.3g against the goldens, %.3g against the float tower of the dequantized weights (inputs quantized: %v)",
				changed, worst, worstRef, !exact)
		})
	}
}

func TestMatrixType(t *testing.T) {
	for _, c := range []struct {
		q    quant.Type
		cols int
		want quant.Type
	}{
		{quant.Keep, 256, quant.Keep},
		{quant.Q8_0, 32, quant.Q8_0},
		{quant.Q8_0, 120, quant.Keep},
		{quant.Q4_K, 1536, quant.Q4_K},
		{quant.Q4_K, 1152, quant.Q8_0}, // the 9B tower's width
		{quant.Q8_0, 4304, quant.Keep}, // its MLP's
		{quant.Q4_K, 384, quant.Q8_0},
		{quant.Q6_K, 120, quant.Keep},
	} {
		if got := matrixType(c.q, c.cols); got != c.want {
			t.Errorf("matrixType(%v, %d) = %v, want %v", c.q, c.cols, got, c.want)
		}
	}
	if _, err := newTower(DefaultConfig(), memSource{}, Options{Backend: testBackends[0].open(t), Quant: quant.Type(200)}); err == nil {
		t.Error("an unknown Options.Quant was accepted")
	}
}
