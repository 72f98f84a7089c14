package imageproc

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/image/webp"
)

// gopherWebP is golang.org/x/image's testdata/gopher-doc.1bpp.lossless.webp
// (442 bytes, BSD licence): a lossless WebP, since no Go WebP encoder exists.
var gopherWebP = mustHex(strings.TrimSpace("" +
	"52494646b2010000574542505650384ca50100002f4ac018000f30fff33ffff31f7890246d7bda486ee6f10dc67d8481" +
	"25e930433b66fc8719960c279962269f604aeda16606d9d58abeaaffff153a4144ff19b86da4c8bbc738f00ac4a3af81" +
	"df314a6259f7a6a0a5482297d1b7a015301714e2d71d2c85f1c08d719106e0ecb0b80e0a5557c90a202b53b18080923c" +
	"fa524ffce28c4ff7c10237af83571807b615905b9681ada5c8f8b92341c5cb9613a56207834459a649e24555bda1d1c0" +
	"28ec28b16b8e19dc48ca7d8ebda083be183fc1ee93c1a74f04f6ea055e7c32c2e6309f3266739693c491cf837e428c8f" +
	"2fe3276a6cccbdc135ac7344afdd45f462993d551c4bdc3b3e1847dfab2e07da8f7986ffa0b93a72e4e2274c0e2b79b9" +
	"87570a8d6e8455909830aeddc5c28205d80ff4790aafd82400ed8ff0629919655d2006ad41afb5203a6deaaca8ad5c1d" +
	"cb4d71756f0991f93ac63117995410f8741d16be8e2a120ddf87575aad3ed2aafa10948279e54b1fdfa0bc64cbcaa33a" +
	"e4f438e228739535f140a8ca6c0bec857822afb2e297dc382f66ef3327268d072a5da3023ba065636f22f8538bcdb7c8" +
	"d6f12ac40868b6870000" +
	""))

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func encodePNG(t *testing.T, m image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustDecode(t *testing.T, data []byte) RGB {
	t.Helper()
	img, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func pixel(img RGB, x, y int) [3]byte {
	p := img.Pix[(y*img.Width+x)*3:]
	return [3]byte{p[0], p[1], p[2]}
}

// pngChunk returns a PNG chunk with its CRC.
func pngChunk(typ string, body []byte) []byte {
	c := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	c = append(c, typ...)
	c = append(c, body...)
	return binary.BigEndian.AppendUint32(c, crc32.ChecksumIEEE(c[4:]))
}

// insertAfterIHDR splices a chunk right after a PNG's IHDR chunk.
func insertAfterIHDR(data, chunk []byte) []byte {
	at := 8 + 8 + 13 + 4
	return append(append(append([]byte(nil), data[:at]...), chunk...), data[at:]...)
}

func TestCompositeWhite(t *testing.T) {
	// Pillow's integer alpha_composite on white equals the exactly rounded
	// (half up) value of (c*a + 255*(255-a)) / 255 for every input.
	for a := range 256 {
		for c := range 256 {
			want := (2*(c*a+255*(255-a)) + 255) / 510
			if got := compositeWhite(byte(c), byte(a)); int(got) != want {
				t.Fatalf("compositeWhite(%d, %d) = %d, want %d", c, a, got, want)
			}
		}
	}
}

func TestDecodePNGAlpha(t *testing.T) {
	m := image.NewNRGBA(image.Rect(0, 0, 4, 1))
	m.SetNRGBA(0, 0, color.NRGBA{10, 20, 30, 255})
	m.SetNRGBA(1, 0, color.NRGBA{10, 20, 30, 0})
	m.SetNRGBA(2, 0, color.NRGBA{0, 100, 200, 128})
	m.SetNRGBA(3, 0, color.NRGBA{255, 0, 0, 1})
	img := mustDecode(t, encodePNG(t, m))
	want := [][3]byte{{10, 20, 30}, {255, 255, 255}, {127, 177, 227}, {255, 254, 254}}
	for x, w := range want {
		if got := pixel(img, x, 0); got != w {
			t.Errorf("pixel %d = %v, want %v", x, got, w)
		}
	}
}

func TestDecodePNGPalettedTransparent(t *testing.T) {
	pal := color.Palette{color.NRGBA{0, 0, 0, 0}, color.NRGBA{200, 100, 50, 255}, color.NRGBA{0, 0, 255, 51}}
	m := image.NewPaletted(image.Rect(0, 0, 3, 2), pal)
	copy(m.Pix, []uint8{0, 1, 2, 2, 1, 0})
	img := mustDecode(t, encodePNG(t, m))
	white, c1, c2 := [3]byte{255, 255, 255}, [3]byte{200, 100, 50}, [3]byte{204, 204, 255}
	for i, w := range [][3]byte{white, c1, c2, c2, c1, white} {
		if got := pixel(img, i%3, i/3); got != w {
			t.Errorf("pixel %d = %v, want %v", i, got, w)
		}
	}
}

func TestDecodePNGGrey(t *testing.T) {
	m := image.NewGray(image.Rect(0, 0, 3, 1))
	copy(m.Pix, []byte{0, 77, 255})
	img := mustDecode(t, encodePNG(t, m))
	for x, v := range []byte{0, 77, 255} {
		if got := pixel(img, x, 0); got != [3]byte{v, v, v} {
			t.Errorf("pixel %d = %v", x, got)
		}
	}
	// A tRNS key on greyscale makes matching pixels transparent (white).
	data := encodePNG(t, m)
	img = mustDecode(t, insertAfterIHDR(data, pngChunk("tRNS", []byte{0, 77})))
	for x, v := range []byte{0, 255, 255} {
		if got := pixel(img, x, 0); got != [3]byte{v, v, v} {
			t.Errorf("grey+tRNS pixel %d = %v", x, got)
		}
	}
}

func TestDecodePNGRGBColorKeyIgnored(t *testing.T) {
	m := image.NewRGBA(image.Rect(0, 0, 2, 1))
	m.SetRGBA(0, 0, color.RGBA{1, 2, 3, 255})
	m.SetRGBA(1, 0, color.RGBA{9, 8, 7, 255})
	data := encodePNG(t, m)
	if data[25] != 2 {
		t.Fatalf("colour type %d, want 2", data[25])
	}
	// HF's convert_to_rgb returns mode "RGB" images as they are.
	img := mustDecode(t, insertAfterIHDR(data, pngChunk("tRNS", []byte{0, 1, 0, 2, 0, 3})))
	if pixel(img, 0, 0) != [3]byte{1, 2, 3} || pixel(img, 1, 0) != [3]byte{9, 8, 7} {
		t.Fatalf("RGB+tRNS decoded to %v", img.Pix)
	}
}

func TestDecodePNG16(t *testing.T) {
	g := image.NewGray16(image.Rect(0, 0, 5, 1))
	for x, v := range []uint16{0, 100, 255, 256, 65535} {
		g.SetGray16(x, 0, color.Gray16{v})
	}
	img := mustDecode(t, encodePNG(t, g))
	// Pillow opens 16-bit grey as mode "I" and clips it to 0..255.
	for x, v := range []byte{0, 100, 255, 255, 255} {
		if got := pixel(img, x, 0); got != [3]byte{v, v, v} {
			t.Errorf("grey16 pixel %d = %v, want %d", x, got, v)
		}
	}

	c := image.NewRGBA64(image.Rect(0, 0, 2, 1))
	c.SetRGBA64(0, 0, color.RGBA64{0x1234, 0xabff, 0x00ff, 0xffff})
	c.SetRGBA64(1, 0, color.RGBA64{0xffff, 0x0100, 0x80ff, 0xffff})
	data := encodePNG(t, c)
	if data[24] != 16 || data[25] != 2 {
		t.Fatalf("depth %d colour type %d, want 16-bit RGB", data[24], data[25])
	}
	img = mustDecode(t, data)
	if pixel(img, 0, 0) != [3]byte{0x12, 0xab, 0x00} || pixel(img, 1, 0) != [3]byte{0xff, 0x01, 0x80} {
		t.Errorf("rgb16 decoded to %v, want the high bytes", img.Pix)
	}

	n := image.NewNRGBA64(image.Rect(0, 0, 1, 1))
	n.SetNRGBA64(0, 0, color.NRGBA64{0x00ff, 0x64ff, 0xc8ff, 0x80ff})
	img = mustDecode(t, encodePNG(t, n))
	if got, want := pixel(img, 0, 0), [3]byte{127, 177, 227}; got != want {
		t.Errorf("rgba16 decoded to %v, want %v", got, want)
	}
}

// exifJPEG returns a JPEG of m with an APP1 Exif segment carrying the
// orientation, in big- or little-endian TIFF.
func exifJPEG(t *testing.T, m image.Image, orientation int, big bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	var bo binary.AppendByteOrder = binary.LittleEndian
	tiff := []byte("II*\x00")
	if big {
		bo, tiff = binary.BigEndian, []byte("MM\x00*")
	}
	tiff = bo.AppendUint32(tiff, 8)
	tiff = bo.AppendUint16(tiff, 2)
	// An unrelated tag first (ImageWidth, LONG), then Orientation (SHORT).
	tiff = bo.AppendUint16(tiff, 0x0100)
	tiff = bo.AppendUint16(tiff, 4)
	tiff = bo.AppendUint32(tiff, 1)
	tiff = bo.AppendUint32(tiff, 24)
	tiff = bo.AppendUint16(tiff, 0x0112)
	tiff = bo.AppendUint16(tiff, 3)
	tiff = bo.AppendUint32(tiff, 1)
	tiff = bo.AppendUint16(tiff, uint16(orientation))
	tiff = bo.AppendUint16(tiff, 0)
	tiff = bo.AppendUint32(tiff, 0)
	seg := append([]byte("Exif\x00\x00"), tiff...)
	app1 := append([]byte{0xff, 0xe1}, binary.BigEndian.AppendUint16(nil, uint16(len(seg)+2))...)
	app1 = append(app1, seg...)
	jpg := buf.Bytes()
	return append(append(append([]byte(nil), jpg[:2]...), app1...), jpg[2:]...)
}

// displayByTable lays a stored image out for display from the EXIF
// definition of each orientation: which visual side the stored 0th row and
// 0th column are on.
func displayByTable(s RGB, o int) RGB {
	w, h := s.Width, s.Height
	dw, dh := w, h
	if o >= 5 {
		dw, dh = h, w
	}
	d := NewRGB(dw, dh)
	for r := range h {
		for c := range w {
			var x, y int
			switch o {
			case 1: // row 0 top, column 0 left
				x, y = c, r
			case 2: // top, right
				x, y = w-1-c, r
			case 3: // bottom, right
				x, y = w-1-c, h-1-r
			case 4: // bottom, left
				x, y = c, h-1-r
			case 5: // left, top
				x, y = r, c
			case 6: // right, top
				x, y = h-1-r, c
			case 7: // right, bottom
				x, y = h-1-r, w-1-c
			case 8: // left, bottom
				x, y = r, w-1-c
			}
			copy(d.Pix[(y*dw+x)*3:][:3], s.Pix[(r*w+c)*3:][:3])
		}
	}
	return d
}

func TestDecodeJPEGOrientation(t *testing.T) {
	// 3 x 2 blocks of 8 x 8 pixels, each a distinct flat colour.
	colors := []color.RGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255},
		{255, 255, 0, 255}, {0, 255, 255, 255}, {255, 255, 255, 255}}
	m := image.NewRGBA(image.Rect(0, 0, 24, 16))
	for y := range 16 {
		for x := range 24 {
			m.SetRGBA(x, y, colors[(y/8)*3+x/8])
		}
	}
	base := mustDecode(t, exifJPEG(t, m, 1, false))
	for o := 1; o <= 8; o++ {
		img := mustDecode(t, exifJPEG(t, m, o, o%2 == 0))
		want := displayByTable(base, o)
		if img.Width != want.Width || img.Height != want.Height || countDiff(img.Pix, want.Pix) != 0 {
			t.Errorf("orientation %d: got %dx%d, not the stored image turned as EXIF defines", o, img.Width, img.Height)
		}
		// The block centres keep their colours (JPEG is lossy, flat blocks
		// are nearly exact).
		ref := RGB{Width: 24, Height: 16, Pix: make([]byte, 24*16*3)}
		for i := range 24 * 16 {
			c := colors[(i/24/8)*3+(i%24)/8]
			ref.Pix[3*i], ref.Pix[3*i+1], ref.Pix[3*i+2] = c.R, c.G, c.B
		}
		wantRef := displayByTable(ref, o)
		for y := 4; y < wantRef.Height; y += 8 {
			for x := 4; x < wantRef.Width; x += 8 {
				g, w := pixel(img, x, y), pixel(wantRef, x, y)
				for ch := range 3 {
					if d := int(g[ch]) - int(w[ch]); d > 8 || d < -8 {
						t.Fatalf("orientation %d: block at (%d, %d) = %v, want about %v", o, x, y, g, w)
					}
				}
			}
		}
	}
	// Out-of-range orientations are ignored.
	if img := mustDecode(t, exifJPEG(t, m, 9, false)); countDiff(img.Pix, base.Pix) != 0 {
		t.Error("orientation 9 changed the image")
	}
}

