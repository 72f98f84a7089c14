package qwen35

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
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
	dir := filepath.Join("..", "..", "testdata", "gguf")
	ck, err := safetensors.OpenCheckpoint(filepath.Join(dir, "ksmall"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	f, err := gguf.Open(filepath.Join(dir, "ksmall-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := Heads{Nk: 2, Nv: 4, Dk: 64, Dv: 64} // ksmall's config.json
	seen := map[string]bool{}
	for _, name := range ck.Names() {
		m, ok := Lookup(name)
		if !ok {
			t.Errorf("%s has no GGUF name", name)
			continue
		}
		seen[m.Name] = true
		src, _ := ck.Tensor(name)
		dst, err := f.Tensor(m.Name)
		if err != nil {
			t.Errorf("%s -> %s: %v", name, m.Name, err)
			continue
		}
		shape := src.Shape
		if m.Squeeze {
			shape = slices.DeleteFunc(slices.Clone(shape), func(d int) bool { return d == 1 })
		}
		if !slices.Equal(dst.Shape(), shape) {
			t.Errorf("%s: GGUF shape %v, HF %v", m.Name, dst.Shape(), src.Shape)
			continue
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
	for _, ti := range f.Tensors() {
		if !seen[ti.Name] {
			t.Errorf("llama.cpp's %s comes from no HF tensor", ti.Name)
		}
	}
	for _, bad := range []string{"mtp.fc.weight", "model.visual.blocks.0.attn.qkv.weight", "model.layers.x.mlp.up_proj.weight",
		"model.layers.01.mlp.up_proj.weight", "model.layers.0.mlp.nope", "model.rotary_emb.inv_freq"} {
		if m, ok := Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v", bad, m)
		}
	}
	if m, ok := Lookup("model.layers.12.linear_attn.A_log"); !ok || m.Name != "blk.12.ssm_a" {
		t.Errorf("text-only prefix: %+v %v", m, ok)
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
		"mtp.fc.weight":                                {Name: "blk.32.nextn.eh_proj.weight"},
		"mtp.pre_fc_norm_embedding.weight":             {Name: "blk.32.nextn.enorm.weight", Transform: NormPlusOne, F32: true},
		"mtp.pre_fc_norm_hidden.weight":                {Name: "blk.32.nextn.hnorm.weight", Transform: NormPlusOne, F32: true},
		"mtp.norm.weight":                              {Name: "blk.32.nextn.shared_head_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.self_attn.q_proj.weight":         {Name: "blk.32.attn_q.weight"},
		"mtp.layers.0.self_attn.k_norm.weight":         {Name: "blk.32.attn_k_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.input_layernorm.weight":          {Name: "blk.32.attn_norm.weight", Transform: NormPlusOne, F32: true},
		"mtp.layers.0.mlp.down_proj.weight":            {Name: "blk.32.ffn_down.weight"},
		"mtp.layers.1.post_attention_layernorm.weight": {Name: "blk.33.post_attention_norm.weight", Transform: NormPlusOne, F32: true},
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
