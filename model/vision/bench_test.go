package vision

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// randomSource returns a tower of config c with random BF16 weights (all
// tensors views of one random blob: the numbers mean nothing, the widths
// are real).
func randomSource(c *Config) memSource {
	d, m2, in := c.HiddenSize, c.SpatialMergeSize*c.SpatialMergeSize, c.IntermediateSize
	shapes := map[string][]int{
		"patch_embed.proj.weight":  {d, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize},
		"patch_embed.proj.bias":    {d},
		"pos_embed.weight":         {c.NumPositionEmbeddings, d},
		"merger.norm.weight":       {d},
		"merger.norm.bias":         {d},
		"merger.linear_fc1.weight": {m2 * d, m2 * d},
		"merger.linear_fc1.bias":   {m2 * d},
		"merger.linear_fc2.weight": {c.OutHiddenSize, m2 * d},
		"merger.linear_fc2.bias":   {c.OutHiddenSize},
	}
	for i := range c.Depth {
		p := fmt.Sprintf("blocks.%d.", i)
		for k, s := range map[string][]int{
			"norm1.weight": {d}, "norm1.bias": {d}, "norm2.weight": {d}, "norm2.bias": {d},
			"attn.qkv.weight": {3 * d, d}, "attn.qkv.bias": {3 * d},
			"attn.proj.weight": {d, d}, "attn.proj.bias": {d},
			"mlp.linear_fc1.weight": {in, d}, "mlp.linear_fc1.bias": {in},
			"mlp.linear_fc2.weight": {d, in}, "mlp.linear_fc2.bias": {d},
		} {
			shapes[p+k] = s
		}
	}
	most := 0
	for _, s := range shapes {
		n := 1
		for _, v := range s {
			n *= v
		}
		most = max(most, n)
	}
	blob := make([]byte, 2*most)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range most {
		binary.LittleEndian.PutUint16(blob[2*i:], half.F32ToBF16(float32(r.NormFloat64()*0.03)))
	}
	src := memSource{}
	for name, s := range shapes {
		n := 1
		for _, v := range s {
			n *= v
		}
		src["model.visual."+name] = safetensors.Tensor{Name: "model.visual." + name, DType: safetensors.BF16, Shape: s, Data: blob[:2*n]}
	}
	return src
}

// BenchmarkEncode9B encodes one image at the widths of Qwen3.5-9B's tower
// (depth 27, hidden 1152, 16 heads, intermediate 4304, patch 16, merge 2,
// out 4096) with random BF16 weights, on each backend: the CPU (all its
// threads; -cpu does not change them) and Vulkan (skipped without a
// device; on lavapipe it runs on the CPU too and says nothing of a GPU).
// Select one with -bench 'Encode9B/vulkan'.
func BenchmarkEncode9B(b *testing.B) {
	c := DefaultConfig()
	src := randomSource(c)
	for _, tb := range testBackends {
		if tb.name == "cpu-generic" {
			continue
		}
		b.Run(tb.name, func(b *testing.B) {
			tw, err := newTower(c, src, Options{Backend: tb.open(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer tw.Close()
			for _, side := range []int{16, 32} { // 256x256 and 512x512 pixels: 64 and 256 tokens
				grid := [3]int{1, side, side}
				pv := make([]float32, side*side*c.PatchDim())
				r := rand.New(rand.NewPCG(3, 4))
				for i := range pv {
					pv[i] = r.Float32()*2 - 1
				}
				b.Run(fmt.Sprintf("grid%dx%d", side, side), func(b *testing.B) {
					for b.Loop() {
						if _, err := tw.Encode(context.Background(), pv, grid); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*side*side/4)/b.Elapsed().Seconds(), "tokens/s")
				})
			}
		})
	}
}
