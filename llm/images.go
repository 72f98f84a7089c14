package llm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/tokenizer"
)

// DefaultMaxImages is the most images one chat request may hold when
// Options.MaxImages is zero (vLLM's --limit-mm-per-prompt '{"image": N}').
const DefaultMaxImages = 8

// DefaultImageCacheBytes bounds the vision tower's outputs kept for reuse:
// an image sent again (the same decoded pixels, e.g. the next turn of a
// conversation) is not encoded again while its embeddings are among the
// most recently used that fit in this many bytes.
const DefaultImageCacheBytes = 256 << 20

// Image is an image of a chat message: an encoded PNG, JPEG, GIF or WebP
// file. The application layer never fetches URLs; the caller resolves them
// to bytes.
type Image struct {
	Data []byte
}

// imageParts are the content part types taken as images in messages given
// as JSON (MessageJSON): OpenAI chat's image_url, the Responses API's
// input_image and the template's own image.
var imageParts = map[string]bool{"image_url": true, "image": true, "input_image": true}

// vl is a model's vision side: its tower and what prompts with images need.
type vl struct {
	tower       *vision.Tower
	be          compute.Backend // the tower's own backend
	proc        imageproc.Config
	imageToken  int
	visionStart int // -1 when the config has none
	merge       int
	maxImages   int
	cache       *embedCache
}

// openVision loads the model's vision tower when it has one (its
// checkpoint's, or that of the mmproj file o.MMProj) and o.MaxImages is not
// negative; a model without one gives nil. tok is the model's tokenizer
// and hidden its text width.
func openVision(dir string, o Options, tok *tokenizer.Tokenizer, hidden int) (*vl, error) {
	if o.MaxImages < 0 {
		return nil, nil
	}
	s, err := vision.Resolve(dir, vision.ResolveOptions{MMProj: o.MMProj, TokenID: tok.TokenID, TextHidden: hidden})
	if errors.Is(err, vision.ErrNoTower) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v := &vl{proc: s.Processor.WithMaxPixels(o.MaxImagePixels), imageToken: s.ImageToken, visionStart: s.VisionStart,
		merge: s.Config.SpatialMergeSize, maxImages: DefaultMaxImages, cache: newEmbedCache(DefaultImageCacheBytes)}
	if o.MaxImages > 0 {
		v.maxImages = o.MaxImages
	}
	// The text model's backend serves one goroutine at a time (the engine
	// loop), so the tower, which encodes on the request's goroutine, gets
	// a backend of its own.
	if o.VisionBackend != nil {
		if v.be, err = o.VisionBackend(); err != nil {
			return nil, fmt.Errorf("vision tower's backend: %w", err)
		}
	} else {
		v.be = cpu.New(cpu.Options{})
	}
	if v.tower, err = s.Open(vision.Options{Backend: v.be, Quant: vision.QuantFor(o.Quantize)}); err != nil {
		v.be.Close()
		return nil, err
	}
	return v, nil
}

func (v *vl) close() error {
	if v == nil {
		return nil
	}
	return errors.Join(v.tower.Close(), v.be.Close())
}

// HasVision reports whether the model takes images: its checkpoint has a
// vision tower and Options.MaxImages did not turn it off.
func (lm *Model) HasVision() bool { return lm.vision != nil }

// MaxImages returns the most images a chat request may hold (0 without a
// vision tower).
func (lm *Model) MaxImages() int {
	if lm.vision == nil {
		return 0
	}
	return lm.vision.maxImages
}

// promptImage is one image of a chat prompt, preprocessed.
type promptImage struct {
	field string // the message part it came from, e.g. messages[1].content[0]
	img   *imageproc.Image
}

// imagePrompt is the multimodal side of a chat prompt.
type imagePrompt struct {
	images    []promptImage
	index     []int // the expanded prompt index of each image's first token
	positions [][3]int
	delta     int
	embeds    []engine.Image // set by encodeImages
}

// collectImages returns the message parts that are images, in order, as
// field names, and sets their type to "image" so that the template renders
// each as one image pad.
func collectImages(msgs []any) []string {
	var fields []string
	for i, m := range msgs {
		mo, _ := m.(*jsonvalue.Object)
		if mo == nil {
			continue
		}
		c, _ := mo.Get("content")
		parts, _ := c.([]any)
		for k, part := range parts {
			po, _ := part.(*jsonvalue.Object)
			if po == nil {
				continue
			}
			t, _ := po.Get("type")
			if s, _ := t.(string); imageParts[s] {
				fields = append(fields, fmt.Sprintf("messages[%d].content[%d]", i, k))
				po.Set("type", "image")
			}
		}
	}
	return fields
}

