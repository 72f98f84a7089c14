package imageproc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

const goldenDir = "../testdata/models/vl-tiny"

type goldenTensor struct {
	Tensor string `json:"tensor"`
	Shape  []int  `json:"shape"`
	DType  string `json:"dtype"`
}

type goldenImage struct {
	File             string       `json:"file"`
	Mode             string       `json:"mode"`
	SizeHW           [2]int       `json:"size_hw"`
	RGBSHA256        string       `json:"rgb_sha256"`
	ResizedHW        [2]int       `json:"resized_hw"`
	ResizeIsIdentity bool         `json:"resize_is_identity"`
	GridTHW          [3]int       `json:"grid_thw"`
	NPatches         int          `json:"n_patches"`
	NTokens          int          `json:"n_tokens"`
	ResizedRGB       goldenTensor `json:"resized_rgb"`
	PixelValues      goldenTensor `json:"pixel_values"`
}

// loadGoldens returns the golden images and the tensor file.
func loadGoldens(t *testing.T) (map[string]goldenImage, *safetensors.File) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenDir, "golden.json"))
	if err != nil {
		t.Skipf("goldens not available: %v", err)
	}
	var g struct {
		Images map[string]goldenImage `json:"images"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Images) == 0 {
		t.Fatal("golden.json has no images")
	}
	f, err := safetensors.Open(filepath.Join(goldenDir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return g.Images, f
}

func TestLoadConfigVLTiny(t *testing.T) {
	c, err := LoadConfig(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{PatchSize: 8, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 1024, MaxPixels: 16384,
		Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}}
	if c != want {
		t.Fatalf("LoadConfig = %+v, want %+v", c, want)
	}
}

func TestGoldenImages(t *testing.T) {
	images, f := loadGoldens(t)
	cfg, err := LoadConfig(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range images {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, g.File))
			if err != nil {
				t.Fatal(err)
			}
			img, err := Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			if img.Height != g.SizeHW[0] || img.Width != g.SizeHW[1] {
				t.Fatalf("decoded %dx%d, want HxW %v", img.Width, img.Height, g.SizeHW)
			}
			sum := sha256.Sum256(img.Pix)
			if got := hex.EncodeToString(sum[:]); got != g.RGBSHA256 {
				t.Fatalf("rgb sha256 %s, want %s", got, g.RGBSHA256)
			}

			rh, rw, err := cfg.SmartResize(img.Height, img.Width)
			if err != nil {
				t.Fatal(err)
			}
			if [2]int{rh, rw} != g.ResizedHW {
				t.Fatalf("SmartResize = %dx%d (HxW), want %v", rh, rw, g.ResizedHW)
			}
			if identity := rh == img.Height && rw == img.Width; identity != g.ResizeIsIdentity {
				t.Errorf("identity %v, golden %v", identity, g.ResizeIsIdentity)
			}

			wantRGB, ok := f.Tensor(g.ResizedRGB.Tensor)
			if !ok || wantRGB.DType != safetensors.U8 || len(wantRGB.Data) != rh*rw*3 {
				t.Fatalf("golden tensor %s missing or malformed", g.ResizedRGB.Tensor)
			}
			resized := ResizeBicubic(img, rw, rh)
			if diff := countDiff(resized.Pix, wantRGB.Data); diff != 0 {
				t.Fatalf("ResizeBicubic differs from PIL in %d of %d bytes", diff, len(wantRGB.Data))
			}

			out, err := cfg.Process(img)
			if err != nil {
				t.Fatal(err)
			}
			if out.Grid != g.GridTHW || out.Tokens != g.NTokens || out.Patches() != g.NPatches {
				t.Fatalf("grid %v tokens %d patches %d, want %v %d %d",
					out.Grid, out.Tokens, out.Patches(), g.GridTHW, g.NTokens, g.NPatches)
			}
			if out.Height != rh || out.Width != rw {
				t.Errorf("Process size %dx%d, want %dx%d", out.Width, out.Height, rw, rh)
			}
			wantPV, ok := f.Tensor(g.PixelValues.Tensor)
			if !ok {
				t.Fatalf("golden tensor %s missing", g.PixelValues.Tensor)
			}
			pv, err := wantPV.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if len(wantPV.Shape) != 2 || wantPV.Shape[0] != g.NPatches || len(pv) != len(out.PixelValues) {
				t.Fatalf("pixel_values shape %v (%d values), ours %d", wantPV.Shape, len(pv), len(out.PixelValues))
			}
			maxDiff := 0.0
			for i, v := range pv {
				maxDiff = max(maxDiff, math.Abs(float64(v)-float64(out.PixelValues[i])))
			}
			if maxDiff > 1e-6 {
				t.Fatalf("pixel_values max abs diff %g > 1e-6", maxDiff)
			}
			if out.Hash != HashRGB(img) {
				t.Error("Hash is not HashRGB of the decoded image")
			}
		})
	}
}

// countDiff returns the number of positions where a and b differ (plus the
// length difference).
func countDiff(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