func TestDecodeJPEGGreyAndColour(t *testing.T) {
	g := image.NewGray(image.Rect(0, 0, 16, 16))
	for i := range g.Pix {
		g.Pix[i] = 90
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, g, nil); err != nil {
		t.Fatal(err)
	}
	img := mustDecode(t, buf.Bytes())
	if p := pixel(img, 5, 5); p[0] != p[1] || p[1] != p[2] || p[0] < 88 || p[0] > 92 {
		t.Errorf("grey JPEG pixel %v", p)
	}
	// libjpeg's YCbCr -> RGB on known samples (jdcolor.c arithmetic).
	ycc := image.NewYCbCr(image.Rect(0, 0, 3, 1), image.YCbCrSubsampleRatio444)
	copy(ycc.Y, []byte{128, 0, 255})
	copy(ycc.Cb, []byte{128, 255, 0})
	copy(ycc.Cr, []byte{128, 0, 255})
	out := toRGB(ycc)
	// Y=0 Cb=255 Cr=0: R = (91881*-128 + 32768)>>16 = -179 -> 0,
	// G = (-22554*127 + 46802*128 + 32768)>>16 = 48, B = (116130*127 + 32768)>>16
	// = 225; Y=255 Cb=0 Cr=255: R = 255+178 -> 255, G = 255 + (22554*128 -
	// 46802*127 + 32768)>>16 = 255-47 = 208, B = 255 + (-116130*128 +
	// 32768)>>16 = 255-227 = 28 (arithmetic shifts floor).
	want := []byte{128, 128, 128, 0, 48, 225, 255, 208, 28}
	for i := range want {
		if out.Pix[i] != want[i] {
			t.Fatalf("YCbCr conversion %v, want %v", out.Pix, want)
		}
	}
}

