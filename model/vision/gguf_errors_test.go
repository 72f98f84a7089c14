package vision

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/clip"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// rewriteMMProj writes a copy of llama.cpp's BF16 mmproj file of vl-tiny
// with its metadata and tensors changed by edit, and returns its path.
func rewriteMMProj(t *testing.T, edit func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor) string {
	t.Helper()
	f, err := gguf.Open(mmprojBF16)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	md, err := gguf.NewMetadata(f.Metadata().KVs()...)
	if err != nil {
		t.Fatal(err)
	}
	var ts []gguf.Tensor
	for _, info := range f.Tensors() {
		x, err := f.Tensor(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = slices.Clone(x.Data)
		ts = append(ts, x)
	}
	ts = edit(md, ts)
	data, err := gguf.Marshal(md, ts)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mmproj-edited.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// setKey returns an edit setting one metadata key.
func setKey(t *testing.T, key string, v any) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
	return func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		if err := md.Set(key, v); err != nil {
			t.Fatal(err)
		}
		return ts
	}
}

// withoutKey returns an edit leaving one metadata key out.
func withoutKey(t *testing.T, key string) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
	return func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		var kvs []gguf.KV
		for _, kv := range md.KVs() {
			if kv.Key != key {
				kvs = append(kvs, kv)
			}
		}
		n, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		*md = *n
		return ts
	}
}

// TestMMProjErrors checks that files the reader cannot take fail with an
// error that says why: not GGUF, a model rather than a projector, another
// projector, a tower Qwen3.5 does not have, a tensor missing or of the
// wrong shape or type.
func TestMMProjErrors(t *testing.T) {
	notGGUF := filepath.Join(t.TempDir(), "mmproj-text.gguf")
	if err := os.WriteFile(notGGUF, []byte("this is not a GGUF file at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join("..", "..", "testdata", "gguf", "ksmall-bf16.gguf")
	cases := []struct {
		name, path string
		want       string
		notMMProj  bool
	}{
		{"not gguf", notGGUF, "gguf", false},
		{"missing file", filepath.Join(t.TempDir(), "none.gguf"), "no such file", false},
		{"a model", model, `general.architecture is "qwen35", want "clip"`, true},
		{"other projector", rewriteMMProj(t, setKey(t, clip.KeyProjectorType, "qwen2vl_merger")), `projector type "qwen2vl_merger" is not supported`, true},
		{"vision projector", rewriteMMProj(t, setKey(t, clip.KeyVisionProjectorType, "gemma3")), `projector type "gemma3"`, true},
		{"deepstack", rewriteMMProj(t, setKey(t, clip.KeyIsDeepstackLayers, []bool{true, false})), "deepstack", true},
		{"silu", rewriteMMProj(t, setKey(t, clip.KeyUseSILU, true)), "GELU", true},
		{"no gelu", rewriteMMProj(t, withoutKey(t, clip.KeyUseGELU)), "GELU", true},
		{"no vision", rewriteMMProj(t, setKey(t, clip.KeyHasVisionEncoder, false)), "has_vision_encoder is false", true},
		{"no block count", rewriteMMProj(t, withoutKey(t, clip.KeyBlockCount)), clip.KeyBlockCount, false},
		{"zero heads", rewriteMMProj(t, setKey(t, clip.KeyHeadCount, uint32(0))), "want a positive size", false},
		{"odd heads", rewriteMMProj(t, setKey(t, clip.KeyHeadCount, uint32(3))), "not a multiple of num_heads", false},
		{"mean of 2", rewriteMMProj(t, setKey(t, clip.KeyImageMean, []float32{0.5, 0.5})), "has 2 values, want 3", false},
		{"no std", rewriteMMProj(t, withoutKey(t, clip.KeyImageStd)), clip.KeyImageStd, false},
		{"image size", rewriteMMProj(t, setKey(t, clip.KeyImageSize, uint32(48))), "does not match the position table", false},
		{"more blocks", rewriteMMProj(t, setKey(t, clip.KeyBlockCount, uint32(3))), "missing tensor v.blk.2.", false},
		{"missing tensor", rewriteMMProj(t, func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			return slices.DeleteFunc(ts, func(x gguf.Tensor) bool { return x.Name == "mm.2.bias" })
		}), "missing tensor mm.2.bias", false},
		{"missing frame", rewriteMMProj(t, func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			return slices.DeleteFunc(ts, func(x gguf.Tensor) bool { return x.Name == clip.PatchWeight1 })
		}), "missing tensor " + clip.PatchWeight1, false},
		{"wider projection", rewriteMMProj(t, setKey(t, clip.KeyProjectionDim, uint32(128))), "tensor mm.2.bias has dims [64]; the file's metadata implies [128]", false},
		{"quantized", rewriteMMProj(t, func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			for i := range ts {
				if ts[i].Name == "mm.0.weight" { // 128 x 128 BF16: as many bytes as I8
					ts[i].Type = gguf.I16
				}
			}
			return ts
		}), "tensor mm.0.weight has type I16; the tower reads F32, F16 and BF16", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadMMProj(c.path)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if errors.Is(err, ErrNotMMProj) != c.notMMProj {
				t.Errorf("error %q: errors.Is(ErrNotMMProj) = %v", err, !c.notMMProj)
			}
			be := cpu.New(cpu.Options{})
			defer be.Close()
			if _, err := OpenGGUF(c.path, Options{Backend: be}); err == nil {
				t.Error("OpenGGUF: no error")
			}
		})
	}
}

