package vision

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/gguf"
)

// llama.cpp's mmproj files of vl-tiny (testdata/gguf/README.md).
var (
	mmprojBF16 = filepath.Join("..", "..", "testdata", "gguf", "vl-tiny-mmproj-bf16.gguf")
	mmprojF16  = filepath.Join("..", "..", "testdata", "gguf", "vl-tiny-mmproj-f16.gguf")
)

// TestReadMMProjConfig checks the config read from llama.cpp's file
// against config.json's: the same tower, every field, and the
// preprocessing of its metadata.
func TestReadMMProjConfig(t *testing.T) {
	want, ok, err := LoadConfig(vlTiny)
	if err != nil || !ok {
		t.Fatal(err, ok)
	}
	for _, path := range []string{mmprojBF16, mmprojF16} {
		info, err := ReadMMProj(path)
		if err != nil {
			t.Fatal(err)
		}
		if *info.Config != *want {
			t.Errorf("%s: config %+v, config.json's %+v", path, *info.Config, *want)
		}
		p := info.Processor
		if p.PatchSize != 8 || p.MergeSize != 2 || p.TemporalPatchSize != 2 || p.Mean != [3]float64{0.5, 0.5, 0.5} || p.Std != [3]float64{0.5, 0.5, 0.5} {
			t.Errorf("%s: processor %+v", path, p)
		}
		if info.PixelBounds || p.MinPixels != 65536 || p.MaxPixels != 16777216 {
			t.Errorf("%s: pixel bounds %v [%d, %d]; llama.cpp writes none, so Qwen3.5's", path, info.PixelBounds, p.MinPixels, p.MaxPixels)
		}
		if info.Tensors != 34 {
			t.Errorf("%s: %d tensors, want 34", path, info.Tensors)
		}
	}
}

// TestMMProjEmbeddingsMatchSafetensors encodes every golden image with the
// towers of llama.cpp's BF16 and F16 mmproj files of vl-tiny and with the
// safetensors checkpoint's: the BF16 file holds the checkpoint's values
// (matrices as they are, the rest widened to F32) and the F16 file their
// F16 roundings (exact but for F16's subnormals), so the embeddings agree
// within 1e-5 (the products run on other kernels: F32 patch kernel).
func TestMMProjEmbeddingsMatchSafetensors(t *testing.T) {
	g, f := readGolden(t)
	ref := openTiny(t, Options{})
	be := cpu.New(cpu.Options{})
	defer be.Close()
	names := make([]string, 0, len(g.Images))
	for name := range g.Images {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, c := range []struct {
		path string
		tol  float64
	}{{mmprojBF16, 1e-5}, {mmprojF16, 1e-5}} {
		tw, err := OpenGGUF(c.path, Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			img := g.Images[name]
			px := floats(t, f, img.PixelValues)
			want, err := ref.Encode(context.Background(), px, img.Grid)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tw.Encode(context.Background(), px, img.Grid)
			if err != nil {
				t.Fatal(err)
			}
			e := relErr(t, name, got, want)
			golden := relErr(t, name, got, floats(t, f, img.Embeds))
			t.Logf("%s %s: rel err %.3g against the safetensors tower, %.3g against the golden", filepath.Base(c.path), name, e, golden)
			if e > c.tol {
				t.Errorf("%s %s: rel err %.3g against the safetensors tower > %g", c.path, name, e, c.tol)
			}
			if golden > g.Tolerances.EmbedsRelMax {
				t.Errorf("%s %s: rel err %.3g against the golden > %g", c.path, name, golden, g.Tolerances.EmbedsRelMax)
			}
		}
		if err := tw.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestWriteGGUFMatchesLlamaCpp writes vl-tiny's tower with WriteGGUF in
// BF16 and F16 and compares the files with llama.cpp's converter's: the
// same tensors in the same order, with the same types, dims and bytes, and
// the same clip.* metadata (the pixel bounds aside, which WriteGGUF adds).
// The F32 file reads back to the same config.
func TestWriteGGUFMatchesLlamaCpp(t *testing.T) {
	for _, c := range []struct {
		typ, ref string
		ft       int
	}{{GGUFTypeBF16, mmprojBF16, 32}, {GGUFTypeF16, mmprojF16, 1}, {GGUFTypeF32, "", 0}} {
		out := filepath.Join(t.TempDir(), "mmproj-"+c.typ+".gguf")
		res, err := WriteGGUF(context.Background(), vlTiny, out, WriteGGUFOptions{Type: c.typ})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tensors != 34 || res.FileType != c.ft {
			t.Errorf("%s: result %+v", c.typ, res)
		}
		info, err := ReadMMProj(out)
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := LoadConfig(vlTiny)
		if *info.Config != *want || !info.PixelBounds || info.Processor.MinPixels != 1024 || info.Processor.MaxPixels != 16384 || info.FileType != c.ft {
			t.Errorf("%s: read back %+v, config %+v", c.typ, info, *info.Config)
		}
		if c.ref == "" {
			continue
		}
		got, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := gguf.Open(c.ref)
		if err != nil {
			t.Fatal(err)
		}
		gt, rt := got.Tensors(), ref.Tensors()
		if len(gt) != len(rt) {
			t.Fatalf("%s: %d tensors, llama.cpp's file %d", c.typ, len(gt), len(rt))
		}
		for i := range rt {
			if gt[i].Name != rt[i].Name || gt[i].Type != rt[i].Type || !slices.Equal(gt[i].Dims, rt[i].Dims) {
				t.Errorf("%s: tensor %d is %s %s %v, llama.cpp's %s %s %v", c.typ, i, gt[i].Name, gt[i].Type, gt[i].Dims, rt[i].Name, rt[i].Type, rt[i].Dims)
				continue
			}
			a, _ := got.Tensor(gt[i].Name)
			b, _ := ref.Tensor(rt[i].Name)
			if !bytes.Equal(a.Data, b.Data) {
				t.Errorf("%s: tensor %s differs from llama.cpp's", c.typ, gt[i].Name)
			}
		}
		n := 0
		for _, kv := range ref.Metadata().KVs() {
			if !strings.HasPrefix(kv.Key, "clip.") && kv.Key != "general.file_type" && kv.Key != "general.architecture" && kv.Key != "general.type" {
				continue
			}
			n++
			v, ok := got.Metadata().Get(kv.Key)
			if !ok || !reflect.DeepEqual(v, kv.Value) {
				t.Errorf("%s: %s = %#v, llama.cpp's %#v", c.typ, kv.Key, v, kv.Value)
			}
		}
		if n < 18 {
			t.Errorf("%s: only %d keys compared", c.typ, n)
		}
		got.Close()
		ref.Close()
	}
}