func TestWebPYUV(t *testing.T) {
	// Worked by hand from yuv.h: limited range, 16 -> black, 235 -> white.
	for _, c := range []struct{ y, u, v, r, g, b byte }{
		{16, 128, 128, 0, 0, 0}, {235, 128, 128, 255, 255, 255}, {126, 128, 128, 128, 128, 128},
	} {
		if r, g, b := webpYUVToRGB(c.y, c.u, c.v); r != c.r || g != c.g || b != c.b {
			t.Errorf("webpYUVToRGB(%d, %d, %d) = %d %d %d, want %d %d %d", c.y, c.u, c.v, r, g, b, c.r, c.g, c.b)
		}
	}
	// A lossy file from the x/image module, when its source is at hand.
	dir := filepath.Join(os.Getenv("GOMODCACHE"), "golang.org", "x", "image@v0.47.0", "testdata")
	data, err := os.ReadFile(filepath.Join(dir, "blue-purple-pink.lossy.webp"))
	if err != nil {
		t.Skipf("no lossy WebP file: %v", err)
	}
	img := mustDecode(t, data)
	if img.Width == 0 || len(img.Pix) != img.Width*img.Height*3 {
		t.Fatal("lossy WebP decoded badly")
	}
}

func TestCMYK(t *testing.T) {
	for _, c := range []struct{ in, want [4]byte }{
		{[4]byte{0, 0, 0, 0}, [4]byte{255, 255, 255}},
		{[4]byte{255, 255, 255, 255}, [4]byte{0, 0, 0}},
		{[4]byte{0, 0, 0, 255}, [4]byte{0, 0, 0}},
		{[4]byte{128, 0, 255, 0}, [4]byte{127, 255, 0}},
		{[4]byte{100, 50, 0, 100}, [4]byte{94, 125, 155}},
	} {
		r, g, b := cmykToRGB(c.in[0], c.in[1], c.in[2], c.in[3])
		if [4]byte{r, g, b} != c.want {
			t.Errorf("cmykToRGB%v = %d %d %d, want %v", c.in, r, g, b, c.want[:3])
		}
	}
	// A real Adobe CMYK JPEG from the Go distribution (the standard library
	// cannot encode CMYK).
	path := filepath.Join(runtime.GOROOT(), "src", "image", "testdata", "video-001.cmyk.jpeg")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no CMYK JPEG available: %v", err)
	}
	img := mustDecode(t, data)
	m, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := m.(*image.CMYK)
	if !ok {
		t.Fatalf("decoded as %T", m)
	}
	for i := 0; i < len(cm.Pix); i += 4 * 37 {
		r, g, b := cmykToRGB(cm.Pix[i], cm.Pix[i+1], cm.Pix[i+2], cm.Pix[i+3])
		if p := img.Pix[i/4*3:]; p[0] != r || p[1] != g || p[2] != b {
			t.Fatalf("CMYK pixel %d: %v, want %d %d %d", i/4, p[:3], r, g, b)
		}
	}
}

