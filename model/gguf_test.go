package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/safetensors"
)

var ggufDir = filepath.Join("..", "testdata", "gguf")

// ggufPromptLogits runs testdata/gguf's prompts through the model at path
// (a checkpoint directory or a GGUF file), each from an empty sequence, and
// returns every position's logits, prompt after prompt (the layout of
// llama.cpp's logits files).
func ggufPromptLogits(t *testing.T, be compute.Backend, path string, o Options) []float32 {
	t.Helper()
	o.Backend = be
	m, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var all []float32
	for _, p := range readPrompts(t, filepath.Join(ggufDir, "logits", "prompts.txt")) {
		_, l := prefillSeq(t, m, p)
		all = append(all, l...)
	}
	return all
}

// argmaxes returns the largest logit's id of each row.
func argmaxes(logits []float32, vocab int) []int {
	out := make([]int, len(logits)/vocab)
	for i := range out {
		out[i] = argmax(logits[i*vocab : (i+1)*vocab])
	}
	return out
}

// ggufFaithful is the bound on a GGUF file against the safetensors
// it came from: max|diff|/max|ref| over every position's logits.
const ggufFaithful = 1e-5

// TestGGUFMatchesSafetensors runs llama.cpp's BF16 file against the
// safetensors checkpoint it was converted from, and its Q8_0 file against
// that checkpoint quantized while loading: the same logits within 1e-5
// relative and the same greedy tokens everywhere. Moving value heads back
// moves whole blocks and every transformed value is undone exactly (a norm's
// 1 + w, and ssm_a as far as the converter's float32 exp agrees with Go's),
// so the computation is the safetensors path's: measured 0 for both.
func TestGGUFMatchesSafetensors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, c := range []struct{ file, mix string }{{"ksmall-bf16.gguf", ""}, {"ksmall-q8_0.gguf", "q8_0"}} {
		want := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall"), Options{Quantize: c.mix})
		got := ggufPromptLogits(t, be, filepath.Join(ggufDir, c.file), Options{})
		e := relErr(got, want)
		t.Logf("%s against the safetensors (quantize %q): rel err %.3g", c.file, c.mix, e)
		if !(e <= ggufFaithful) {
			t.Errorf("%s: rel err %.3g > %g", c.file, e, ggufFaithful)
		}
		if g, w := argmaxes(got, 2048), argmaxes(want, 2048); !slices.Equal(g, w) {
			t.Errorf("%s: greedy tokens %v, safetensors %v", c.file, g, w)
		}
	}
}

// llamaGuard bounds govinfer's logits on llama.cpp's files against
// llama.cpp's own logits (max|diff|/max|llama|): llama.cpp rounds the
// activations before its products (to BF16, or 8-bit blocks for quantized
// weights), so they differ by that rounding (testdata/gguf/README.md: its
// BF16 logits are about 1.5e-2 from a float64 reference). Measured:
// bf16 0.0054, q8_0 0.012, q6_k 0.020, q4_k_m 0.026.
var llamaGuard = map[string]float64{"bf16": 0.015, "q8_0": 0.03, "q6_k": 0.04, "q4_k_m": 0.05}

// TestGGUFAgainstLlamaCpp runs each of llama.cpp's files and compares the
// logits with the ones llama.cpp computed on them, reporting the share of
// positions whose greedy token agrees.
func TestGGUFAgainstLlamaCpp(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, name := range []string{"bf16", "q8_0", "q6_k", "q4_k_m"} {
		got := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall-"+name+".gguf"), Options{})
		ref := readF32(t, filepath.Join(ggufDir, "logits", "ksmall-"+name+".f32"))
		e := relErr(got, ref)
		g, w := argmaxes(got, 2048), argmaxes(ref, 2048)
		agree := 0
		for i := range g {
			if g[i] == w[i] {
				agree++
			}
		}
		t.Logf("%s: rel err %.3g against llama.cpp's logits, greedy tokens agree at %d/%d positions", name, e, agree, len(g))
		if !(e <= llamaGuard[name]) {
			t.Errorf("%s: rel err %.3g > %g", name, e, llamaGuard[name])
		}
	}
}

