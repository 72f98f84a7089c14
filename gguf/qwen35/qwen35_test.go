package qwen35

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// TestHeadOrders checks the two value-head orders on the 9B's heads.
func TestHeadOrders(t *testing.T) {
	h := Heads{Nk: 16, Nv: 32, Dk: 128, Dv: 128}
	// HF head 2k + r (key head k) is GGUF head r·16 + k.
	for k := range 16 {
		for r := range 2 {
			if got := h.Tiled(2*k + r); got != r*16+k {
				t.Fatalf("Tiled(%d) = %d, want %d", 2*k+r, got, r*16+k)
			}
		}
	}
	for g := range h.Nv {
		if h.Grouped(h.Tiled(g)) != g {
			t.Fatalf("Grouped(Tiled(%d)) = %d", g, h.Grouped(h.Tiled(g)))
		}
		// The key head each value head reads, in each order.
		if g/2 != h.Tiled(g)%h.Nk {
			t.Fatalf("value head %d reads key head %d in HF, %d in GGUF", g, g/2, h.Tiled(g)%h.Nk)
		}
	}
	rows := 2*16*128 + 32*128
	for i := range rows {
		if j := QKVRows.Source(h, rows, i, true); QKVRows.Source(h, rows, j, false) != i {
			t.Fatalf("QKVRows: row %d -> %d does not come back", i, j)
		}
		if i < 2*16*128 && QKVRows.Source(h, rows, i, true) != i {
			t.Fatalf("QKVRows moved q/k row %d", i)
		}
	}
}

// TestLlamaCppConverter converts the Hugging Face checkpoint of
// testdata/gguf with this package's table and compares every tensor with
// the BF16 file llama.cpp's own converter wrote from it: the same names,
// shapes and values (bit for bit, -exp within an ulp), and no tensor left
// over on either side.
func TestLlamaCppConverter(t *testing.T) {
	for _, c := range []struct {
		name string
		h    Heads // the checkpoint's config.json
	}{{"ksmall", Heads{Nk: 2, Nv: 4, Dk: 64, Dv: 64}}, {"kmoe", Heads{Nk: 2, Nv: 4, Dk: 64, Dv: 64}}} {
		t.Run(c.name, func(t *testing.T) { checkConverter(t, c.name, c.h) })
	}
	for _, bad := range []string{"mtp.fc.weight", "model.visual.blocks.0.attn.qkv.weight", "model.layers.x.mlp.up_proj.weight",
		"model.layers.01.mlp.up_proj.weight", "model.layers.0.mlp.nope", "model.rotary_emb.inv_freq",
		"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.0.gate_proj.weight"} {
		if m, ok := Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v", bad, m)
		}
	}
	if m, ok := Lookup("model.layers.12.linear_attn.A_log"); !ok || m.Name != "blk.12.ssm_a" {
		t.Errorf("text-only prefix: %+v %v", m, ok)
	}
}

