package imageproc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"

	// WebP is not in the standard library; golang.org/x/image/webp is the Go
	// team's decoder (v0.47.0: the newest release whose own requirements,
	// x/sys v0.49.0 and x/text v0.43.0, match this module's, so adding it
	// upgrades nothing else).
	"golang.org/x/image/webp"
)

// MaxDecodePixels is the largest width*height Decode accepts: 64 Mi pixels
// (67,108,864; a 8192x8192 image passes, 9000x9000 does not).
// Larger files are refused from their header, before any pixel is decoded.
const MaxDecodePixels = 64 << 20

// Format names a supported file format.
type Format string

// The supported formats.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
	GIF  Format = "gif"
	WebP Format = "webp"
)

// SniffFormat returns the format of data from its signature, or "" if it is
// none of the supported formats.
func SniffFormat(data []byte) Format {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return PNG
	case bytes.HasPrefix(data, []byte{0xff, 0xd8}):
		return JPEG
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return GIF
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return WebP
	}
	return ""
}

// Decode decodes a PNG, JPEG, GIF (first frame) or WebP file to 8-bit RGB as
// Hugging Face's processor sees it when given the file opened with Pillow
// (ImageOps.exif_transpose, then convert_to_rgb). It refuses files declaring
// more than MaxDecodePixels pixels (ErrTooLarge) before decoding them.
func Decode(data []byte) (RGB, error) {
	return DecodeLimit(data, MaxDecodePixels)
}

