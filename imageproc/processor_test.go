package imageproc

import (
	"math/rand/v2"
	"testing"
)

// TestPatchOrder checks the layout against the processor's definition
// index by index: element [gt, tp, C, hb, mh, py, wb, mw, px] of the
// reshaped frames goes to row ((gt*GH/m + hb)*GW/m + wb)*m*m + mh*m + mw,
// column ((C*tp + t)*ps + py)*ps + px.
func TestPatchOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for _, c := range []Config{
		{PatchSize: 8, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 1, MaxPixels: 1 << 20,
			Mean: [3]float64{0.48, 0.45, 0.40}, Std: [3]float64{0.26, 0.26, 0.27}},
		{PatchSize: 4, MergeSize: 3, TemporalPatchSize: 1, MinPixels: 1, MaxPixels: 1 << 20,
			Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}},
		{PatchSize: 2, MergeSize: 1, TemporalPatchSize: 3, MinPixels: 1, MaxPixels: 1 << 20,
			Mean: [3]float64{0, 0, 0}, Std: [3]float64{1, 1, 1}},
	} {
		f := c.Factor()
		img := randomRGB(r, 4*f, 3*f)
		for i := range img.Pix {
			img.Pix[i] = byte(r.IntN(256))
		}
		out, err := c.Process(img)
		if err != nil {
			t.Fatal(err)
		}
		ps, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
		gh, gw := img.Height/ps, img.Width/ps
		if out.Grid != [3]int{1, gh, gw} || out.Tokens != gh*gw/(m*m) {
			t.Fatalf("grid %v tokens %d", out.Grid, out.Tokens)
		}
		cols := 3 * tp * ps * ps
		for hb := range gh / m {
			for mh := range m {
				for py := range ps {
					for wb := range gw / m {
						for mw := range m {
							for px := range ps {
								y, x := (hb*m+mh)*ps+py, (wb*m+mw)*ps+px
								row := (hb*(gw/m)+wb)*m*m + mh*m + mw
								for ch := range 3 {
									v := float32((float64(img.Pix[(y*img.Width+x)*3+ch])/255 - c.Mean[ch]) / c.Std[ch])
									for tt := range tp {
										col := ((ch*tp+tt)*ps+py)*ps + px
										if got := out.PixelValues[row*cols+col]; got != v {
											t.Fatalf("config %+v: [%d, %d] = %v, want %v", c, row, col, got, v)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
		"merge_size": 2, "temporal_patch_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
		"image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "rescale_factor": 0.00392156862745098}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.MinPixels != 3136 || c.MaxPixels != 12845056 || c.PatchSize != 14 || c.Mean[0] != 0.48145466 {
		t.Fatalf("older Qwen2-VL keys: %+v", c)
	}
	if c, err := ParseConfig([]byte(`{}`)); err != nil || c != DefaultConfig() {
		t.Fatalf("empty config: %+v, %v", c, err)
	}
	for _, bad := range []string{`{"resample": 2}`, `{"image_mean": [1, 2]}`, `{"patch_size": 0}`,
		`{"size": {"shortest_edge": 10, "longest_edge": 5}}`, `{"do_normalize": false}`, `[`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) succeeded", bad)
		}
	}
	if _, err := LoadConfig(t.TempDir()); err == nil {
		t.Error("LoadConfig of an empty directory succeeded")
	}
}

func TestHashRGB(t *testing.T) {
	a := RGB{Width: 2, Height: 3, Pix: make([]byte, 18)}
	b := RGB{Width: 3, Height: 2, Pix: make([]byte, 18)}
	if HashRGB(a) == HashRGB(b) {
		t.Fatal("same bytes, different shapes, same hash")
	}
	c := a.clone()
	c.Pix[17] = 1
	if HashRGB(a) == HashRGB(c) {
		t.Fatal("different pixels, same hash")
	}
}

// BenchmarkProcess1024 processes a 1024x1024 image with Qwen3.5's config
// (a size that needs no resize: patchify and normalization only) and with
// MaxPixels lowered to 512*512 (a bicubic downscale to 512x512).
func BenchmarkProcess1024(b *testing.B) {
	img := randomRGB(rand.New(rand.NewPCG(14, 15)), 1024, 1024)
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"qwen35", DefaultConfig()},
		{"lowered", DefaultConfig().WithMaxPixels(512 * 512)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.cfg.Process(img); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