// TestMMProjMetadataVariants checks the keys the reader defaults and the
// patch frames of mixed types: without a merge size or epsilon it takes
// Qwen3.5's (2, 1e-6), pixel bounds come from the file when it has them,
// and frames stored in two types are joined in F32 with the same values.
func TestMMProjMetadataVariants(t *testing.T) {
	path := rewriteMMProj(t, func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		for _, e := range []func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor{
			withoutKey(t, clip.KeySpatialMergeSize), withoutKey(t, clip.KeyLayerNormEps),
			setKey(t, clip.KeyImageMinPixels, uint32(1024)), setKey(t, clip.KeyImageMaxPixels, uint32(16384)),
		} {
			e(md, ts)
		}
		// Frame 1 in BF16: the F32 values of a BF16 checkpoint are exact.
		for i := range ts {
			if ts[i].Name == clip.PatchWeight1 {
				b := make([]byte, len(ts[i].Data)/2)
				for k := range len(b) / 2 {
					b[2*k], b[2*k+1] = ts[i].Data[4*k+2], ts[i].Data[4*k+3]
				}
				ts[i].Type, ts[i].Data = gguf.BF16, b
			}
		}
		return ts
	})
	info, err := ReadMMProj(path)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := LoadConfig(vlTiny)
	if *info.Config != *want {
		t.Errorf("config %+v, want %+v", *info.Config, *want)
	}
	if !info.PixelBounds || info.Processor.MinPixels != 1024 || info.Processor.MaxPixels != 16384 {
		t.Errorf("pixel bounds %v [%d, %d]", info.PixelBounds, info.Processor.MinPixels, info.Processor.MaxPixels)
	}
	g, f := readGolden(t)
	img := g.Images["noise_37x23"]
	px := floats(t, f, img.PixelValues)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	var outs [2][]float32
	for k, p := range []string{mmprojBF16, path} {
		tw, err := OpenGGUF(p, Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		if outs[k], err = tw.Encode(context.Background(), px, img.Grid); err != nil {
			t.Fatal(err)
		}
		tw.Close()
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Errorf("mixed-type patch frames: rel err %.3g against the F32 frames", relErr(t, "embeds", outs[1], outs[0]))
	}
}

// TestFindMMProj lists the mmproj files beside a model.
func TestFindMMProj(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"model.gguf", "mmproj-a.gguf", "MMPROJ-B.GGUF", "mmproj.txt", "x-mmproj.gguf"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "mmproj-dir.gguf"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "MMPROJ-B.GGUF"), filepath.Join(dir, "mmproj-a.gguf")}
	for _, model := range []string{dir, filepath.Join(dir, "model.gguf")} {
		got, err := FindMMProj(model)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("FindMMProj(%s) = %v, %v; want %v", model, got, err, want)
		}
	}
	if _, err := FindMMProj(filepath.Join(dir, "none")); err == nil {
		t.Error("no error for a missing model")
	}
}