// DecodeLimit is Decode with a caller-chosen pixel limit (maxPixels > 0).
//
// Conversion to RGB (Pillow 9.4.0, the version of the goldens; file and
// function names below are Pillow's):
//
//   - RGB files are kept as they are; a tRNS colour key of an RGB PNG is
//     ignored, as HF's convert_to_rgb returns "RGB" images unchanged.
//   - Every other mode goes through convert("RGBA") and
//     Image.alpha_composite over opaque white, then drops alpha. On white,
//     AlphaComposite.c's integer arithmetic reduces to
//     out = SHIFTFORDIV255(128*(c*a + 255*(255-a)) + (128<<7)) >> 7 with
//     SHIFTFORDIV255(x) = ((x>>8)+x)>>8, and out = 255 where a = 0: opaque
//     pixels keep their value, greyscale is replicated to R=G=B.
//   - Greyscale, paletted and GIF transparency (tRNS, transparent index) give
//     alpha 0 (Image.convert's convert_transparent / putpalettealphas).
//   - 16-bit PNG: greyscale opens as mode "I" (PngImagePlugin _MODES
//     (16, 0): "I;16B") and "I" -> RGB(A) CLIPS to 0..255 (Convert.c i2rgb),
//     so values above 255 become 255; RGB, RGBA and grey+alpha keep the high
//     byte of each sample (rawmodes "RGB;16B", "RGBA;16B", "LA;16B").
//   - CMYK JPEG (always read as Adobe-inverted, "CMYK;I", as Go also does):
//     Convert.c cmyk2rgb, R = clip(nk - MULDIV255(C, nk)) with nk = 255-K.
//   - YCbCr JPEG: libjpeg's integer full-range YCbCr -> RGB (jdcolor.c) on
//     Go's decoded planes; lossy WebP: libwebp's limited-range BT.601
//     integer conversion (yuv.h VP8YuvToRgb). Neither is bit-exact with
//     Pillow: Go's IDCT differs from libjpeg-turbo's islow IDCT (and Go's VP8
//     decoder is not libwebp), and chroma is upsampled by replication, not by
//     libjpeg's or libwebp's "fancy" filters, so pixels may differ by a few
//     levels, mostly near chroma edges. Lossless WebP, PNG and GIF are exact.
//
// EXIF orientation (tag 0x0112 of IFD0 in the first APP1 "Exif" segment) is
// applied to JPEG files as ImageOps.exif_transpose does.
func DecodeLimit(data []byte, maxPixels int) (img RGB, err error) {
	format := SniffFormat(data)
	if format == "" {
		return RGB{}, fmt.Errorf("%w (not PNG, JPEG, GIF or WebP)", ErrFormat)
	}
	r := bytes.NewReader(data)
	var cfg image.Config
	switch format {
	case PNG:
		cfg, err = png.DecodeConfig(r)
	case JPEG:
		cfg, err = jpeg.DecodeConfig(r)
	case GIF:
		cfg, err = gif.DecodeConfig(r)
	case WebP:
		cfg, err = webp.DecodeConfig(r)
	}
	if err != nil {
		return RGB{}, fmt.Errorf("%w: %s header: %v", ErrCorrupt, format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return RGB{}, fmt.Errorf("%w: %s declares %dx%d", ErrCorrupt, format, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > int64(maxPixels) {
		return RGB{}, fmt.Errorf("%w: %s declares %dx%d, more than %d pixels",
			ErrTooLarge, format, cfg.Width, cfg.Height, maxPixels)
	}
	m, err := decodeImage(format, data)
	if err != nil {
		return RGB{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, format, err)
	}
	b := m.Bounds()
	if b.Dx() <= 0 || b.Dy() <= 0 || b.Dx()*b.Dy() > maxPixels {
		return RGB{}, fmt.Errorf("%w: %s decoded to %dx%d", ErrCorrupt, format, b.Dx(), b.Dy())
	}
	switch format {
	case PNG:
		img = pngToRGB(m, data[25])
	case GIF:
		img = gifToRGB(m, cfg)
	case WebP:
		img = webpToRGB(m)
	default:
		img = toRGB(m)
	}
	if format == JPEG {
		img = orient(img, jpegOrientation(data))
	}
	return img, nil
}

// decodeImage runs the format's decoder, turning a panic (a decoder bug on
// hostile input) into an error.
func decodeImage(format Format, data []byte) (m image.Image, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("decoder panic: %v", p)
		}
	}()
	r := bytes.NewReader(data)
	switch format {
	case PNG:
		return png.Decode(r)
	case JPEG:
		return jpeg.Decode(r)
	case GIF:
		return gif.Decode(r)
	default:
		return webp.Decode(r)
	}
}

// PNG colour types (IHDR byte 25 of the file, checked by png.DecodeConfig).
const (
	pngGrey      = 0
	pngTruecolor = 2
)

// pngToRGB converts a decoded PNG, using the file's colour type where Go's
// image type alone does not tell what Pillow does.
func pngToRGB(m image.Image, colorType byte) RGB {
	switch m := m.(type) {
	case *image.Gray16: // 16-bit grey: Pillow mode "I", clipped (i2rgb).
		out := newRGBFor(m)
		for i := range out.Width * out.Height {
			y, x := i/out.Width, i%out.Width
			v := min(m.Gray16At(m.Rect.Min.X+x, m.Rect.Min.Y+y).Y, 255)
			out.Pix[3*i], out.Pix[3*i+1], out.Pix[3*i+2] = byte(v), byte(v), byte(v)
		}
		return out
	case *image.NRGBA64:
		out := newRGBFor(m)
		for i := range out.Width * out.Height {
			y, x := i/out.Width, i%out.Width
			c := m.NRGBA64At(m.Rect.Min.X+x, m.Rect.Min.Y+y)
			switch colorType {
			case pngGrey: // 16-bit grey with tRNS: "I" clipped, transparent key.
				v := byte(min(c.R, 255))
				setComposite(out.Pix[3*i:], v, v, v, byte(c.A>>8))
			case pngTruecolor: // 16-bit RGB with tRNS: mode "RGB", key ignored.
				out.Pix[3*i], out.Pix[3*i+1], out.Pix[3*i+2] = byte(c.R>>8), byte(c.G>>8), byte(c.B>>8)
			default: // RGBA;16B, LA;16B: high bytes.
				setComposite(out.Pix[3*i:], byte(c.R>>8), byte(c.G>>8), byte(c.B>>8), byte(c.A>>8))
			}
		}
		return out
	case *image.NRGBA:
		if colorType == pngTruecolor { // 8-bit RGB with tRNS: key ignored.
			out := newRGBFor(m)
			for y := range out.Height {
				row := m.Pix[y*m.Stride:]
				for x := range out.Width {
					copy(out.Pix[(y*out.Width+x)*3:][:3], row[4*x:4*x+3])
				}
			}
			return out
		}
	}
	return toRGB(m)
}

// gifToRGB places the first frame on the logical screen as Pillow does: the
// area outside the frame is the transparent index when the frame has one,
// else palette index 0 (GifImagePlugin.load_prepare).
func gifToRGB(m image.Image, screen image.Config) RGB {
	p, ok := m.(*image.Paletted)
	if !ok || p.Rect == image.Rect(0, 0, screen.Width, screen.Height) || len(p.Palette) == 0 {
		return toRGB(m)
	}
	fill := uint8(0)
	for i, c := range p.Palette {
		if _, _, _, a := c.RGBA(); a == 0 {
			fill = uint8(i)
			break
		}
	}
	canvas := image.NewPaletted(image.Rect(0, 0, screen.Width, screen.Height), p.Palette)
	for i := range canvas.Pix {
		canvas.Pix[i] = fill
	}
	r := p.Rect.Intersect(canvas.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		copy(canvas.Pix[canvas.PixOffset(r.Min.X, y):canvas.PixOffset(r.Max.X, y)],
			p.Pix[p.PixOffset(r.Min.X, y):p.PixOffset(r.Max.X, y)])
	}
	return toRGB(canvas)
}

// newRGBFor allocates an RGB image of m's size.
func newRGBFor(m image.Image) RGB {
	b := m.Bounds()
	return NewRGB(b.Dx(), b.Dy())
}

// compositeWhite is Pillow's alpha_composite of (c, a) over opaque white for
// one channel (AlphaComposite.c with dst = (255, 255, 255, 255): blend =
// 255*(255-a), outa255 = 255*255, coef1 = 128*a, coef2 = 128*(255-a)).
func compositeWhite(c, a byte) byte {
	if a == 0 {
		return 255
	}
	tmp := uint32(c)*uint32(a)*128 + 255*uint32(255-a)*128 + 0x80<<7
	return byte((((tmp >> 8) + tmp) >> 8) >> 7)
}

// setComposite writes (r, g, b) composited with alpha a on white to p[:3].
func setComposite(p []byte, r, g, b, a byte) {
	p[0], p[1], p[2] = compositeWhite(r, a), compositeWhite(g, a), compositeWhite(b, a)
}

// toRGB converts a decoded image to RGB (see DecodeLimit for the rules).
func toRGB(m image.Image) RGB {
	out := newRGBFor(m)
	w, h := out.Width, out.Height
	org := m.Bounds().Min
	switch m := m.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, v := range row {
				o := out.Pix[(y*w+x)*3:]
				o[0], o[1], o[2] = v, v, v
			}
		}
	case *image.RGBA:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			for x := range w {
				o := out.Pix[(y*w+x)*3:]
				if a := row[4*x+3]; a == 255 {
					o[0], o[1], o[2] = row[4*x], row[4*x+1], row[4*x+2]
				} else {
					c := color.NRGBAModel.Convert(m.RGBAAt(org.X+x, org.Y+y)).(color.NRGBA)
					setComposite(o, c.R, c.G, c.B, c.A)
				}
			}
		}
	case *image.RGBA64: // 16-bit RGB PNG: high bytes ("RGB;16B").
		for y := range h {
			for x := range w {
				c := m.RGBA64At(org.X+x, org.Y+y)
				o := out.Pix[(y*w+x)*3:]
				if c.A == 0xffff {
					o[0], o[1], o[2] = byte(c.R>>8), byte(c.G>>8), byte(c.B>>8)
				} else {
					n := color.NRGBA64Model.Convert(c).(color.NRGBA64)
					setComposite(o, byte(n.R>>8), byte(n.G>>8), byte(n.B>>8), byte(n.A>>8))
				}
			}
		}
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			for x := range w {
				setComposite(out.Pix[(y*w+x)*3:], row[4*x], row[4*x+1], row[4*x+2], row[4*x+3])
			}
		}
	case *image.Paletted:
		var lut [256][3]byte
		for i, c := range m.Palette {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			setComposite(lut[i][:], n.R, n.G, n.B, n.A)
		}
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, v := range row {
				copy(out.Pix[(y*w+x)*3:][:3], lut[v][:])
			}
		}
	case *image.CMYK:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			for x := range w {
				o := out.Pix[(y*w+x)*3:]
				o[0], o[1], o[2] = cmykToRGB(row[4*x], row[4*x+1], row[4*x+2], row[4*x+3])
			}
		}
	case *image.YCbCr:
		ycbcrToRGB(out, m, nil, jpegYCbCrToRGB)
	case *image.NYCbCrA:
		ycbcrToRGB(out, &m.YCbCr, m, jpegYCbCrToRGB)
	default:
		for y := range h {
			for x := range w {
				c := color.NRGBAModel.Convert(m.At(org.X+x, org.Y+y)).(color.NRGBA)
				setComposite(out.Pix[(y*w+x)*3:], c.R, c.G, c.B, c.A)
			}
		}
	}
	return out
}

