package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/internal/half"
)

// kmoeDir is the mixture-of-experts checkpoint llama.cpp's kmoe-*.gguf
// files were converted from, with its float64 goldens.
var kmoeDir = filepath.Join(ggufDir, "kmoe")

// TestGGUFMoEGoldens runs llama.cpp's BF16 qwen35moe file against the
// float64 goldens of the checkpoint it came from, with their tolerance:
// every case's logits, argmaxes and greedy tokens, and the hidden states.
func TestGGUFMoEGoldens(t *testing.T) {
	runGoldenModel(t, loadGoldenModel(t, kmoeDir, filepath.Join(ggufDir, "kmoe-bf16.gguf"), Options{}))
}

// TestGGUFMoEMatchesSafetensors runs llama.cpp's BF16 qwen35moe file
// against the safetensors checkpoint it was converted from, and its Q8_0
// file against that checkpoint quantized while loading (q8_0: the experts
// and the shared expert in Q8_0, the router and the shared expert's gate
// kept, as llama-quantize does). The converter stores the router and the
// shared expert gate in F32, the checkpoint's BF16 values widened, whose
// products run on other kernels than BF16 ones and may round otherwise:
// with those two tensors narrowed back to BF16 (exactly) the files compute
// what the checkpoint does, bit for bit; as written, the BF16 file is
// within 1e-5 (measured 6.8e-7), and the Q8_0 file, where a rounding
// difference of the router picks another expert at a near tie, within
// moeRouterGuard (measured 0.0062), with the same greedy tokens.
func TestGGUFMoEMatchesSafetensors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, c := range []struct {
		file, mix string
		guard     float64
	}{{"kmoe-bf16.gguf", "", ggufFaithful}, {"kmoe-q8_0.gguf", "q8_0", moeRouterGuard}} {
		want := ggufPromptLogits(t, be, kmoeDir, Options{Quantize: c.mix})
		got := ggufPromptLogits(t, be, filepath.Join(ggufDir, c.file), Options{})
		e := relErr(got, want)
		t.Logf("%s against the safetensors (quantize %q): rel err %.3g", c.file, c.mix, e)
		if !(e <= c.guard) {
			t.Errorf("%s: rel err %.3g > %g", c.file, e, c.guard)
		}
		if g, w := argmaxes(got, 2048), argmaxes(want, 2048); !slices.Equal(g, w) {
			t.Errorf("%s: greedy tokens %v, safetensors %v", c.file, g, w)
		}
		narrowed := editGGUF(t, c.file, narrowRouters(t))
		checkClose(t, c.file+" with the router and shared expert gate in BF16", ggufPromptLogits(t, be, narrowed, Options{}), want, 0)
	}
}

// moeRouterGuard bounds a quantized file against the same quantization of
// its checkpoint while only the router's kernel differs (F32 against
// BF16 products of the same values): a near tie can route a token to
// another expert.
const moeRouterGuard = 0.02

// narrowRouters returns an editGGUF edit that stores every F32 router and
// shared expert gate in BF16, which holds their values exactly (the
// converter widened them from the checkpoint's BF16).
func narrowRouters(t *testing.T) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
	return func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		for i, x := range ts {
			if x.Type != gguf.F32 || !strings.HasSuffix(x.Name, ".ffn_gate_inp.weight") && !strings.HasSuffix(x.Name, ".ffn_gate_inp_shexp.weight") {
				continue
			}
			v := make([]float32, len(x.Data)/4)
			for j := range v {
				v[j] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*j:]))
			}
			out := make([]byte, 2*len(v))
			if err := half.EncodeBF16(out, v); err != nil {
				t.Fatal(err)
			}
			back := make([]float32, len(v))
			half.DecodeBF16(back, out)
			if !slices.Equal(back, v) {
				t.Fatalf("%s: F32 values that BF16 does not hold", x.Name)
			}
			ts[i].Type, ts[i].Data = gguf.BF16, out
		}
		return ts
	}
}

// moeQuantGuard bounds llama.cpp's quantized kmoe files against its BF16
// file: the median over positions of a position's max|diff|/max|BF16|,
// and the share of positions whose greedy token agrees with BF16's. It is
// a guard against broken kernels or layouts, as quantGuard is: on random
// weights a position whose router's top-k gap is below the quantization
// error picks another expert, and its logits move far (q8_0: a few of the
// chat prompt's positions, up to 0.46), so the median stands for the rest.
// Measured: q8_0 median 0.030, top-1 agreement 43/51; q4_k_m 0.26, 33/51.
var moeQuantGuard = map[string]struct{ median, agree float64 }{"q8_0": {0.05, 0.75}, "q4_k_m": {0.4, 0.55}}