// TestResolve checks where Resolve takes the tower, the preprocessing and
// the special ids from, for checkpoints and GGUF models, with and without
// an mmproj file.
func TestResolve(t *testing.T) {
	ksmall := filepath.Join("..", "..", "testdata", "gguf", "ksmall-bf16.gguf")
	vocab := map[string]int{ImagePadToken: 7, VisionStartToken: 5}
	lookup := func(s string) (int, bool) { id, ok := vocab[s]; return id, ok }
	s, err := Resolve(vlTiny, ResolveOptions{TextHidden: 64})
	if err != nil {
		t.Fatal(err)
	}
	if s.MMProj != "" || s.Dir != vlTiny || s.ImageToken != 996 || s.VisionStart != 993 || s.Processor.MinPixels != 1024 || s.Processor.MaxPixels != 16384 {
		t.Errorf("checkpoint: %+v", s)
	}
	// The checkpoint with llama.cpp's file: config.json's ids and
	// preprocessor_config.json's bounds, which the file lacks.
	s, err = Resolve(vlTiny, ResolveOptions{MMProj: mmprojBF16, TokenID: lookup, TextHidden: 64})
	if err != nil {
		t.Fatal(err)
	}
	if s.MMProj != mmprojBF16 || s.ImageToken != 996 || s.VisionStart != 993 || s.Processor.MinPixels != 1024 || s.Processor.MaxPixels != 16384 {
		t.Errorf("checkpoint with mmproj: %+v", s)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	tw, err := s.Open(Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if tw.Config().OutHiddenSize != 64 {
		t.Errorf("tower config %+v", tw.Config())
	}
	tw.Close()
	textOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(textOnly, "config.json"), []byte(`{"hidden_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A GGUF model: the vocabulary's ids, Qwen3.5's bounds.
	s, err = Resolve(ksmall, ResolveOptions{MMProj: mmprojBF16, TokenID: lookup})
	if err != nil {
		t.Fatal(err)
	}
	if s.ImageToken != 7 || s.VisionStart != 5 || s.Processor.MinPixels != 65536 || s.Processor.MaxPixels != 16777216 {
		t.Errorf("GGUF model with mmproj: %+v", s)
	}
	delete(vocab, VisionStartToken)
	if s, err = Resolve(ksmall, ResolveOptions{MMProj: mmprojBF16, TokenID: lookup}); err != nil || s.VisionStart != -1 {
		t.Errorf("without <|vision_start|>: %+v, %v", s, err)
	}
	for _, c := range []struct {
		name, model string
		o           ResolveOptions
		want        string
		noTower     bool
	}{
		{"GGUF without mmproj", ksmall, ResolveOptions{TokenID: lookup}, "separate mmproj file", true},
		{"text-only checkpoint", textOnly, ResolveOptions{}, "no vision_config", true},
		{"no config.json", t.TempDir(), ResolveOptions{}, "no config.json", true},
		{"width", ksmall, ResolveOptions{MMProj: mmprojBF16, TokenID: lookup, TextHidden: 256}, "projection_dim 64 is not the text model's hidden size 256", false},
		{"checkpoint width", vlTiny, ResolveOptions{TextHidden: 256}, "out_hidden_size 64 is not the text model's hidden size 256", false},
		{"no tokenizer", ksmall, ResolveOptions{MMProj: mmprojBF16}, "no tokenizer", false},
		{"no image pad", ksmall, ResolveOptions{MMProj: mmprojBF16, TokenID: func(string) (int, bool) { return 0, false }}, "no <|image_pad|> token", false},
		{"not an mmproj", vlTiny, ResolveOptions{MMProj: ksmall}, "want \"clip\"", false},
	} {
		_, err := Resolve(c.model, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNoTower) != c.noTower {
			t.Errorf("%s: error %v, want %q (no tower: %v)", c.name, err, c.want, c.noTower)
		}
	}
}

// vlTinyCopy writes a copy of vl-tiny's checkpoint (config.json,
// preprocessor_config.json, model.safetensors) with its tensors changed by
// edit, which gets them in the file's order with their raw data.
func vlTinyCopy(t *testing.T, edit func(ts []safetensors.Tensor)) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "preprocessor_config.json"} {
		data, err := os.ReadFile(filepath.Join(vlTiny, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sf, err := safetensors.Open(filepath.Join(vlTiny, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	var ts []safetensors.Tensor
	for _, name := range sf.Names() {
		x, _ := sf.Tensor(name)
		x.Data = slices.Clone(x.Data)
		ts = append(ts, x)
	}
	edit(ts)
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWriteGGUFErrors checks WriteGGUF's refusals: an unknown type, a
// checkpoint without a tower or with a tensor of the wrong shape, and a
// value F16 cannot hold; a failed write leaves no file.
func TestWriteGGUFErrors(t *testing.T) {
	textOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(textOnly, "config.json"), []byte(`{"hidden_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	big := vlTinyCopy(t, func(ts []safetensors.Tensor) {
		for i := range ts {
			if ts[i].Name == "model.visual.merger.linear_fc2.weight" {
				binary.LittleEndian.PutUint16(ts[i].Data[6:], half.F32ToBF16(1e6))
			}
		}
	})
	shape := vlTinyCopy(t, func(ts []safetensors.Tensor) {
		for i := range ts {
			if ts[i].Name == "model.visual.blocks.1.attn.qkv.weight" {
				ts[i].Shape = []int{32, 96}
			}
		}
	})
	out := filepath.Join(t.TempDir(), "mmproj.gguf")
	for _, c := range []struct {
		name, dir, typ, want string
	}{
		{"type", vlTiny, "q8_0", `mmproj type "q8_0"`},
		{"no tower", textOnly, "", "no vision_config"},
		{"shape", shape, "", "blocks.1.attn.qkv.weight has shape [32 96]"},
		{"f16 overflow", big, "f16", "overflows F16"},
	} {
		_, err := WriteGGUF(context.Background(), c.dir, out, WriteGGUFOptions{Type: c.typ})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a failed write left %s", c.name, out)
		}
	}
	// BF16 holds the large value.
	if _, err := WriteGGUF(context.Background(), big, out, WriteGGUFOptions{Type: GGUFTypeBF16}); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := WriteGGUF(ctx, vlTiny, out+"2", WriteGGUFOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