// cmykToRGB is Pillow's Convert.c cmyk2rgb on non-inverted CMYK.
func cmykToRGB(c, m, y, k byte) (byte, byte, byte) {
	nk := 255 - int(k)
	ch := func(v byte) byte {
		t := int(v)*nk + 128
		return clampByte(nk - ((t>>8)+t)>>8)
	}
	return ch(c), ch(m), ch(y)
}

// clampByte clamps v to 0..255.
func clampByte(v int) byte {
	return byte(max(0, min(v, 255)))
}

// libjpeg's jdcolor.c YCbCr -> RGB constants: FIX(x) = round(x * 2^16).
const (
	fixCrR  = 91881  // FIX(1.40200)
	fixCbB  = 116130 // FIX(1.77200)
	fixCrG  = 46802  // FIX(0.71414)
	fixCbG  = 22554  // FIX(0.34414)
	oneHalf = 1 << 15
)

// jpegYCbCrToRGB is libjpeg's integer conversion (build_ycc_rgb_table):
// R = Y + ((FIX(1.402)*cr + 2^15) >> 16), G = Y + ((-FIX(0.34414)*cb -
// FIX(0.71414)*cr + 2^15) >> 16), B = Y + ((FIX(1.772)*cb + 2^15) >> 16),
// cb and cr centred on 128, each clamped to 0..255.
func jpegYCbCrToRGB(y, cb, cr byte) (byte, byte, byte) {
	yy, b, r := int(y), int(cb)-128, int(cr)-128
	return clampByte(yy + (fixCrR*r+oneHalf)>>16),
		clampByte(yy + (-fixCbG*b-fixCrG*r+oneHalf)>>16),
		clampByte(yy + (fixCbB*b+oneHalf)>>16)
}