// prepareImages checks and preprocesses the images of a chat whose prompt
// ids hold one pad per image, and returns the expanded prompt with the
// images' placement.
func (lm *Model) prepareImages(ids []int, fields []string, data []Image) ([]int, *imagePrompt, error) {
	v := lm.vision
	if len(fields) == 0 && len(data) == 0 {
		if v != nil && countPads(ids, v.imageToken) > 0 {
			return nil, nil, paramErr("messages", "the prompt holds image pad tokens but the request has no images")
		}
		return ids, nil, nil
	}
	if v == nil {
		f := "messages"
		if len(fields) > 0 {
			f = fields[0]
		}
		return nil, nil, paramErr(f, "%s: this model does not take images (its checkpoint has no vision tower, a GGUF model was given no mmproj file, or images are turned off)", f)
	}
	if len(fields) != len(data) {
		return nil, nil, paramErr("messages", "the messages hold %d image parts but %d images were given", len(fields), len(data))
	}
	if len(data) > v.maxImages {
		return nil, nil, paramErr(fields[v.maxImages], "%s: the request holds %d images; at most %d are allowed", fields[v.maxImages], len(data), v.maxImages)
	}
	if n := countPads(ids, v.imageToken); n != len(data) {
		return nil, nil, paramErr("messages", "the rendered prompt holds %d image pads for %d images (an image in a message the chat template does not render, or image pad text in a message)", n, len(data))
	}
	ip := &imagePrompt{}
	var grids [][3]int
	for i, d := range data {
		rgb, err := imageproc.Decode(d.Data)
		var img *imageproc.Image
		if err == nil {
			img, err = v.proc.Process(rgb)
		}
		if err != nil {
			if imageproc.IsInputError(err) {
				return nil, nil, paramErr(fields[i], "%s: %v", fields[i], err)
			}
			return nil, nil, fmt.Errorf("llm: %s: %w", fields[i], err)
		}
		ip.images = append(ip.images, promptImage{field: fields[i], img: img})
		grids = append(grids, img.Grid)
	}
	out, starts, positions, delta, err := vision.ExpandPads(ids, v.imageToken, v.visionStart, grids, v.merge)
	if err != nil {
		return nil, nil, fmt.Errorf("llm: %w", err)
	}
	ip.index, ip.positions, ip.delta = starts, positions, delta
	return out, ip, nil
}

// expandPositions maps positions of the unexpanded prompt ids (one pad per
// image) to the expanded prompt.
func (ip *imagePrompt) expandPositions(ids []int, pad int, ps []int) []int {
	if ip == nil || len(ps) == 0 {
		return ps
	}
	out := make([]int, len(ps))
	shift, img, k := 0, 0, 0
	for i := 0; i <= len(ids) && k < len(ps); i++ {
		for k < len(ps) && ps[k] == i {
			out[k] = i + shift
			k++
		}
		if i < len(ids) && ids[i] == pad && img < len(ip.images) {
			shift += ip.images[img].img.Tokens - 1
			img++
		}
	}
	for ; k < len(ps); k++ {
		out[k] = ps[k] + shift
	}
	return out
}

func countPads(ids []int, pad int) int {
	n := 0
	for _, id := range ids {
		if id == pad {
			n++
		}
	}
	return n
}

// encode runs the tower on the prompt's images (or takes their embeddings
// from the cache) and returns them as the engine wants them.
func (lm *Model) encodeImages(ctx context.Context, ip *imagePrompt) ([]engine.Image, error) {
	v := lm.vision
	out := make([]engine.Image, len(ip.images))
	for i, pi := range ip.images {
		emb, ok := v.cache.get(pi.img.Hash)
		if !ok {
			var err error
			if emb, err = v.tower.Encode(ctx, pi.img.PixelValues, pi.img.Grid); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("llm: encoding %s: %w", pi.field, err)
			}
			v.cache.put(pi.img.Hash, emb)
		}
		out[i] = engine.Image{Index: ip.index[i], Embeds: emb, Hash: pi.img.Hash}
	}
	return out, nil
}

// embedCache is an LRU of image embeddings by image hash, bounded in bytes.
// The embeddings are shared, never modified.
type embedCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	order *list.List // of *embedEntry, most recent first
	byKey map[[32]byte]*list.Element
}

type embedEntry struct {
	key [32]byte
	emb []float32
}

func newEmbedCache(limit int64) *embedCache {
	return &embedCache{limit: limit, order: list.New(), byKey: map[[32]byte]*list.Element{}}
}

func (c *embedCache) get(key [32]byte) ([]float32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*embedEntry).emb, true
}

func (c *embedCache) put(key [32]byte, emb []float32) {
	n := int64(len(emb)) * 4
	if n > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	c.byKey[key] = c.order.PushFront(&embedEntry{key: key, emb: emb})
	c.size += n
	for c.size > c.limit {
		e := c.order.Back()
		ee := e.Value.(*embedEntry)
		c.order.Remove(e)
		delete(c.byKey, ee.key)
		c.size -= int64(len(ee.emb)) * 4
	}
}