func TestDecodeGIF(t *testing.T) {
	pal := color.Palette{color.RGBA{10, 10, 10, 255}, color.RGBA{200, 0, 0, 255}, color.RGBA{0, 0, 0, 0}}
	f0 := image.NewPaletted(image.Rect(0, 0, 4, 3), pal)
	f1 := image.NewPaletted(image.Rect(0, 0, 4, 3), pal)
	for i := range f0.Pix {
		f0.Pix[i] = uint8(i % 3)
		f1.Pix[i] = 1
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, &gif.GIF{Image: []*image.Paletted{f0, f1}, Delay: []int{1, 1}}); err != nil {
		t.Fatal(err)
	}
	img := mustDecode(t, buf.Bytes())
	cols := [][3]byte{{10, 10, 10}, {200, 0, 0}, {255, 255, 255}}
	for i := range 12 {
		if got := pixel(img, i%4, i/4); got != cols[i%3] {
			t.Fatalf("first frame pixel %d = %v, want %v", i, got, cols[i%3])
		}
	}

	// A first frame smaller than the logical screen: the rest is the
	// transparent index (white here).
	small := image.NewPaletted(image.Rect(1, 1, 3, 2), pal)
	for i := range small.Pix {
		small.Pix[i] = 1
	}
	buf.Reset()
	g := &gif.GIF{Image: []*image.Paletted{small}, Delay: []int{0},
		Config: image.Config{ColorModel: pal, Width: 4, Height: 3}}
	if err := gif.EncodeAll(&buf, g); err != nil {
		t.Fatal(err)
	}
	img = mustDecode(t, buf.Bytes())
	if img.Width != 4 || img.Height != 3 {
		t.Fatalf("screen %dx%d, want 4x3", img.Width, img.Height)
	}
	for y := range 3 {
		for x := range 4 {
			want := cols[2]
			if y == 1 && (x == 1 || x == 2) {
				want = cols[1]
			}
			if got := pixel(img, x, y); got != want {
				t.Errorf("canvas pixel (%d, %d) = %v, want %v", x, y, got, want)
			}
		}
	}
}