// TestGGUFMoEQuantized runs llama.cpp's Q8_0 and Q4_K_M qwen35moe files:
// their experts load in the stored formats, the router in F32, and the
// logits stay within moeQuantGuard of the BF16 file's.
func TestGGUFMoEQuantized(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	want := ggufPromptLogits(t, be, filepath.Join(ggufDir, "kmoe-bf16.gguf"), Options{})
	for _, name := range []string{"q8_0", "q4_k_m"} {
		path := filepath.Join(ggufDir, "kmoe-"+name+".gguf")
		m, err := Open(path, Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		moe := m.w.layers[3].mlp.(*moeMLP)
		wantDown := map[string]compute.DType{"q8_0": compute.Q8_0, "q4_k_m": compute.Q6_K}[name] // layer 3: use_more_bits
		if dt := moe.experts[1].downProj.DType(); dt != wantDown {
			t.Errorf("%s: layer 3's ffn_down_exps loaded as %v, want %v", name, dt, wantDown)
		}
		if dt := moe.router.DType(); dt != compute.F32 {
			t.Errorf("%s: the router loaded as %v, want F32", name, dt)
		}
		m.Close()
		got := ggufPromptLogits(t, be, path, Options{})
		rows := len(want) / 2048
		errs := make([]float64, rows)
		agree := 0
		for i := range rows {
			g, w := got[i*2048:(i+1)*2048], want[i*2048:(i+1)*2048]
			errs[i] = relErr(g, w)
			if argmax(g) == argmax(w) {
				agree++
			}
		}
		slices.Sort(errs)
		median, share := errs[rows/2], float64(agree)/float64(rows)
		guard := moeQuantGuard[name]
		t.Logf("%s against BF16: median position rel err %.3g (max %.3g), greedy tokens agree at %d/%d positions", name, median, errs[rows-1], agree, rows)
		if !(median <= guard.median) || !(errs[rows-1] <= 1) {
			t.Errorf("%s: median rel err %.3g > %g, or max %.3g > 1", name, median, guard.median, errs[rows-1])
		}
		if share < guard.agree {
			t.Errorf("%s: greedy tokens agree at %d/%d positions, fewer than %g", name, agree, rows, guard.agree)
		}
	}
}

// TestGGUFMoEAgainstLlamaCpp compares the BF16 file's logits with
// llama.cpp's own on it (llama.cpp rounds activations to BF16 before its
// products, so they differ by that rounding: testdata/gguf/README.md puts
// llama.cpp 8.6e-3 from the float64 goldens' model).
func TestGGUFMoEAgainstLlamaCpp(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	got := ggufPromptLogits(t, be, filepath.Join(ggufDir, "kmoe-bf16.gguf"), Options{})
	ref := readF32(t, filepath.Join(ggufDir, "logits", "kmoe-bf16.f32"))
	e := relErr(got, ref)
	g, w := argmaxes(got, 2048), argmaxes(ref, 2048)
	agree := 0
	for i := range g {
		if g[i] == w[i] {
			agree++
		}
	}
	t.Logf("kmoe bf16: rel err %.3g against llama.cpp's logits, greedy tokens agree at %d/%d positions", e, agree, len(g))
	if !(e <= llamaGuard["bf16"]) {
		t.Errorf("rel err %.3g > %g", e, llamaGuard["bf16"])
	}
}

// TestConfigFromGGUFMoE reads the qwen35moe file's metadata into the
// config of the checkpoint it came from: the expert counts and widths,
// and no dense intermediate size (the file has no feed_forward_length).
func TestConfigFromGGUFMoE(t *testing.T) {
	want, err := LoadConfig(kmoeDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(filepath.Join(ggufDir, "kmoe-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.MoE() || got.NumExperts != 4 || got.NumExpertsPerTok != 2 || got.MoEIntermediateSize != 256 || got.SharedExpertIntermediateSize != 256 {
		t.Errorf("experts %d, top %d, widths %d and %d; want 4, 2, 256, 256", got.NumExperts, got.NumExpertsPerTok, got.MoEIntermediateSize, got.SharedExpertIntermediateSize)
	}
	got.EOSTokenIDs, want.EOSTokenIDs = nil, nil // the tokenizer's <|im_end|>, config.json's <|endoftext|>
	if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", *want) {
		t.Errorf("config from GGUF\n %+v\nconfig.json\n %+v", *got, *want)
	}
}

// TestGGUFMoESplit cuts the BF16 qwen35moe file into three parts as
// llama-gguf-split does (the metadata in the first, split.* in each, whole
// tensors in order), opens it by any part, and checks its logits against
// the single file's, bit for bit.
func TestGGUFMoESplit(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	src := filepath.Join(ggufDir, "kmoe-bf16.gguf")
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	infos := f.Tensors()
	const parts = 3
	for part := range parts {
		span := infos[part*len(infos)/parts : (part+1)*len(infos)/parts]
		kvs := []gguf.KV{{Key: gguf.KeySplitNo, Value: uint16(part)}, {Key: gguf.KeySplitCount, Value: uint16(parts)},
			{Key: gguf.KeySplitTensors, Value: int32(len(infos))}}
		if part == 0 {
			kvs = append(f.Metadata().KVs(), kvs...)
		}
		md, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		w, err := gguf.NewWriter(gguf.SplitPath(filepath.Join(dir, "kmoe"), part+1, parts), md, span)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range span {
			x, _ := f.Tensor(info.Name)
			if err := w.WriteTensor(info.Name, x.Data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := ggufPromptLogits(t, be, src, Options{})
	for _, open := range []string{dir, gguf.SplitPath(filepath.Join(dir, "kmoe"), 2, parts)} {
		checkClose(t, "split in three parts, opened as "+filepath.Base(open), ggufPromptLogits(t, be, open, Options{}), want, 0)
	}
}

// TestGGUFMoEErrors checks that broken qwen35moe files say what is wrong.
func TestGGUFMoEErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	dropKey := func(key string) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
		return func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			kept, _ := gguf.NewMetadata(slices.DeleteFunc(md.KVs(), func(kv gguf.KV) bool { return kv.Key == key })...)
			*md = *kept
			return ts
		}
	}
	cases := []struct {
		name string
		edit func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor
		want string
	}{
		{"expert count", dropKey("qwen35moe.expert_count"), `key "qwen35moe.expert_count": no such key`},
		{"expert width", func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			md.Set(qwen35.ArchKey(qwen35.ArchMoE, qwen35.KeyExpertFeedForwardLength), uint32(128))
			return ts
		}, "tensor blk.0.ffn_gate_exps.weight has shape [4 256 256]"},
		{"missing experts", func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			return slices.DeleteFunc(ts, func(x gguf.Tensor) bool { return x.Name == "blk.2.ffn_up_exps.weight" })
		}, "tensor blk.2.ffn_up_exps.weight (for model.layers.2.mlp.experts.up_proj)"},
		{"no MoE", func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			md.Set("general.architecture", qwen35.Arch)
			return ts
		}, `key "qwen35.block_count": no such key`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := editGGUF(t, "kmoe-bf16.gguf", c.edit)
			m, err := Open(path, Options{Backend: be})
			if err == nil {
				m.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestGGUFMemoryNote pretends the machine has less memory available than
// the file's weights: the first progress report carries a note saying so,
// with the bytes a decoded token reads (the k of E experts of each layer);
// with enough memory there is no note.
func TestGGUFMemoryNote(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	saved := hostMemAvailable
	defer func() { hostMemAvailable = saved }()
	for _, avail := range []int64{1 << 20, 1 << 40} {
		hostMemAvailable = func() (int64, bool) { return avail, true }
		var notes []string
		m, err := Open(filepath.Join(ggufDir, "kmoe-bf16.gguf"), Options{Backend: be, Progress: func(p Progress) {
			if p.Note != "" {
				notes = append(notes, p.Note)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		if avail > 1<<30 {
			if len(notes) != 0 {
				t.Errorf("notes with %d bytes available: %q", avail, notes)
			}
			continue
		}
		// 12.1 MB of weights; a token reads all but half the experts
		// (6.3 MB in all) and the rows of the untied embedding table (1 MB).
		if len(notes) != 1 || !strings.Contains(notes[0], "(12.1 MB) are more than the memory available (1.0 MB, MemAvailable)") ||
			!strings.Contains(notes[0], "up to 7.9 MB per decoded token") {
			t.Errorf("notes %q", notes)
		}
	}
}