// checkConverter compares the checkpoint testdata/gguf/name with the BF16
// file llama.cpp converted from it. A MoE checkpoint's fused
// experts.gate_up_proj [E, 2F, H] is compared as the two stacked tensors
// it is split into, gate_proj (rows 0..F-1 of each expert) and up_proj.
func checkConverter(t *testing.T, name string, h Heads) {
	dir := filepath.Join("..", "..", "testdata", "gguf")
	ck, err := safetensors.OpenCheckpoint(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	f, err := gguf.Open(filepath.Join(dir, name+"-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	for _, name := range ck.Names() {
		src, _ := ck.Tensor(name)
		if p, ok := strings.CutSuffix(name, "mlp.experts.gate_up_proj"); ok {
			e, rows, cols := src.Shape[0], src.Shape[1], src.Shape[2]
			half := len(src.Data) / e / 2
			for i, part := range []string{"gate_proj", "up_proj"} {
				var data []byte
				for x := range e {
					data = append(data, src.Data[(2*x+i)*half:(2*x+i+1)*half]...)
				}
				sub := safetensors.Tensor{Name: p + "mlp.experts." + part, DType: src.DType, Shape: []int{e, rows / 2, cols}, Data: data}
				compareConverted(t, f, sub, h, seen)
			}
			continue
		}
		compareConverted(t, f, src, h, seen)
	}
	for _, ti := range f.Tensors() {
		if !seen[ti.Name] {
			t.Errorf("llama.cpp's %s comes from no HF tensor", ti.Name)
		}
	}
}

// compareConverted checks the file's tensor for the HF tensor src against
// src converted with the table, and marks it seen.
func compareConverted(t *testing.T, f *gguf.File, src safetensors.Tensor, h Heads, seen map[string]bool) {
	t.Helper()
	name := src.Name
	m, ok := Lookup(name)
	if !ok {
		t.Errorf("%s has no GGUF name", name)
		return
	}
	seen[m.Name] = true
	dst, err := f.Tensor(m.Name)
	if err != nil {
		t.Errorf("%s -> %s: %v", name, m.Name, err)
		return
	}
	shape := src.Shape
	if m.Squeeze {
		shape = slices.DeleteFunc(slices.Clone(shape), func(d int) bool { return d == 1 })
	}
	for len(shape) > 1 && shape[0] == 1 { // ggml's trailing 1s: the shared expert gate
		shape = shape[1:]
	}
	if !slices.Equal(dst.Shape(), shape) {
		t.Errorf("%s: GGUF shape %v, HF %v", m.Name, dst.Shape(), src.Shape)
		return
	}
	if (dst.Type == gguf.F32) != m.F32 {
		t.Errorf("%s is %v in llama.cpp's file, table says F32 %v", m.Name, dst.Type, m.F32)
	}
	rows, cols := 1, shape[len(shape)-1]
	for _, d := range shape[:len(shape)-1] {
		rows *= d
	}
	if len(shape) == 1 { // vectors reorder their entries as rows of one
		rows, cols = cols, 1
	}
	want := widen(t, src.Data, string(src.DType))
	got := widen(t, dst.Data, dst.Type.String())
	for i := range rows {
		for j := range cols {
			si, sj := i, j
			if m.Transform == HeadCols {
				sj = m.Transform.Source(h, cols, j, true)
			} else {
				si = m.Transform.Source(h, rows, i, true)
			}
			w := m.Transform.ToGGUF(want[si*cols+sj])
			g := got[i*cols+j]
			if ulps := math.Abs(float64(int32(math.Float32bits(w)) - int32(math.Float32bits(g)))); ulps > 0 && !(m.Transform == NegExp && ulps <= 1) {
				t.Fatalf("%s [%d, %d] = %g, converting %s gives %g", m.Name, i, j, g, name, w)
			}
			if m.Transform != NegExp && m.Transform.FromGGUF(g) != want[si*cols+sj] {
				t.Fatalf("%s [%d, %d]: FromGGUF(%g) = %g, want %g", m.Name, i, j, g, m.Transform.FromGGUF(g), want[si*cols+sj])
			}
		}
	}
}

func widen(t *testing.T, data []byte, dtype string) []float32 {
	t.Helper()
	switch dtype {
	case "BF16":
		out := make([]float32, len(data)/2)
		half.DecodeBF16(out, data)
		return out
	case "F32":
		out := make([]float32, len(data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return out
	}
	t.Fatalf("dtype %s", dtype)
	return nil
}

// TestLookupMTP checks the MTP head's names in a file of 32 text layers:
// llama.cpp's nextn block 32.
func TestLookupMTP(t *testing.T) {
	for name, want := range map[string]Tensor{
		"mtp.fc.weight":                                 {Name: "blk.32.nextn.eh_proj.weight"},
		"mtp.pre_fc_norm_embedding.weight":              {Name: "blk.32.nextn.enorm.weight", Transform: NormPlusOne, F32: true},
		"mtp.pre_fc_norm_hidden.weight":                 {Name: "blk.32.nextn.hnorm.weight", Transform: NormPlusOne, F32: true},
		"mtp.norm.weight":                               {Name: "blk.32.nextn.shared_head_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.self_attn.q_proj.weight":          {Name: "blk.32.attn_q.weight"},
		"mtp.layers.0.self_attn.k_norm.weight":          {Name: "blk.32.attn_k_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.input_layernorm.weight":           {Name: "blk.32.attn_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.mlp.down_proj.weight":             {Name: "blk.32.ffn_down.weight"},
		"mtp.layers.1.post_attention_layernorm.weight":  {Name: "blk.33.post_attention_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.mlp.gate.weight":                  {Name: "blk.32.ffn_gate_inp.weight", F32: true},
		"mtp.layers.0.mlp.shared_expert_gate.weight":    {Name: "blk.32.ffn_gate_inp_shexp.weight", F32: true},
		"mtp.layers.0.mlp.shared_expert.up_proj.weight": {Name: "blk.32.ffn_up_shexp.weight"},
		"mtp.layers.0.mlp.experts.gate_proj":            {Name: "blk.32.ffn_gate_exps.weight"},
		"mtp.layers.0.mlp.experts.down_proj":            {Name: "blk.32.ffn_down_exps.weight"},
	} {
		if got, ok := LookupMTP(name, 32); !ok || got != want {
			t.Errorf("%s: %+v %v, want %+v", name, got, ok, want)
		}
	}
	for _, name := range []string{"mtp.fc", "model.layers.0.mlp.down_proj.weight", "mtp.layers.x.mlp.down_proj.weight", "mtp.layers.0.bogus.weight", "mtp.layers.01.mlp.up_proj.weight"} {
		if got, ok := LookupMTP(name, 32); ok {
			t.Errorf("%s: %+v, want no name", name, got)
		}
	}
}

// TestArchKey checks the keys of a qwen35moe file.
func TestArchKey(t *testing.T) {
	for key, want := range map[string]string{
		KeyBlockCount:                    "qwen35moe.block_count",
		KeyHeadCountKV:                   "qwen35moe.attention.head_count_kv",
		KeyExpertCount:                   "qwen35moe.expert_count",
		KeyExpertSharedFeedForwardLength: "qwen35moe.expert_shared_feed_forward_length",
		"general.name":                   "general.name",
	} {
		if got := ArchKey(ArchMoE, key); got != want {
			t.Errorf("ArchKey(%q, %q) = %q, want %q", ArchMoE, key, got, want)
		}
		if got := ArchKey(Arch, key); got != key {
			t.Errorf("ArchKey(%q, %q) = %q", Arch, key, got)
		}
	}
}
