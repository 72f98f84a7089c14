package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/fp8"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// toFP8 returns the E4M3 byte nearest to v (ties to the lower byte).
func toFP8(v float32) uint8 {
	best, sign := uint8(0), uint8(0)
	if v < 0 {
		v, sign = -v, 0x80
	}
	for b := uint8(1); b < 0x7f; b++ {
		if math.Abs(float64(fp8.E4M3(b)-v)) < math.Abs(float64(fp8.E4M3(best)-v)) {
			best = b
		}
	}
	return best | sign
}

// writeFP8 rewrites the checkpoint in src (one module per expert) into
// fp8Dir as an FP8 checkpoint, every linear of the decoder layers but
// in_proj_a/b in F8_E4M3 with BF16 scales in blocks of block, and into
// bf16Dir the same weights dequantized to BF16: the checkpoint the FP8
// one must load as.
func writeFP8(t *testing.T, src, fp8Dir, bf16Dir string, block []int) {
	t.Helper()
	ck, err := safetensors.OpenCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var q, deq []safetensors.Tensor
	for _, name := range ck.Names() {
		ten, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		plain := safetensors.Tensor{Name: name, DType: ten.DType, Shape: ten.Shape, Data: slices.Clone(ten.Data)}
		if !strings.Contains(name, "layers.") || !strings.HasSuffix(name, "proj.weight") || strings.Contains(name, "in_proj_a") ||
			strings.Contains(name, "in_proj_b") || len(ten.Shape) != 2 {
			q, deq = append(q, plain), append(deq, plain)
			continue
		}
		vals, err := ten.ToFloat32()
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := ten.Shape[0], ten.Shape[1]
		ss := fp8ScaleShape(rows, cols, block)
		scales := make([]float32, ss[0]*ss[1])
		for r := range rows {
			for c := range cols {
				i := (r/block[0])*ss[1] + c/block[1]
				scales[i] = max(scales[i], float32(math.Abs(float64(vals[r*cols+c]))))
			}
		}
		for i, m := range scales {
			scales[i] = half.BF16ToF32(half.F32ToBF16(m / 448)) // a BF16 scale
		}
		codes := make([]byte, rows*cols)
		dq := make([]float32, rows*cols)
		for r := range rows {
			for c := range cols {
				s := scales[(r/block[0])*ss[1]+c/block[1]]
				codes[r*cols+c] = toFP8(vals[r*cols+c] / s)
				dq[r*cols+c] = fp8.E4M3(codes[r*cols+c]) * s
			}
		}
		sb := make([]byte, 2*len(scales))
		db := make([]byte, 2*len(dq))
		if err := half.EncodeBF16(sb, scales); err != nil {
			t.Fatal(err)
		}
		if err := half.EncodeBF16(db, dq); err != nil {
			t.Fatal(err)
		}
		q = append(q, safetensors.Tensor{Name: name, DType: safetensors.F8E4M3, Shape: ten.Shape, Data: codes},
			safetensors.Tensor{Name: fp8ScaleName(name), DType: safetensors.BF16, Shape: ss[:], Data: sb})
		deq = append(deq, safetensors.Tensor{Name: name, DType: safetensors.BF16, Shape: ten.Shape, Data: db})
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(cfg, &top); err != nil {
		t.Fatal(err)
	}
	for dir, ts := range map[string][]safetensors.Tensor{fp8Dir: q, bf16Dir: deq} {
		if err := safetensors.WriteSharded(dir, ts, 1<<30); err != nil {
			t.Fatal(err)
		}
		if dir == fp8Dir {
			top["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": block}
		} else {
			delete(top, "quantization_config")
		}
		raw, _ := json.Marshal(top)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFP8Checkpoint checks an FP8 checkpoint as Qwen releases them
// (experts one module each, F8_E4M3 linears with block scales) against its
// BF16 twin: the same logits bit for bit; and that missing scales, scales
// of the wrong shape and an unsupported quant_method are refused.
func TestFP8Checkpoint(t *testing.T) {
	modules := t.TempDir()
	writeModuleLayout(t, moeTiny, modules, 1<<30)
	fp8Dir, bf16Dir := t.TempDir(), t.TempDir()
	writeFP8(t, modules, fp8Dir, bf16Dir, []int{16, 16}) // several blocks per matrix, partial ones at the edges of 48-wide rows
	open := func(dir string) []float32 {
		m, err := Open(dir, withCPU(t, Options{MTP: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		_, logits := prefill(t, m, []int{1, 5, 9, 200, 17, 3, 999}, 0, true)
		return logits
	}
	if got, want := open(fp8Dir), open(bf16Dir); !slices.Equal(got, want) {
		t.Errorf("FP8 checkpoint's logits differ from its BF16 twin's (rel %.3g)", relErr(got, want))
	}
	cfgPath := filepath.Join(fp8Dir, "config.json")
	raw, _ := os.ReadFile(cfgPath)
	for _, c := range []struct{ from, to, want string }{
		{`"weight_block_size":[16,16]`, `"weight_block_size":[16,32]`, "weight_scale_inv has shape"},
		{`"quant_method":"fp8"`, `"quant_method":"gptq"`, `quant_method "gptq" is not supported`},
		{`"quantization_config"`, `"no_quantization_config"`, "no quantization_config"},
	} {
		if !strings.Contains(string(raw), c.from) {
			t.Fatalf("config.json lacks %s", c.from)
		}
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(raw), c.from, c.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(fp8Dir, withCPU(t, Options{})); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.to, err, c.want)
		}
	}
}
