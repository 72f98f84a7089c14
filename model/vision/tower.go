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
// Every operation runs on a compute.Backend, the text model's kernels:
// the products with the weights in their stored dtype (or a quantized type,
// Options.Quant), LayerNorm, biases, GELU, the 2-D rotary embedding and
// the attention within each frame. An encoding uploads the pixel values
// (and the position embeddings, interpolated in Go from the learned grid)
// once and downloads the image's embeddings once; the activations stay in
// backend buffers in between.
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

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// Options configures Open and New.
type Options struct {
	// Backend runs the tower; it is required and stays the caller's (the
	// tower does not close it). It may be the text model's.
	Backend compute.Backend
	// ChunkRows bounds the rows of one MLP product, and so the size of
	// the MLP's intermediate activations, the widest of the tower (the
	// other layers take all of an image's rows at once). Zero means
	// DefaultChunkRows.
	ChunkRows int
	// Quant, when not quant.Keep, is the block format the tower's weight
	// matrices (the patch embedding, each block's qkv, proj, fc1 and fc2,
	// and the merger's two) are quantized to as they load, on the kernels
	// the text model's quantized matrices use. A matrix whose rows are not
	// whole blocks of Quant takes Q8_0 where they are whole blocks of 32,
	// else stays as stored; biases, norms and the position table stay as
	// stored.
	Quant quant.Type
}

// QuantFor returns the tower's Options.Quant for a text model quantized
// at load as quantize says (model.Options.Quantize): Q8_0 for any
// quantization, whatever the text model's mix, quant.Keep for none. The
// tower is small beside the text model, and Q8_0 moves its embeddings
// about as much as the text model's Q8_0 moves the logits.
func QuantFor(quantize string) quant.Type {
	if quantize == "" {
		return quant.Keep
	}
	return quant.Q8_0
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
	invFreq    []float64 // rotary inverse frequencies, head_dim/4 of them
	chunk      int       // rows per MLP product
	quant      quant.Type

	// The norms' weights and biases on the backend: norm1 and norm2 of
	// each block, then the merger's.
	norms     []normWeights
	mergeNorm normWeights

	mu     sync.Mutex // serialises encodings and guards closed
	closed bool
}

// normWeights is a LayerNorm's weight and bias on the backend.
type normWeights struct{ w, b compute.Weight }

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
	if _, ok := compute.QuantDType(o.Quant); o.Quant != quant.Keep && !ok {
		return nil, fmt.Errorf("vision: Options.Quant %v is not a block format the backends multiply by", o.Quant)
	}
	t := &Tower{cfg: cfg, be: o.Backend, chunk: chunk, quant: o.Quant}
	if err := t.load(src); err != nil {
		return nil, err
	}
	if err := t.loadVectors(); err != nil {
		return nil, err
	}
	q := cfg.HeadDim() / 4
	t.invFreq = make([]float64, q)
	for j := range t.invFreq {
		t.invFreq[j] = math.Pow(cfg.RopeTheta, -float64(2*j)/float64(2*q))
	}
	return t, nil
}

// loadVectors puts the biases and the norms' weights on the backend.
func (t *Tower) loadVectors() error {
	var err error
	norm := func(name string, w, b []float32) (normWeights, error) {
		var nw normWeights
		if nw.w, err = vector(t.be, name+".weight", w); err != nil {
			return nw, err
		}
		nw.b, err = vector(t.be, name+".bias", b)
		return nw, err
	}
	ls := []*linear{&t.patch, &t.mergeFC1, &t.mergeFC2}
	t.norms = make([]normWeights, 2*len(t.blocks))
	for i := range t.blocks {
		b := &t.blocks[i]
		ls = append(ls, &b.qkv, &b.proj, &b.fc1, &b.fc2)
		p := fmt.Sprintf("blocks.%d.", i)
		if t.norms[2*i], err = norm(p+"norm1", b.norm1W, b.norm1B); err != nil {
			return err
		}
		if t.norms[2*i+1], err = norm(p+"norm2", b.norm2W, b.norm2B); err != nil {
			return err
		}
	}
	if t.mergeNorm, err = norm("merger.norm", t.mergeNormW, t.mergeNormB); err != nil {
		return err
	}
	for _, l := range ls {
		if l.bias, err = vector(t.be, l.name+".bias", l.b); err != nil {
			return err
		}
	}
	return nil
}