// TestGGUFAgainstReference checks llama.cpp's BF16 file, whose norms and
// ssm_a the converter transformed, against the float64 reference of the
// checkpoint it came from, with the goldens' tolerance.
func TestGGUFAgainstReference(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ck, err := safetensors.OpenCheckpoint(filepath.Join(ggufDir, "ksmall"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, err := LoadConfig(filepath.Join(ggufDir, "ksmall"))
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, p := range readPrompts(t, filepath.Join(ggufDir, "logits", "prompts.txt")) {
		for _, row := range (&refModel{c: cfg, ck: ck, p: "model.language_model."}).forward(t, p) {
			for _, v := range row {
				want = append(want, float32(v))
			}
		}
	}
	for _, name := range []string{"bf16", "q8_0", "q6_k", "q4_k_m"} {
		got := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall-"+name+".gguf"), Options{})
		if name == "bf16" {
			checkClose(t, "llama.cpp's BF16 file against the float64 reference", got, want, 1e-4)
		} else {
			t.Logf("%s: rel err %.3g against the float64 reference of the BF16 weights", name, relErr(got, want))
		}
	}
}

// TestGGUFTiledMatchesGrouped forces every linear-attention layer of the
// BF16 file onto the path of files whose ssm_out blocks straddle value heads
// (attn_gate and ssm_out kept in the file's order, the core output moved
// there) and compares it with the usual path: the two differ only in
// ssm_out's summation order.
func TestGGUFTiledMatchesGrouped(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	checkTiledMatchesGrouped(t, be)
}

func checkTiledMatchesGrouped(t *testing.T, be compute.Backend) {
	path := filepath.Join(ggufDir, "ksmall-bf16.gguf")
	want := ggufPromptLogits(t, be, path, Options{})
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	heads := qwen35.Heads{Nk: cfg.LinearNumKeyHeads, Nv: cfg.LinearNumValueHeads, Dk: cfg.LinearKeyHeadDim, Dv: cfg.LinearValueHeadDim}
	names := map[string]bool{}
	for l, typ := range cfg.LayerTypes {
		if typ == LinearAttention {
			p := fmt.Sprintf("%slayers.%d.linear_attn.", ggufPrefix, l)
			names[p+"in_proj_z.weight"], names[p+"out_proj.weight"] = true, true
		}
	}
	m, err := newModel(cfg, &ggufSource{f: f, heads: heads, tiled: names}, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tiled := 0
	for _, l := range m.w.layers {
		if g, ok := l.mixer.(*gatedDeltaNet); ok {
			g.tiled = &heads
			tiled++
		}
	}
	if tiled != 3 {
		t.Fatalf("%d linear-attention layers, want 3", tiled)
	}
	var got []float32
	for _, p := range readPrompts(t, filepath.Join(ggufDir, "logits", "prompts.txt")) {
		_, l := prefillSeq(t, m, p)
		got = append(got, l...)
	}
	checkClose(t, "tiled against grouped value heads", got, want, ggufFaithful)
}

// TestGGUFLayers checks which layers of llama.cpp's files take the tiled
// path: none where ssm_out's blocks fit in a value head (BF16: one value;
// Q8_0: 32 of a head's 64), all three where they do not (K-quants: 256).
func TestGGUFLayers(t *testing.T) {
	for name, want := range map[string]int{"bf16": 0, "q8_0": 0, "q6_k": 3, "q4_k_m": 3} {
		f, err := gguf.Open(filepath.Join(ggufDir, "ksmall-"+name+".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		layers, names := tiledLayers(f, cfg, qwen35.Heads{Nk: 2, Nv: 4, Dk: 64, Dv: 64})
		if len(layers) != want || len(names) != 2*want {
			t.Errorf("%s: tiled layers %v (%d names), want %d", name, layers, len(names), want)
		}
		f.Close()
	}
}

// TestConfigFromGGUF reads the BF16 file's metadata into the config of the
// checkpoint it came from.
func TestConfigFromGGUF(t *testing.T) {
	want, err := LoadConfig(filepath.Join(ggufDir, "ksmall"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(filepath.Join(ggufDir, "ksmall-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	// The file's eos is the tokenizer's (<|im_end|>); config.json names
	// <|endoftext|>.
	if !slices.Equal(got.EOSTokenIDs, []int{2047}) {
		t.Errorf("EOSTokenIDs %v, want [2047]", got.EOSTokenIDs)
	}
	got.EOSTokenIDs, want.EOSTokenIDs = nil, nil
	if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", *want) {
		t.Errorf("config from GGUF\n %+v\nconfig.json\n %+v", *got, *want)
	}
}

// editGGUF writes a copy of a testdata/gguf file with its metadata and
// tensors changed by edit, and returns its path.
func editGGUF(t *testing.T, name string, edit func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor) string {
	t.Helper()
	f, err := gguf.Open(filepath.Join(ggufDir, name))
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
		ts = append(ts, x)
	}
	raw, err := gguf.Marshal(md, edit(md, ts))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGGUFExtraTensors adds an MTP block (as the converter writes it
// without --no-mtp: one more block, nextn_predict_layers 1) and a vision
// tensor to the BF16 file: they are skipped and the logits do not change.
func TestGGUFExtraTensors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	want := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall-bf16.gguf"), Options{})
	path := editGGUF(t, "ksmall-bf16.gguf", func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		md.Set(qwen35.KeyBlockCount, uint32(5))
		md.Set(qwen35.KeyNextNLayers, uint32(1))
		var extra []gguf.Tensor
		for _, x := range ts {
			if rest, ok := strings.CutPrefix(x.Name, "blk.3."); ok {
				x.Name = "blk.4." + rest
				extra = append(extra, x)
			}
		}
		vec := gguf.Tensor{TensorInfo: gguf.TensorInfo{Name: "blk.4.nextn.eh_proj.weight", Type: gguf.F32, Dims: []int{4}}, Data: make([]byte, 16)}
		vis := gguf.Tensor{TensorInfo: gguf.TensorInfo{Name: "v.blk.0.attn_q.weight", Type: gguf.F32, Dims: []int{4}}, Data: make([]byte, 16)}
		return append(append(ts, extra...), vec, vis)
	})
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumLayers != 4 {
		t.Fatalf("%d layers, want 4 (the fifth block is the MTP head)", cfg.NumLayers)
	}
	checkClose(t, "with MTP and vision tensors", ggufPromptLogits(t, be, path, Options{}), want, 0)
}

// TestGGUFTiedAndSplit drops output.weight (the output projection is then
// the embedding matrix, as with the checkpoint's lm_head replaced by it),
// and cuts the file in two parts.
func TestGGUFTiedAndSplit(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	tied := editGGUF(t, "ksmall-bf16.gguf", func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
		return slices.DeleteFunc(ts, func(x gguf.Tensor) bool { return x.Name == "output.weight" })
	})
	cfg, err := LoadConfig(tied)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.TieWordEmbeddings {
		t.Error("a file without output.weight is not tied")
	}
	m, err := Open(tied, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if m.w.lmHead != m.w.embed {
		t.Error("the output projection is not the embedding matrix")
	}
	m.Close()

	// Two parts, as llama-gguf-split cuts a model.
	f, err := gguf.Open(filepath.Join(ggufDir, "ksmall-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	infos := f.Tensors()
	cut := len(infos) / 2
	for part, span := range [][]gguf.TensorInfo{infos[:cut], infos[cut:]} {
		kvs := []gguf.KV{{Key: gguf.KeySplitNo, Value: uint16(part)}, {Key: gguf.KeySplitCount, Value: uint16(2)}, {Key: gguf.KeySplitTensors, Value: int32(len(infos))}}
		if part == 0 {
			kvs = append(f.Metadata().KVs(), kvs...)
		}
		md, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		var ts []gguf.Tensor
		for _, info := range span {
			x, _ := f.Tensor(info.Name)
			ts = append(ts, x)
		}
		raw, err := gguf.Marshal(md, ts)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gguf.SplitPath(filepath.Join(dir, "ksmall"), part+1, 2), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall-bf16.gguf"), Options{})
	checkClose(t, "split in two parts", ggufPromptLogits(t, be, dir, Options{}), want, 0)
}

// TestGGUFErrors checks that files govinfer cannot run say why.
func TestGGUFErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	retype := func(name string, typ gguf.GGMLType) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
		return func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			for i, x := range ts {
				if x.Name == name {
					ts[i].Type = typ
					ts[i].Data = make([]byte, typ.RowBytes(x.Dims[0])*int(x.Elements())/x.Dims[0])
				}
			}
			return ts
		}
	}
	setKey := func(key string, v any) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
		return func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			md.Set(key, v)
			return ts
		}
	}
	drop := func(name string) func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor {
		return func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			return slices.DeleteFunc(ts, func(x gguf.Tensor) bool { return x.Name == name })
		}
	}
	cases := []struct {
		name string
		edit func(*gguf.Metadata, []gguf.Tensor) []gguf.Tensor
		want string
	}{
		{"IQ4_XS", retype("blk.1.ffn_up.weight", gguf.IQ4_XS), "tensor blk.1.ffn_up.weight is IQ4_XS, a type govinfer does not compute with"},
		{"Q4_0", retype("token_embd.weight", gguf.Q4_0), "tensor token_embd.weight is Q4_0"},
		{"quantized norm", retype("output_norm.weight", gguf.Q8_0), "tensor output_norm.weight is Q8_0; the converter stores it in F32"},
		{"missing", drop("blk.2.ssm_alpha.weight"), "tensor blk.2.ssm_alpha.weight (for model.layers.2.linear_attn.in_proj_a.weight)"},
		{"architecture", setKey("general.architecture", "llama"), `not a Qwen3.5 model: the GGUF file's general.architecture is "llama"; govinfer runs "qwen35"`},
		{"key type", setKey(qwen35.KeyHeadCount, "four"), `key "qwen35.attention.head_count" is a string, want an integer`},
		{"missing key", func(md *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			kept, _ := gguf.NewMetadata(slices.DeleteFunc(md.KVs(), func(kv gguf.KV) bool { return kv.Key == qwen35.KeyInnerSize })...)
			*md = *kept
			return ts
		}, `key "qwen35.ssm.inner_size": no such key`},
		{"value length", setKey(qwen35.KeyValueLength, uint32(32)), "attention value length 32 differs from key length 64"},
		{"shape", setKey(qwen35.KeyFeedForwardLength, uint32(512)), "tensor blk.0.ffn_gate.weight has shape [768 256] (ggml dims [256 768]), the metadata implies [512 256]"},
		{"A_log", func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor {
			for i, x := range ts {
				if x.Name == "blk.0.ssm_a" {
					ts[i].Data = make([]byte, len(x.Data)) // zeros: not -exp of anything
				}
			}
			return ts
		}, "tensor blk.0.ssm_a: entry 0 is 0, which is not -exp of a finite A_log"},
		{"vocabulary only", func(_ *gguf.Metadata, ts []gguf.Tensor) []gguf.Tensor { return nil }, "holds no model weights"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := editGGUF(t, "ksmall-bf16.gguf", c.edit)
			m, err := Open(path, Options{Backend: be})
			if err == nil {
				m.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if c.name == "vocabulary only" && !errors.Is(err, ErrNoWeights) {
				t.Errorf("error %v is not ErrNoWeights", err)
			}
		})
	}
}

// TestGGUFQ5K runs llama-quantize's Q5_K_M of the BF16 file (Q5_K and Q6_K
// tensors) and checks its logits against the BF16 file's within the guard
// of the engine's own q5_k_m mix (quantGuard). Measured: 0.18.
func TestGGUFQ5K(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := filepath.Join(ggufDir, "ksmall-q5_k_m.gguf")
	m, err := Open(path, Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if dt := m.w.layers[0].mlp.(*denseMLP).gateProj.DType(); dt != compute.Q5_K {
		t.Errorf("ffn_gate loaded as %v, want Q5_K", dt)
	}
	m.Close()
	want := ggufPromptLogits(t, be, filepath.Join(ggufDir, "ksmall-bf16.gguf"), Options{})
	got := ggufPromptLogits(t, be, path, Options{})
	e := relErr(got, want)
	t.Logf("Q5_K_M against BF16: rel err %.3g", e)
	if !(e <= quantGuard["q5_k_m"]) {
		t.Errorf("Q5_K_M: rel err %.3g > %g", e, quantGuard["q5_k_m"])
	}
}
