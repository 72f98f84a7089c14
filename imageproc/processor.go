package imageproc

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Image is a processed image: the vision tower's input for one image.
type Image struct {
	// PixelValues is [Patches, 3*TemporalPatchSize*PatchSize*PatchSize],
	// row-major: one row per patch in the processor's order (the patches of
	// each MergeSize x MergeSize block consecutive, blocks row by row), each
	// row ordered (channel, frame, row, column).
	PixelValues []float32
	// Grid is (t, h, w) in patches: (1, Height/PatchSize, Width/PatchSize).
	Grid [3]int
	// Tokens is t*h*w/MergeSize^2, the number of image pads in the prompt.
	Tokens int
	// Width and Height are the resized image's size in pixels.
	Width, Height int
	// Hash is the SHA-256 of the decoded image (see HashRGB), a cache key
	// for the image; the output also depends on the Config.
	Hash [32]byte
}

// Patches returns the number of rows of PixelValues (t*h*w).
func (im *Image) Patches() int { return im.Grid[0] * im.Grid[1] * im.Grid[2] }

// HashRGB returns the SHA-256 of the width and height (8 bytes each,
// little-endian) followed by img.Pix, so that images with the same bytes but
// different shapes get different hashes.
func HashRGB(img RGB) [32]byte {
	h := sha256.New()
	var dims [16]byte
	binary.LittleEndian.PutUint64(dims[:8], uint64(img.Width))
	binary.LittleEndian.PutUint64(dims[8:], uint64(img.Height))
	h.Write(dims[:])
	h.Write(img.Pix)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Process resizes img to c.SmartResize's size with ResizeBicubic and turns it
// into the vision tower's input: each value v becomes (v/255 - mean)/std
// (computed in float64, rounded to float32), the frame is repeated
// TemporalPatchSize times, and the patches are laid out as HF's Qwen2-VL
// processor does: the [t, tp, C, h/m, m, ps, w/m, m, ps] array transposed
// to [t, h/m, w/m, m, m, C, tp, ps, ps] and flattened to
// [t*h*w, C*tp*ps*ps].
func (c Config) Process(img RGB) (*Image, error) {
	if err := img.validate(); err != nil {
		return nil, err
	}
	rh, rw, err := c.SmartResize(img.Height, img.Width)
	if err != nil {
		return nil, err
	}
	out := &Image{Width: rw, Height: rh, Hash: HashRGB(img)}
	resized := img
	if rh != img.Height || rw != img.Width {
		resized = ResizeBicubic(img, rw, rh)
	}
	out.PixelValues, out.Grid = c.patchify(resized)
	out.Tokens = out.Patches() / (c.MergeSize * c.MergeSize)
	return out, nil
}

// patchify normalizes and lays out an image whose sides are multiples of
// Factor().
func (c Config) patchify(img RGB) ([]float32, [3]int) {
	ps, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	gh, gw := img.Height/ps, img.Width/ps
	if gh*ps != img.Height || gw*ps != img.Width || gh%m != 0 || gw%m != 0 {
		panic(fmt.Sprintf("imageproc: %dx%d is not a multiple of %d", img.Width, img.Height, c.Factor()))
	}
	// All 256 possible values of each channel, normalized once.
	var lut [3][256]float32
	for ch := range 3 {
		for v := range 256 {
			lut[ch][v] = float32((float64(v)*(1.0/255) - c.Mean[ch]) / c.Std[ch])
		}
	}
	plane := ps * ps         // one channel of one frame of a patch
	rowLen := 3 * tp * plane // one patch
	pv := make([]float32, gh*gw*rowLen)
	stride := img.Width * 3
	p := 0 // patch index in output order
	for hb := range gh / m {
		for wb := range gw / m {
			for mh := range m {
				for mw := range m {
					y0, x0 := (hb*m+mh)*ps, (wb*m+mw)*ps
					row := pv[p*rowLen : (p+1)*rowLen]
					for ch := range 3 {
						dst := row[ch*tp*plane : (ch*tp+1)*plane]
						l := &lut[ch]
						for py := range ps {
							src := img.Pix[(y0+py)*stride+x0*3+ch:]
							d := dst[py*ps : (py+1)*ps]
							for px := range d {
								d[px] = l[src[px*3]]
							}
						}
						// The image is its own every frame.
						for t := 1; t < tp; t++ {
							copy(row[(ch*tp+t)*plane:(ch*tp+t+1)*plane], dst)
						}
					}
					p++
				}
			}
		}
	}
	return pv, [3]int{1, gh, gw}
}