// webpYUVToRGB is libwebp's VP8YuvToRgb (src/dsp/yuv.h, the non-table
// version, bit-exact with its SIMD code): 14-bit coefficients, MultHi(v, c)
// = (v*c) >> 8, results with 6 fractional bits clipped to 0..255.
func webpYUVToRGB(y, u, v byte) (byte, byte, byte) {
	multHi := func(v byte, c int) int { return int(v) * c >> 8 }
	clip := func(v int) byte {
		if v&^(256<<6-1) == 0 {
			return byte(v >> 6)
		}
		if v < 0 {
			return 0
		}
		return 255
	}
	yy := multHi(y, 19077)
	return clip(yy + multHi(v, 26149) - 14234),
		clip(yy - multHi(u, 6419) - multHi(v, 13320) + 8708),
		clip(yy + multHi(u, 33050) - 17685)
}

// webpToRGB converts a decoded WebP: lossless files decode to NRGBA, lossy
// ones to YCbCr (NYCbCrA with alpha), converted as libwebp does.
func webpToRGB(m image.Image) RGB {
	out := newRGBFor(m)
	switch m := m.(type) {
	case *image.YCbCr:
		ycbcrToRGB(out, m, nil, webpYUVToRGB)
	case *image.NYCbCrA:
		ycbcrToRGB(out, &m.YCbCr, m, webpYUVToRGB)
	default:
		return toRGB(m)
	}
	return out
}