// Config returns the tower's hyperparameters.
func (t *Tower) Config() *Config { return t.cfg }

// Close releases the checkpoint Open opened. The weights stay in the
// backend until it is closed.
func (t *Tower) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
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
	r, err := t.newRun(n, tokens)
	if err != nil {
		return nil, err
	}
	defer r.free()
	out, err := r.encode(ctx, pixelValues, grid, tr)
	if err != nil {
		// Whatever was recorded before the failure must not run into
		// the next user of the backend unseen.
		return nil, errors.Join(err, t.be.Sync(context.WithoutCancel(ctx)))
	}
	return out, nil
}

// run holds the backend buffers of one encoding.
type run struct {
	t         *Tower
	n, tokens int
	rows      int // rows per MLP product
	bufs      []compute.Buffer

	x    compute.Buffer // [n, D]: the residual stream
	h    compute.Buffer // [n, D]: a norm's output, a layer's output
	qkv  compute.Buffer // [n, 3D]: q, k, v; the merger's [tokens, m²D]
	attn compute.Buffer // [n, D]: attention's output, the MLP's
	mid  compute.Buffer // [rows, I]: the MLP's intermediate rows
	// With more than rows patches, the MLP's rows go through these.
	inRows, outRows compute.Buffer // [rows, D] each
	out             compute.Buffer // [tokens, OutHiddenSize]
}

