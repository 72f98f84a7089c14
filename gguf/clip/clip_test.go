package clip

import "testing"

// TestLookup maps tower names to llama.cpp's and refuses the rest (the
// split patch kernel, names of no tensor, malformed block numbers).
func TestLookup(t *testing.T) {
	for name, want := range map[string]Tensor{
		"blocks.0.attn.qkv.weight":       {"v.blk.0.attn_qkv.weight", Matrix},
		"blocks.26.mlp.linear_fc2.bias":  {"v.blk.26.ffn_down.bias", Vector},
		"blocks.3.norm2.weight":          {"v.blk.3.ln2.weight", Vector},
		"pos_embed.weight":               {PositionEmbd, Position},
		"merger.linear_fc2.weight":       {"mm.2.weight", Matrix},
		"merger.norm.bias":               {"v.post_ln.bias", Vector},
		"patch_embed.proj.bias":          {PatchBias, Vector},
		"blocks.10.attn.proj.weight":     {"v.blk.10.attn_out.weight", Matrix},
		"blocks.1.mlp.linear_fc1.weight": {"v.blk.1.ffn_up.weight", Matrix},
	} {
		if got, ok := Lookup(name); !ok || got != want {
			t.Errorf("Lookup(%q) = %+v, %v; want %+v", name, got, ok, want)
		}
	}
	for _, name := range []string{PatchKernel, "blocks.01.norm1.weight", "blocks.-1.norm1.weight", "blocks.x.norm1.weight",
		"blocks.0", "blocks.0.attn.q.weight", "merger.linear_fc3.weight", "model.visual.pos_embed.weight", ""} {
		if got, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) = %+v, want none", name, got)
		}
	}
}