// ycbcrToRGB converts m with conv, taking chroma samples by replication
// (Go's YCbCr.COffset). When a is not nil its alpha is composited on white.
func ycbcrToRGB(out RGB, m *image.YCbCr, a *image.NYCbCrA, conv func(y, cb, cr byte) (byte, byte, byte)) {
	org := m.Rect.Min
	for y := range out.Height {
		for x := range out.Width {
			px, py := org.X+x, org.Y+y
			ci := m.COffset(px, py)
			o := out.Pix[(y*out.Width+x)*3:]
			o[0], o[1], o[2] = conv(m.Y[m.YOffset(px, py)], m.Cb[ci], m.Cr[ci])
			if a != nil {
				setComposite(o, o[0], o[1], o[2], a.A[a.AOffset(px, py)])
			}
		}
	}
}

// jpegOrientation returns the EXIF orientation (1..8) of a JPEG file, or 1
// when it has none or it cannot be read. It reads the first APP1 segment
// starting with "Exif\x00" (Pillow keeps the first one as info["exif"]),
// the TIFF header's byte order and IFD0's tag 0x0112 (SHORT).
func jpegOrientation(data []byte) int {
	i := 2
	for i+4 <= len(data) {
		if data[i] != 0xff {
			return 1
		}
		marker := data[i+1]
		switch {
		case marker == 0xff: // fill byte
			i++
			continue
		case marker == 0xd8 || marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7):
			i += 2 // standalone markers
			continue
		case marker == 0xda || marker == 0xd9: // start of scan, end of image
			return 1
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if n < 2 || i+2+n > len(data) {
			return 1
		}
		seg := data[i+4 : i+2+n]
		if marker == 0xe1 && len(seg) >= 6 && bytes.HasPrefix(seg, []byte("Exif\x00")) {
			return exifOrientation(seg[6:])
		}
		i += 2 + n
	}
	return 1
}

// exifOrientation reads tag 0x0112 from IFD0 of a TIFF structure.
func exifOrientation(tiff []byte) int {
	if len(tiff) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(tiff[:4]) {
	case "II*\x00":
		bo = binary.LittleEndian
	case "MM\x00*":
		bo = binary.BigEndian
	default:
		return 1
	}
	off := int64(bo.Uint32(tiff[4:]))
	if off < 8 || off+2 > int64(len(tiff)) {
		return 1
	}
	n := int64(bo.Uint16(tiff[off:]))
	for e := range n {
		p := off + 2 + 12*e
		if p+12 > int64(len(tiff)) {
			return 1
		}
		if bo.Uint16(tiff[p:]) != 0x0112 {
			continue
		}
		typ, count := bo.Uint16(tiff[p+2:]), bo.Uint32(tiff[p+4:])
		var v int
		switch {
		case typ == 3 && count >= 1: // SHORT, stored in the value field
			v = int(bo.Uint16(tiff[p+8:]))
		case typ == 4 && count >= 1: // LONG (tolerated)
			v = int(bo.Uint32(tiff[p+8:]))
		default:
			return 1
		}
		if v >= 1 && v <= 8 {
			return v
		}
		return 1
	}
	return 1
}

// orient applies an EXIF orientation as ImageOps.exif_transpose does:
// 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE,
// 6 ROTATE_270 (90 degrees clockwise), 7 TRANSVERSE, 8 ROTATE_90
// (counter-clockwise).
func orient(src RGB, o int) RGB {
	if o < 2 || o > 8 {
		return src
	}
	w, h := src.Width, src.Height
	ow, oh := w, h
	if o >= 5 {
		ow, oh = h, w
	}
	out := NewRGB(ow, oh)
	for y := range oh {
		for x := range ow {
			var sx, sy int
			switch o {
			case 2:
				sx, sy = w-1-x, y
			case 3:
				sx, sy = w-1-x, h-1-y
			case 4:
				sx, sy = x, h-1-y
			case 5:
				sx, sy = y, x
			case 6:
				sx, sy = y, h-1-x
			case 7:
				sx, sy = w-1-y, h-1-x
			case 8:
				sx, sy = w-1-y, x
			}
			copy(out.Pix[(y*ow+x)*3:][:3], src.Pix[(sy*w+sx)*3:][:3])
		}
	}
	return out
}