// newRun allocates the buffers of an encoding of n patches.
func (t *Tower) newRun(n, tokens int) (*run, error) {
	c := t.cfg
	d, m2 := c.HiddenSize, c.SpatialMergeSize*c.SpatialMergeSize
	r := &run{t: t, n: n, tokens: tokens, rows: min(n, t.chunk)}
	for _, b := range []struct {
		dst  *compute.Buffer
		size int
	}{
		{&r.x, n * max(d, c.PatchDim())}, // first the pixel values
		{&r.h, n * d},
		{&r.qkv, max(n*3*d, tokens*m2*d)},
		{&r.attn, n * d},
		{&r.mid, r.rows * c.IntermediateSize},
		{&r.out, tokens * c.OutHiddenSize},
	} {
		if err := r.alloc(b.dst, b.size); err != nil {
			return nil, err
		}
	}
	if r.rows < n {
		if err := r.alloc(&r.inRows, r.rows*d); err != nil {
			return nil, err
		}
		if err := r.alloc(&r.outRows, r.rows*d); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// alloc allocates a buffer of size elements into dst.
func (r *run) alloc(dst *compute.Buffer, size int) error {
	b, err := r.t.be.NewBuffer(size)
	if err != nil {
		r.free()
		return fmt.Errorf("vision: %d patches: %w", r.n, err)
	}
	r.bufs = append(r.bufs, b)
	*dst = b
	return nil
}

// free releases the run's buffers.
func (r *run) free() {
	for _, b := range r.bufs {
		r.t.be.Free(b)
	}
	r.bufs = nil
}

// download returns the first size elements of b.
func (r *run) download(ctx context.Context, b compute.Buffer, size int) ([]float32, error) {
	v := make([]float32, size)
	if err := r.t.be.Download(ctx, v, b, 0); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	return v, nil
}

// encode runs the tower on the run's buffers.
func (r *run) encode(ctx context.Context, pixelValues []float32, grid [3]int, tr *Trace) ([]float32, error) {
	t, be := r.t, r.t.be
	c := t.cfg
	n := r.n
	d, m := c.HiddenSize, c.SpatialMergeSize
	heads, hd := c.NumHeads, c.HeadDim()
	eps := float32(c.LayerNormEps)
	var err error

	// Patch embedding (Conv3d with kernel = stride = one patch) plus the
	// learned positions, interpolated to the grid in Go.
	if err := be.Upload(r.x, 0, pixelValues); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	t.patch.apply(be, r.h, r.x, n)
	if tr != nil {
		if tr.PatchEmbeds, err = r.download(ctx, r.h, n*d); err != nil {
			return nil, err
		}
	}
	pos := make([]float32, n*d)
	addPosEmbed(pos, nil, t.pos, d, c.PositionSide(), grid, m)
	if tr != nil {
		tr.PosEmbeds = pos
	}
	if err := be.Upload(r.x, 0, pos); err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	be.Add(r.x, r.h, n*d)

	// The 2-D rotary table, [cos | sin] of head_dim/2 angles per patch,
	// rotates q and k (the first 2*heads heads of a qkv row) together.
	cos, sin := rotaryTable(t.invFreq, grid, m)
	half := hd / 2
	table := make([]float32, n*hd)
	for p := range n {
		copy(table[p*hd:], cos[p*half:(p+1)*half])
		copy(table[p*hd+half:], sin[p*half:(p+1)*half])
	}
	qk := compute.Heads{RowStride: 3 * d, HeadStride: hd, Count: 2 * heads, Dim: hd}
	q := compute.Heads{RowStride: 3 * d, HeadStride: hd, Count: heads, Dim: hd}
	k, v := q, q
	k.Off, v.Off = d, 2*d
	scale := float32(1 / math.Sqrt(float64(hd)))
	act := compute.GELUTanh
	if c.HiddenAct == GELU {
		act = compute.GELUErf
	}

	for i := range t.blocks {
		b := &t.blocks[i]
		n1, n2 := t.norms[2*i], t.norms[2*i+1]
		// x = x + proj(attn(rope(qkv(norm1(x)))))
		be.LayerNorm(r.h, r.x, n1.w, n1.b, n, d, eps)
		b.qkv.apply(be, r.qkv, r.h, n)
		be.Rope(r.qkv, qk, n, table, hd)
		be.SegmentAttention(r.attn, r.qkv, q, k, v, n, grid[1]*grid[2], scale)
		b.proj.apply(be, r.h, r.attn, n)
		be.Add(r.x, r.h, n*d)
		// x = x + fc2(gelu(fc1(norm2(x)))), rows at a time.
		be.LayerNorm(r.h, r.x, n2.w, n2.b, n, d, eps)
		r.mlp(b, act)
		be.Add(r.x, r.attn, n*d)
		if tr != nil {
			blk, err := r.download(ctx, r.x, n*d)
			if err != nil {
				return nil, err
			}
			tr.BlockOutputs = append(tr.BlockOutputs, blk)
		} else if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if tr != nil {
		tr.LastHidden = clone(tr.BlockOutputs[len(tr.BlockOutputs)-1])
	}

	// Merger: LayerNorm per patch, then each merge² consecutive patches as
	// one row.
	be.LayerNorm(r.h, r.x, t.mergeNorm.w, t.mergeNorm.b, n, d, eps)
	t.mergeFC1.apply(be, r.qkv, r.h, r.tokens)
	be.GELU(r.qkv, r.tokens*t.mergeFC1.out, compute.GELUErf)
	t.mergeFC2.apply(be, r.out, r.qkv, r.tokens)
	return r.download(ctx, r.out, r.tokens*c.OutHiddenSize)
}

// mlp computes attn = fc2(gelu(fc1(h))) for the run's rows, r.rows at a
// time.
func (r *run) mlp(b *block, act compute.GELUForm) {
	be, d, inter := r.t.be, r.t.cfg.HiddenSize, r.t.cfg.IntermediateSize
	if r.rows == r.n {
		b.fc1.apply(be, r.mid, r.h, r.n)
		be.GELU(r.mid, r.n*inter, act)
		b.fc2.apply(be, r.attn, r.mid, r.n)
		return
	}
	for r0 := 0; r0 < r.n; r0 += r.rows {
		rows := min(r.rows, r.n-r0)
		be.Copy(r.inRows, 0, r.h, r0*d, rows*d)
		b.fc1.apply(be, r.mid, r.inRows, rows)
		be.GELU(r.mid, rows*inter, act)
		b.fc2.apply(be, r.outRows, r.mid, rows)
		be.Copy(r.attn, r0*d, r.outRows, 0, rows*d)
	}
}

// clone returns a copy of v.
func clone(v []float32) []float32 { return append([]float32(nil), v...) }
