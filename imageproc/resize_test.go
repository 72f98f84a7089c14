package imageproc

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestSmartResize(t *testing.T) {
	tiny := Config{PatchSize: 8, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 1024, MaxPixels: 16384,
		Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}}
	// Expected values from HF's smart_resize run in Python 3.
	cases := []struct{ h, w, wantH, wantW int }{
		{40, 40, 32, 32},       // 2.5 -> 2: half to even
		{24, 56, 32, 64},       // 1.5 -> 2, 3.5 -> 4
		{40, 72, 32, 64},       // 4.5 -> 4
		{48, 64, 48, 64},       // already multiples
		{23, 37, 32, 48},       // plain rounding
		{1000, 1000, 128, 128}, // max bound
		{220, 300, 96, 144},    // max bound
		{4096, 3072, 144, 96},
		{10, 10, 32, 32}, // min bound
		{3, 3, 32, 32},
		{100, 7, 128, 16},
		{1, 200, 16, 464}, // aspect 200 is allowed
		{200, 1, 464, 16},
		{20, 4000, 16, 1808}, // floor reaches 0: clamped to factor
	}
	for _, c := range cases {
		h, w, err := tiny.SmartResize(c.h, c.w)
		if err != nil || h != c.wantH || w != c.wantW {
			t.Errorf("SmartResize(%d, %d) = %d, %d, %v; want %d, %d", c.h, c.w, h, w, err, c.wantH, c.wantW)
		}
	}
	qwen := DefaultConfig()
	for _, c := range []struct{ h, w, wantH, wantW int }{
		{1024, 1024, 1024, 1024}, {1080, 1920, 1088, 1920}, {4000, 6000, 3328, 4992},
		{100, 100, 256, 256}, {7, 1000, 32, 3072}, {5, 1000, 32, 3648},
	} {
		h, w, err := qwen.SmartResize(c.h, c.w)
		if err != nil || h != c.wantH || w != c.wantW {
			t.Errorf("default SmartResize(%d, %d) = %d, %d, %v; want %d, %d", c.h, c.w, h, w, err, c.wantH, c.wantW)
		}
	}
	for _, hw := range [][2]int{{1, 201}, {201, 1}, {20, 4001}} {
		if _, _, err := tiny.SmartResize(hw[0], hw[1]); !errors.Is(err, ErrAspectRatio) || !IsInputError(err) {
			t.Errorf("SmartResize(%d, %d) error %v, want ErrAspectRatio", hw[0], hw[1], err)
		}
	}
	if _, _, err := tiny.SmartResize(0, 5); err == nil {
		t.Error("SmartResize(0, 5) succeeded")
	}
	// Every result is a multiple of the factor and obeys the upper bound,
	// except where HF's clamp of a side to one factor exceeds it.
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		h, w := 1+r.IntN(3000), 1+r.IntN(3000)
		if float64(max(h, w))/float64(min(h, w)) > 200 {
			continue
		}
		rh, rw, err := tiny.SmartResize(h, w)
		if err != nil || rh%16 != 0 || rw%16 != 0 || (rh*rw > tiny.MaxPixels && min(rh, rw) != 16) || rh < 16 || rw < 16 {
			t.Fatalf("SmartResize(%d, %d) = %d, %d, %v", h, w, rh, rw, err)
		}
	}
}

func TestWithMaxPixels(t *testing.T) {
	c := DefaultConfig().WithMaxPixels(32 * 32 * 4)
	if c.MaxPixels != 4096 || c.MinPixels != 4096 {
		t.Fatalf("WithMaxPixels: %+v", c)
	}
	if d := DefaultConfig().WithMaxPixels(0); d != DefaultConfig() {
		t.Fatal("WithMaxPixels(0) changed the config")
	}
	if d := DefaultConfig().WithMaxPixels(1 << 30); d != DefaultConfig() {
		t.Fatal("WithMaxPixels raised the bound")
	}
	h, w, err := c.SmartResize(1000, 1000)
	if err != nil || h*w > 4096 {
		t.Fatalf("lowered bound: %d x %d, %v", h, w, err)
	}
}

