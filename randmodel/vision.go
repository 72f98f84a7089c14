package randmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// VisionIDs are the special token ids a checkpoint with a vision tower
// names in config.json.
type VisionIDs struct {
	ImagePad, VideoPad, VisionStart, VisionEnd int
}

// or returns v with the non-zero ids of o put in.
func (v VisionIDs) or(o VisionIDs) VisionIDs {
	pick := func(a, b int) int {
		if b != 0 {
			return b
		}
		return a
	}
	return VisionIDs{pick(v.ImagePad, o.ImagePad), pick(v.VideoPad, o.VideoPad),
		pick(v.VisionStart, o.VisionStart), pick(v.VisionEnd, o.VisionEnd)}
}

// realIDs are Qwen3.5's own ids (its 248,320-entry vocabulary).
var realIDs = VisionIDs{ImagePad: 248056, VideoPad: 248057, VisionStart: 248053, VisionEnd: 248054}

// VisionTokens returns the vision ids of a checkpoint of shape s with a
// tower: Qwen3.5's own where the vocabulary holds them, else the ids
// vocab-31, vocab-27, vocab-28 and vocab-30 (vl-tiny's 993, 997, 994 and
// 996 for the tiny shape's 1,024), clear of the eos stand-ins at the end.
func (s Shape) VisionTokens() VisionIDs {
	if s.Vocab > realIDs.ImagePad+1 {
		return realIDs
	}
	return VisionIDs{ImagePad: s.Vocab - 28, VideoPad: s.Vocab - 27, VisionStart: s.Vocab - 31, VisionEnd: s.Vocab - 30}
}

// Tower is a vision tower's widths (Hugging Face's vision_config).
type Tower struct {
	Depth, Hidden, Heads, Intermediate int
	PatchSize, TemporalPatch, Merge    int
	PositionEmbeddings                 int
}

// Tower returns the vision tower make-random writes for shape s: Qwen3.5-9B's
// (27 blocks of width 1152, 16 heads, MLP 4304, 16-pixel patches, 2x2 merge,
// a 48x48 position grid) for the qwen3.5-9b shape, and a two-block tower of
// width 32 with 8-pixel patches (vl-tiny's widths) for the others.
func (s Shape) Tower() Tower {
	if s.Name == "qwen3.5-9b" {
		return Tower{Depth: 27, Hidden: 1152, Heads: 16, Intermediate: 4304, PatchSize: 16,
			TemporalPatch: 2, Merge: 2, PositionEmbeddings: 2304}
	}
	return Tower{Depth: 2, Hidden: 32, Heads: 2, Intermediate: 120, PatchSize: 8,
		TemporalPatch: 2, Merge: 2, PositionEmbeddings: 16}
}

// config returns the vision_config object for a text model of width out.
func (t Tower) config(out int) map[string]any {
	return map[string]any{
		"deepstack_visual_indexes": []int{}, "depth": t.Depth, "hidden_act": "gelu_pytorch_tanh",
		"hidden_size": t.Hidden, "in_channels": 3, "initializer_range": 0.02,
		"intermediate_size": t.Intermediate, "model_type": "qwen3_5", "num_heads": t.Heads,
		"num_position_embeddings": t.PositionEmbeddings, "out_hidden_size": out,
		"patch_size": t.PatchSize, "spatial_merge_size": t.Merge, "temporal_patch_size": t.TemporalPatch,
	}
}

// preprocessor returns preprocessor_config.json: Qwen3.5's (pixels between
// 64 and 16,384 merged tokens, mean and std 0.5) at the tower's patch size.
func (t Tower) preprocessor() map[string]any {
	unit := t.PatchSize * t.Merge
	return map[string]any{
		"size":                 map[string]any{"longest_edge": 16384 * unit * unit, "shortest_edge": 64 * unit * unit},
		"patch_size":           t.PatchSize,
		"temporal_patch_size":  t.TemporalPatch,
		"merge_size":           t.Merge,
		"image_mean":           []float64{0.5, 0.5, 0.5},
		"image_std":            []float64{0.5, 0.5, 0.5},
		"processor_class":      "Qwen3VLProcessor",
		"image_processor_type": "Qwen2VLImageProcessorFast",
	}
}

// tensors lists the tower's tensors (model.visual.*) for a text model of
// width out, scaled as the text model's are so activations stay healthy.
func (t Tower) tensors(out int) []tensorSpec {
	d, in, m2 := t.Hidden, t.Intermediate, t.Merge*t.Merge
	fanIn := func(n int, gain float64) func(*rand.Rand, int) float32 { return normal(0, gain/math.Sqrt(float64(n))) }
	patchIn := 3 * t.TemporalPatch * t.PatchSize * t.PatchSize
	p := "model.visual."
	ts := []tensorSpec{
		{name: p + "patch_embed.proj.weight", shape: []int{d, 3, t.TemporalPatch, t.PatchSize, t.PatchSize}, fill: fanIn(patchIn, 1)},
		{name: p + "patch_embed.proj.bias", shape: []int{d}, fill: normal(0, 0.02)},
		{name: p + "pos_embed.weight", shape: []int{t.PositionEmbeddings, d}, fill: normal(0, 0.5)},
	}
	for i := range t.Depth {
		b := fmt.Sprintf("%sblocks.%d.", p, i)
		ts = append(ts,
			tensorSpec{name: b + "norm1.weight", shape: []int{d}, fill: normal(1, 0.1)},
			tensorSpec{name: b + "norm1.bias", shape: []int{d}, fill: normal(0, 0.02)},
			tensorSpec{name: b + "norm2.weight", shape: []int{d}, fill: normal(1, 0.1)},
			tensorSpec{name: b + "norm2.bias", shape: []int{d}, fill: normal(0, 0.02)},
			tensorSpec{name: b + "attn.qkv.weight", shape: []int{3 * d, d}, fill: fanIn(d, 1)},
			tensorSpec{name: b + "attn.qkv.bias", shape: []int{3 * d}, fill: normal(0, 0.02)},
			tensorSpec{name: b + "attn.proj.weight", shape: []int{d, d}, fill: fanIn(d, 0.5)},
			tensorSpec{name: b + "attn.proj.bias", shape: []int{d}, fill: normal(0, 0.02)},
			tensorSpec{name: b + "mlp.linear_fc1.weight", shape: []int{in, d}, fill: fanIn(d, 1)},
			tensorSpec{name: b + "mlp.linear_fc1.bias", shape: []int{in}, fill: normal(0, 0.02)},
			tensorSpec{name: b + "mlp.linear_fc2.weight", shape: []int{d, in}, fill: fanIn(in, 0.5)},
			tensorSpec{name: b + "mlp.linear_fc2.bias", shape: []int{d}, fill: normal(0, 0.02)},
		)
	}
	return append(ts,
		tensorSpec{name: p + "merger.norm.weight", shape: []int{d}, fill: normal(1, 0.1)},
		tensorSpec{name: p + "merger.norm.bias", shape: []int{d}, fill: normal(0, 0.02)},
		tensorSpec{name: p + "merger.linear_fc1.weight", shape: []int{m2 * d, m2 * d}, fill: fanIn(m2*d, 1)},
		tensorSpec{name: p + "merger.linear_fc1.bias", shape: []int{m2 * d}, fill: normal(0, 0.02)},
		tensorSpec{name: p + "merger.linear_fc2.weight", shape: []int{out, m2 * d}, fill: fanIn(m2*d, 1)},
		tensorSpec{name: p + "merger.linear_fc2.bias", shape: []int{out}, fill: normal(0, 0.02)},
	)
}
