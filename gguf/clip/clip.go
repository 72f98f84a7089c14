// Package clip is the layout of llama.cpp's mmproj GGUF files
// (general.architecture "clip", general.type "mmproj") for the vision
// tower of Qwen3.5 and Qwen3-VL, projector type "qwen3vl_merger" (tag
// b10547): the metadata keys, the tensor names, and how the converter
// (convert_hf_to_gguf.py --mmproj) stores each tensor of the Hugging Face
// checkpoint. One table serves reading (package model/vision's reader) and
// writing (its writer).
//
// The converter changes the tensors little:
//
//   - patch_embed.proj.weight, a Conv3d kernel [D, C, 2, P, P], is split
//     along its temporal axis into two Conv2d kernels [D, C, P, P]:
//     v.patch_embd.weight (frame 0) and v.patch_embd.weight.1 (frame 1);
//     it refuses a temporal patch size other than 2.
//   - attn.qkv stays one fused tensor, rows q, k, v (clip.cpp's qwen3vl
//     graph reads only the fused form).
//   - Types: 1-D tensors and the position table in F32; the patch kernels
//     in F16 in an F16 file and in F32 otherwise; the other matrices in the
//     file's type (--outtype: f16, the default, bf16 or f32).
//
// The converter writes no temporal patch size (always 2), no rotary base
// (clip.cpp uses 10000), no position-table size (the tensor's rows; also
// (image_size/patch_size)²) and no preprocessor pixel bounds for this
// projector; clip.vision.attention.layer_norm_epsilon is the text model's
// rms_norm_eps (1e-6 in every Qwen3.5, as the tower's LayerNorms).
package clip

import (
	"fmt"
	"strconv"
	"strings"
)

// Values of the identifying keys.
const (
	Arch             = "clip"           // general.architecture
	FileType         = "mmproj"         // general.type
	ProjectorQwen3VL = "qwen3vl_merger" // clip.projector_type
)

// Metadata keys (clip-impl.h's KEY_*; gguf-py's Keys.Clip and
// Keys.ClipVision).
const (
	KeyProjectorType       = "clip.projector_type"
	KeyVisionProjectorType = "clip.vision.projector_type" // files with several encoders
	KeyHasVisionEncoder    = "clip.has_vision_encoder"
	KeyUseGELU             = "clip.use_gelu" // the blocks' MLP: ggml_gelu, the tanh form
	KeyUseSILU             = "clip.use_silu"
	KeyProjectionDim       = "clip.vision.projection_dim" // the text model's hidden size
	KeyImageSize           = "clip.vision.image_size"
	KeyPatchSize           = "clip.vision.patch_size"
	KeyEmbeddingLength     = "clip.vision.embedding_length"
	KeyFeedForwardLength   = "clip.vision.feed_forward_length"
	KeyBlockCount          = "clip.vision.block_count"
	KeyHeadCount           = "clip.vision.attention.head_count"
	KeyLayerNormEps        = "clip.vision.attention.layer_norm_epsilon"
	KeyImageMean           = "clip.vision.image_mean"
	KeyImageStd            = "clip.vision.image_std"
	KeySpatialMergeSize    = "clip.vision.spatial_merge_size"
	KeyIsDeepstackLayers   = "clip.vision.is_deepstack_layers"
	// The preprocessor's pixel bounds: llama.cpp's keys, which its
	// converter writes for other projectors and clip.cpp ignores for this
	// one (it bounds images to 8..4096 tokens itself).
	KeyImageMinPixels = "clip.vision.image_min_pixels"
	KeyImageMaxPixels = "clip.vision.image_max_pixels"
)

// General keys the writer sets.
const (
	KeyArchitecture        = "general.architecture"
	KeyType                = "general.type"
	KeyName                = "general.name"
	KeyFileType            = "general.file_type"
	KeyQuantizationVersion = "general.quantization_version"
)

// general.file_type values (llama.cpp's LlamaFileType).
const (
	FileTypeF32  = 0
	FileTypeF16  = 1
	FileTypeBF16 = 32
)

// The patch embedding's tensors: frame 0's kernel, frame 1's, the bias.
const (
	PatchWeight  = "v.patch_embd.weight"
	PatchWeight1 = "v.patch_embd.weight.1"
	PatchBias    = "v.patch_embd.bias"
	PositionEmbd = "v.position_embd.weight"
)

// Class says how a tensor is stored.
type Class uint8

// The classes of tensors, for their types.
const (
	Matrix   Class = iota // a weight matrix: the file's type
	Vector                // a 1-D tensor: F32
	Position              // the position table: F32
	Patch                 // a patch kernel: F16 in an F16 file, F32 otherwise
)

// Tensor says where a Hugging Face tensor of the tower goes.
type Tensor struct {
	Name  string // the GGUF name
	Class Class
}

// blockTensors map the names within visual.blocks.N. to those within
// v.blk.N.
var blockTensors = map[string]Tensor{
	"norm1.weight":          {"ln1.weight", Vector},
	"norm1.bias":            {"ln1.bias", Vector},
	"norm2.weight":          {"ln2.weight", Vector},
	"norm2.bias":            {"ln2.bias", Vector},
	"attn.qkv.weight":       {"attn_qkv.weight", Matrix},
	"attn.qkv.bias":         {"attn_qkv.bias", Vector},
	"attn.proj.weight":      {"attn_out.weight", Matrix},
	"attn.proj.bias":        {"attn_out.bias", Vector},
	"mlp.linear_fc1.weight": {"ffn_up.weight", Matrix},
	"mlp.linear_fc1.bias":   {"ffn_up.bias", Vector},
	"mlp.linear_fc2.weight": {"ffn_down.weight", Matrix},
	"mlp.linear_fc2.bias":   {"ffn_down.bias", Vector},
}

// globalTensors map the names within visual. outside the blocks (the
// patch kernel, which is split, aside).
var globalTensors = map[string]Tensor{
	"patch_embed.proj.bias":    {PatchBias, Vector},
	"pos_embed.weight":         {PositionEmbd, Position},
	"merger.norm.weight":       {"v.post_ln.weight", Vector},
	"merger.norm.bias":         {"v.post_ln.bias", Vector},
	"merger.linear_fc1.weight": {"mm.0.weight", Matrix},
	"merger.linear_fc1.bias":   {"mm.0.bias", Vector},
	"merger.linear_fc2.weight": {"mm.2.weight", Matrix},
	"merger.linear_fc2.bias":   {"mm.2.bias", Vector},
}

// PatchKernel is the Hugging Face name (within visual.) of the Conv3d
// kernel the converter splits into PatchWeight and PatchWeight1.
const PatchKernel = "patch_embed.proj.weight"

// Lookup returns where the tower tensor name goes, name being relative to
// the tower ("blocks.0.attn.qkv.weight", without model.visual.). The patch
// kernel (PatchKernel), which the converter splits, and unknown names give
// false.
func Lookup(name string) (Tensor, bool) {
	if t, ok := globalTensors[name]; ok {
		return t, true
	}
	rest, ok := strings.CutPrefix(name, "blocks.")
	if !ok {
		return Tensor{}, false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return Tensor{}, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return Tensor{}, false
	}
	t, ok := blockTensors[rest]
	if !ok {
		return Tensor{}, false
	}
	t.Name = fmt.Sprintf("v.blk.%d.%s", n, t.Name)
	return t, true
}