// refResize is a plain transcription of Pillow's ImagingResample for 8-bit
// images with BICUBIC: coefficients computed per output position straight
// from precompute_coeffs and normalize_coeffs_8bpc, a full horizontal pass
// into a uint8 image, then a vertical pass, each sum in int64.
func refResize(src RGB, w, h int) RGB {
	coeffs := func(inSize, outSize, i int) (int, []int64) {
		scale := float64(inSize) / float64(outSize)
		fs := scale
		if fs < 1 {
			fs = 1
		}
		support := 2 * fs
		center := (float64(i) + 0.5) * scale
		lo := int(center - support + 0.5)
		if lo < 0 {
			lo = 0
		}
		hi := int(center + support + 0.5)
		if hi > inSize {
			hi = inSize
		}
		ws := make([]float64, hi-lo)
		total := 0.0
		for j := range ws {
			x := math.Abs((float64(lo+j) - center + 0.5) * (1 / fs))
			var v float64
			switch {
			case x < 1:
				a := 1.5*x - 2.5
				a = a * x
				a = a * x
				v = a + 1
			case x < 2:
				a := (x - 5) * x
				a = a + 8
				a = a * x
				a = a - 4
				v = a * -0.5
			}
			ws[j] = v
			total += v
		}
		ks := make([]int64, len(ws))
		for j, v := range ws {
			if total != 0 {
				v /= total
			}
			p := v * (1 << 22)
			if v < 0 {
				ks[j] = int64(p - 0.5)
			} else {
				ks[j] = int64(p + 0.5)
			}
		}
		return lo, ks
	}
	clip := func(s int64) byte {
		s >>= 22
		return byte(max(0, min(s, 255)))
	}
	cur := src
	if w != src.Width {
		next := NewRGB(w, src.Height)
		for y := range src.Height {
			for x := range w {
				lo, ks := coeffs(src.Width, w, x)
				for ch := range 3 {
					s := int64(1 << 21)
					for j, k := range ks {
						s += int64(src.Pix[(y*src.Width+lo+j)*3+ch]) * k
					}
					next.Pix[(y*w+x)*3+ch] = clip(s)
				}
			}
		}
		cur = next
	}
	if h != src.Height {
		next := NewRGB(cur.Width, h)
		for y := range h {
			lo, ks := coeffs(src.Height, h, y)
			for x := range cur.Width {
				for ch := range 3 {
					s := int64(1 << 21)
					for j, k := range ks {
						s += int64(cur.Pix[((lo+j)*cur.Width+x)*3+ch]) * k
					}
					next.Pix[(y*cur.Width+x)*3+ch] = clip(s)
				}
			}
		}
		cur = next
	}
	if cur.Width == src.Width && cur.Height == src.Height {
		cur = src.clone()
	}
	return cur
}

func randomRGB(r *rand.Rand, w, h int) RGB {
	img := NewRGB(w, h)
	switch r.IntN(3) {
	case 0: // noise
		for i := range img.Pix {
			img.Pix[i] = byte(r.IntN(256))
		}
	case 1: // extremes, to exercise the clamping
		for i := range img.Pix {
			img.Pix[i] = byte(255 * r.IntN(2))
		}
	default: // smooth
		for y := range h {
			for x := range w {
				for ch := range 3 {
					img.Pix[(y*w+x)*3+ch] = byte((x*7 + y*3*(ch+1)) % 256)
				}
			}
		}
	}
	return img
}

func TestResizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	dim := func() int {
		switch r.IntN(4) {
		case 0:
			return 1 + r.IntN(3)
		case 1:
			return 1 + r.IntN(20)
		default:
			return 1 + r.IntN(90)
		}
	}
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := range n {
		sw, sh, dw, dh := dim(), dim(), dim(), dim()
		if i%5 == 0 { // strong downscale
			sw, sh, dw, dh = 100+r.IntN(150), 100+r.IntN(150), 1+r.IntN(12), 1+r.IntN(12)
		}
		src := randomRGB(r, sw, sh)
		got, want := ResizeBicubic(src, dw, dh), refResize(src, dw, dh)
		if got.Width != dw || got.Height != dh {
			t.Fatalf("%dx%d -> %dx%d: got %dx%d", sw, sh, dw, dh, got.Width, got.Height)
		}
		if d := countDiff(got.Pix, want.Pix); d != 0 {
			t.Fatalf("%dx%d -> %dx%d: %d bytes differ from the reference", sw, sh, dw, dh, d)
		}
	}
}

func TestResizeProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	src := randomRGB(r, 17, 9)
	// Same size: an equal copy, not an alias.
	same := ResizeBicubic(src, 17, 9)
	if countDiff(same.Pix, src.Pix) != 0 || &same.Pix[0] == &src.Pix[0] {
		t.Fatal("identity resize is not an equal copy")
	}
	// Constant images stay constant (the coefficients sum to one).
	c := NewRGB(13, 7)
	for i := range c.Pix {
		c.Pix[i] = []byte{0, 255, 77}[i%3]
	}
	for _, s := range [][2]int{{1, 1}, {26, 14}, {5, 30}, {13, 3}, {40, 7}} {
		out := ResizeBicubic(c, s[0], s[1])
		for i, v := range out.Pix {
			if v != c.Pix[i%3] {
				t.Fatalf("constant image resized to %v: byte %d = %d", s, i, v)
			}
		}
	}
	// Mirror symmetry: resizing a mirrored image mirrors the result.
	mirror := func(m RGB) RGB {
		o := NewRGB(m.Width, m.Height)
		for y := range m.Height {
			for x := range m.Width {
				copy(o.Pix[(y*m.Width+x)*3:][:3], m.Pix[(y*m.Width+m.Width-1-x)*3:][:3])
			}
		}
		return o
	}
	for _, s := range [][2]int{{8, 9}, {34, 5}, {3, 18}} {
		a := mirror(ResizeBicubic(src, s[0], s[1]))
		b := ResizeBicubic(mirror(src), s[0], s[1])
		if d := countDiff(a.Pix, b.Pix); d != 0 {
			t.Fatalf("resize to %v not mirror-symmetric: %d bytes", s, d)
		}
	}
}

func BenchmarkResizeBicubic(b *testing.B) {
	src := randomRGB(rand.New(rand.NewPCG(7, 8)), 1000, 750)
	b.ReportAllocs()
	for b.Loop() {
		ResizeBicubic(src, 1024, 768)
	}
}
