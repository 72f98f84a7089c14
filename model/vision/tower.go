// Package vision runs the vision tower of Qwen3.5 (Hugging Face's
// Qwen3_5VisionModel, Qwen3-VL's tower without deepstack): it turns the
// pixel_values of one image, [patches, C*tp*ps*ps] rows as the image
// processor lays them out, into the rows of the text model's input
// embeddings that replace the image's pad tokens.
//
// The forward pass reads like the math:
//
//	x = patch_embed(pixels) + interpolate(pos_embed, grid)   // per patch
//	x = x + attn(layernorm1(x))   // non-causal within each frame, 2-D rotary
//	x = x + fc2(gelu_tanh(fc1(layernorm2(x))))               // per block
//	y = fc2(gelu(fc1(concat merge² patches of layernorm(x)))) // the merger
//
// Patches are in merge-block order throughout (each merge x merge block of
// the patch grid contiguous, blocks row-major), so the merger's groups are
// consecutive rows and its output rows are the image's tokens in
// row-major order of the merged grid.
//
// The products with weights run on a compute.Backend, the text model's
// kernels, with the weights in their stored dtype; LayerNorm, GELU and the
// rotary embedding run in Go, and attention on package asm's float32
// kernels (the CPU backend's set when the backend is a CPU one), all on
// float32 activations in Go slices.
//
// RopeIndex computes the text model's 3-D (M-RoPE) positions of a prompt
// holding images; it does not need a tower.
package vision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/safetensors"
)

// Options configures Open and New.
type Options struct {
	// Backend runs the matrix products; it is required and stays the
	// caller's (the tower does not close it). It may be the text model's.
	Backend compute.Backend
	// ChunkRows bounds the rows multiplied per backend call (the staging
	// buffers hold ChunkRows rows). Zero means DefaultChunkRows.
	ChunkRows int
}

// Tower is a loaded vision tower. Its methods are safe for concurrent use;
// encodings are serialised.
type Tower struct {
	cfg  *Config
	be   compute.Backend
	file io.Closer // the checkpoint Open opened, or nil

	patch      linear
	pos        []float32 // [side*side, D]
	blocks     []block
	mergeNormW []float32
	mergeNormB []float32
	mergeFC1   linear
	mergeFC2   linear
	invFreq    []float64    // rotary inverse frequencies, head_dim/4 of them
	k          *asm.Kernels // the attention's kernels

	mu     sync.Mutex // serialises encodings and guards prod
	prod   *products  // nil once closed
	closed bool
}