func TestDecodeWebP(t *testing.T) {
	img := mustDecode(t, gopherWebP)
	m, err := webp.Decode(bytes.NewReader(gopherWebP))
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bounds()
	if img.Width != b.Dx() || img.Height != b.Dy() {
		t.Fatalf("size %dx%d, want %v", img.Width, img.Height, b)
	}
	for y := range b.Dy() {
		for x := range b.Dx() {
			c := color.NRGBAModel.Convert(m.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
			want := [3]byte{compositeWhite(c.R, c.A), compositeWhite(c.G, c.A), compositeWhite(c.B, c.A)}
			if got := pixel(img, x, y); got != want {
				t.Fatalf("pixel (%d, %d) = %v, want %v", x, y, got, want)
			}
		}
	}
}

func TestDecodeTooLarge(t *testing.T) {
	ihdr := binary.BigEndian.AppendUint32(nil, 9000)
	ihdr = binary.BigEndian.AppendUint32(ihdr, 9000)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	data := append([]byte("\x89PNG\r\n\x1a\n"), pngChunk("IHDR", ihdr)...)
	data = append(data, "this is not a valid IDAT chunk at all"...)
	_, err := Decode(data)
	if !errors.Is(err, ErrTooLarge) || !IsInputError(err) {
		t.Fatalf("9000x9000 header: %v, want ErrTooLarge", err)
	}
	// A lower caller limit applies too.
	small := encodePNG(t, image.NewGray(image.Rect(0, 0, 10, 10)))
	if _, err := DecodeLimit(small, 99); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("DecodeLimit(100 px, 99): %v", err)
	}
	if _, err := DecodeLimit(small, 100); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("hello"), []byte("BM\x00\x00"), []byte("RIFF\x00\x00\x00\x00WAVE")} {
		if _, err := Decode(data); !errors.Is(err, ErrFormat) || !IsInputError(err) {
			t.Errorf("Decode(%q) = %v, want ErrFormat", data, err)
		}
	}
	if _, err := DefaultConfig().Process(NewRGB(1000, 4)); !errors.Is(err, ErrAspectRatio) {
		t.Errorf("Process(1000x4) = %v, want ErrAspectRatio", err)
	}
	if IsInputError(ErrConfig) {
		t.Error("ErrConfig is not an input error")
	}
}

// validFiles returns small valid files of every format.
func validFiles(t *testing.T) map[string][]byte {
	r := rand.New(rand.NewPCG(9, 10))
	m := image.NewNRGBA(image.Rect(0, 0, 19, 13))
	for i := range m.Pix {
		m.Pix[i] = byte(r.IntN(256))
	}
	var j, g bytes.Buffer
	if err := jpeg.Encode(&j, m, nil); err != nil {
		t.Fatal(err)
	}
	p := image.NewPaletted(m.Rect, color.Palette{color.Black, color.White})
	if err := gif.Encode(&g, p, nil); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"png": encodePNG(t, m), "jpeg": j.Bytes(), "gif": g.Bytes(), "webp": gopherWebP}
}

func TestDecodeTruncatedAndCorrupt(t *testing.T) {
	for name, data := range validFiles(t) {
		if _, err := Decode(data); err != nil {
			t.Fatalf("%s: valid file: %v", name, err)
		}
		// Every proper prefix fails cleanly. (A JPEG missing only its EOI
		// marker, or a GIF missing only its trailer, may still decode.)
		for n := range len(data) - 2 {
			img, err := Decode(data[:n])
			if err == nil {
				if name == "jpeg" || name == "gif" {
					continue
				}
				t.Fatalf("%s truncated to %d bytes decoded to %dx%d", name, n, img.Width, img.Height)
			}
			if !IsInputError(err) {
				t.Fatalf("%s truncated to %d: error %v is not an input error", name, n, err)
			}
		}
		// Random corruption never panics.
		r := rand.New(rand.NewPCG(11, uint64(len(data))))
		for range 300 {
			c := append([]byte(nil), data...)
			for range 1 + r.IntN(4) {
				c[r.IntN(len(c))] = byte(r.IntN(256))
			}
			if img, err := Decode(c); err == nil && len(img.Pix) != img.Width*img.Height*3 {
				t.Fatalf("%s: malformed result", name)
			} else if err != nil && !IsInputError(err) {
				t.Fatalf("%s: error %v is not an input error", name, err)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(gopherWebP)
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := DecodeLimit(data, 1<<20)
		if err == nil && len(img.Pix) != img.Width*img.Height*3 {
			t.Fatal("malformed result")
		}
	})
}