// Open loads the vision tower of the checkpoint directory modelDir (its
// config.json's vision_config and the model.visual.* tensors). It fails if
// the checkpoint has no vision tower.
func Open(modelDir string, o Options) (*Tower, error) {
	cfg, ok, err := LoadConfig(modelDir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("vision: %s: config.json has no vision_config", modelDir)
	}
	ck, err := safetensors.OpenCheckpoint(modelDir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	t, err := New(cfg, ck, o)
	if err != nil {
		ck.Close()
		return nil, err
	}
	t.file = ck
	return t, nil
}

// New builds a tower from a config and an open checkpoint (which may be
// the text model's). The checkpoint must stay open until the tower is
// closed (the CPU backend may read weights from its memory map); Close does
// not close it.
func New(cfg *Config, ck *safetensors.Checkpoint, o Options) (*Tower, error) {
	return newTower(cfg, ck, o)
}

// newTower builds a tower from a config and the source of its tensors.
func newTower(cfg *Config, src tensorSource, o Options) (*Tower, error) {
	if o.Backend == nil {
		return nil, errors.New("vision: no backend (Options.Backend)")
	}
	if cfg == nil {
		return nil, errors.New("vision: no config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	chunk := o.ChunkRows
	if chunk <= 0 {
		chunk = DefaultChunkRows
	}
	t := &Tower{cfg: cfg, be: o.Backend}
	if kb, ok := o.Backend.(interface{ Kernels() *asm.Kernels }); ok && kb.Kernels() != nil {
		t.k = kb.Kernels() // the CPU backend's (perhaps a chosen set)
	} else {
		t.k = asm.Detect()
	}
	if err := t.load(src); err != nil {
		return nil, err
	}
	d, m2 := cfg.HiddenSize, cfg.SpatialMergeSize*cfg.SpatialMergeSize
	maxIn := max(cfg.PatchDim(), d, cfg.IntermediateSize, m2*d)
	maxOut := max(3*d, cfg.IntermediateSize, m2*d, cfg.OutHiddenSize)
	var err error
	if t.prod, err = newProducts(t.be, chunk, maxIn, maxOut); err != nil {
		return nil, err
	}
	q := cfg.HeadDim() / 4
	t.invFreq = make([]float64, q)
	for j := range t.invFreq {
		t.invFreq[j] = math.Pow(cfg.RopeTheta, -float64(2*j)/float64(2*q))
	}
	return t, nil
}

// Config returns the tower's hyperparameters.
func (t *Tower) Config() *Config { return t.cfg }

// Close releases the tower's buffers and the checkpoint Open opened. The
// weights stay in the backend until it is closed.
func (t *Tower) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.prod.free()
	t.prod = nil
	if t.file != nil {
		return t.file.Close()
	}
	return nil
}

// ErrClosed is returned by Encode after Close.
var ErrClosed = errors.New("vision: tower is closed")

// Trace holds the intermediate results of an encoding, rows in patch
// (merge-block) order, for tests and diagnostics.
type Trace struct {
	// PatchEmbeds is the patch embedding, [patches, D].
	PatchEmbeds []float32
	// PosEmbeds is the interpolated position embedding added to it,
	// [patches, D].
	PosEmbeds []float32
	// BlockOutputs is the residual stream after each block, depth rows of
	// [patches, D].
	BlockOutputs [][]float32
	// LastHidden is the last block's output, before the merger,
	// [patches, D].
	LastHidden []float32
	// Embeds is Encode's result, [tokens, OutHiddenSize].
	Embeds []float32
}

// Encode runs the tower on one image (or video) of grid (t, h, w) in
// patches: pixelValues holds t*h*w rows of Config.PatchDim values in the
// image processor's patch order. It returns t*h*w/merge² rows of
// OutHiddenSize values, the embeddings of the image's pad tokens in order.
// Several images are several calls (a call gives each image the same
// results as a batch would: attention never crosses images).
func (t *Tower) Encode(ctx context.Context, pixelValues []float32, grid [3]int) ([]float32, error) {
	return t.encode(ctx, pixelValues, grid, nil)
}

// EncodeTrace is Encode that also returns the intermediate results.
func (t *Tower) EncodeTrace(ctx context.Context, pixelValues []float32, grid [3]int) (*Trace, error) {
	tr := &Trace{}
	out, err := t.encode(ctx, pixelValues, grid, tr)
	if err != nil {
		return nil, err
	}
	tr.Embeds = out
	return tr, nil
}

// encode is Encode, filling tr when it is not nil.
func (t *Tower) encode(ctx context.Context, pixelValues []float32, grid [3]int, tr *Trace) ([]float32, error) {
	c := t.cfg
	n, tokens, err := c.CheckGrid(grid)
	if err != nil {
		return nil, err
	}
	if want := n * c.PatchDim(); len(pixelValues) != want {
		return nil, fmt.Errorf("vision: grid %v has %d patches of %d values = %d pixel values, got %d",
			grid, n, c.PatchDim(), want, len(pixelValues))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	p := t.prod
	d, m := c.HiddenSize, c.SpatialMergeSize
	heads, hd := c.NumHeads, c.HeadDim()

	// Patch embedding (Conv3d with kernel = stride = one patch) plus the
	// learned positions.
	x := make([]float32, n*d)
	if err := p.apply(ctx, &t.patch, x, pixelValues, n); err != nil {
		return nil, err
	}
	var pos []float32
	if tr != nil {
		tr.PatchEmbeds = clone(x)
		pos = make([]float32, n*d)
		tr.PosEmbeds = pos
	}
	addPosEmbed(x, pos, t.pos, d, c.PositionSide(), grid, m)
	cos, sin := rotaryTable(t.invFreq, grid, m)

	h := make([]float32, n*d)
	qkv := make([]float32, n*3*d)
	attn := make([]float32, n*d)
	rows := min(n, p.chunk)
	mid := make([]float32, rows*c.IntermediateSize)
	for i := range t.blocks {
		b := &t.blocks[i]
		// Attention.
		layerNorm(h, x, b.norm1W, b.norm1B, n, d, c.LayerNormEps)
		if err := p.apply(ctx, &b.qkv, qkv, h, n); err != nil {
			return nil, err
		}
		applyRotary(qkv, n, heads, hd, cos, sin)
		if err := attention(ctx, t.k, attn, qkv, n, grid[1]*grid[2], heads, hd); err != nil {
			return nil, err
		}
		if err := p.apply(ctx, &b.proj, h, attn, n); err != nil {
			return nil, err
		}
		add(x, h)
		// MLP, a chunk of rows at a time.
		layerNorm(h, x, b.norm2W, b.norm2B, n, d, c.LayerNormEps)
		for r0 := 0; r0 < n; r0 += rows {
			r := min(rows, n-r0)
			if err := p.apply(ctx, &b.fc1, mid, h[r0*d:], r); err != nil {
				return nil, err
			}
			if c.HiddenAct == GELU {
				geluErf(mid[:r*c.IntermediateSize])
			} else {
				geluTanh(mid[:r*c.IntermediateSize])
			}
			if err := p.apply(ctx, &b.fc2, attn[r0*d:], mid, r); err != nil {
				return nil, err
			}
		}
		add(x, attn)
		if tr != nil {
			tr.BlockOutputs = append(tr.BlockOutputs, clone(x))
		}
	}
	if tr != nil {
		tr.LastHidden = clone(x)
	}

	// Merger: LayerNorm per patch, then each merge² consecutive patches as
	// one row.
	layerNorm(h, x, t.mergeNormW, t.mergeNormB, n, d, c.LayerNormEps)
	merged := make([]float32, tokens*m*m*d)
	if err := p.apply(ctx, &t.mergeFC1, merged, h, tokens); err != nil {
		return nil, err
	}
	geluErf(merged)
	out := make([]float32, tokens*c.OutHiddenSize)
	if err := p.apply(ctx, &t.mergeFC2, out, merged, tokens); err != nil {
		return nil, err
	}
	return out, nil
}

// clone returns a copy of v.
func clone(v []float32) []float32 { return append([]float32(nil), v...) }
