package httpapi

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"sync"

	"github.com/valyala/fasthttp"
)

// faviconSize is the icon's width and height in pixels.
const faviconSize = 32

// favicon is /favicon.ico, which browsers ask for on every page (the chat
// page's, and any JSON they show): a "g" in white on a square of the chat
// page's accent blue with rounded corners. It is drawn once, as a PNG in
// an ICO container, which every browser takes.
var favicon = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, drawFavicon()); err != nil {
		panic(err) // an in-memory encode of a valid image does not fail
	}
	var ico bytes.Buffer
	// ICONDIR: reserved, type 1 (icon), one image; ICONDIRENTRY: width,
	// height, no palette, reserved, 1 plane, 32 bits per pixel, the PNG's
	// size and offset.
	binary.Write(&ico, binary.LittleEndian, [3]uint16{0, 1, 1})
	ico.Write([]byte{faviconSize, faviconSize, 0, 0})
	binary.Write(&ico, binary.LittleEndian, [2]uint16{1, 32})
	binary.Write(&ico, binary.LittleEndian, [2]uint32{uint32(b.Len()), 6 + 16})
	ico.Write(b.Bytes())
	return ico.Bytes()
})

// drawFavicon draws the icon, each pixel the coverage of 4x4 samples.
func drawFavicon() *image.NRGBA {
	blue := color.NRGBA{0x09, 0x69, 0xda, 0xff} // --accent of webui/app.css
	img := image.NewNRGBA(image.Rect(0, 0, faviconSize, faviconSize))
	const n = 4
	for y := range faviconSize {
		for x := range faviconSize {
			var square, glyph int
			for sy := range n {
				for sx := range n {
					px, py := float64(x)+(float64(sx)+0.5)/n, float64(y)+(float64(sy)+0.5)/n
					if inRoundedSquare(px, py) {
						square++
						if inG(px, py) {
							glyph++
						}
					}
				}
			}
			// White over blue by the glyph's share, the square's edge as
			// alpha.
			w := float64(glyph) / float64(max(square, 1))
			mix := func(c uint8) uint8 { return uint8(float64(c)*(1-w) + 255*w + 0.5) }
			img.SetNRGBA(x, y, color.NRGBA{mix(blue.R), mix(blue.G), mix(blue.B), uint8(255 * square / (n * n))})
		}
	}
	return img
}

// inRoundedSquare reports whether (x, y) is in the icon's square, whose
// corners are rounded with a radius of 7 pixels.
func inRoundedSquare(x, y float64) bool {
	const r = 7.0
	cx := min(max(x, r), faviconSize-r)
	cy := min(max(y, r), faviconSize-r)
	return (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r
}

// inG reports whether (x, y) is in the "g": a ring, its stem on the right
// and a hook below.
func inG(x, y float64) bool {
	const cx, cy, outer, inner = 15.0, 13.5, 7.5, 4.5
	d := (x-cx)*(x-cx) + (y-cy)*(y-cy)
	ring := d <= outer*outer && d >= inner*inner
	stem := x >= cx+inner && x <= cx+outer && y >= 7 && y <= 23
	// The hook: the lower half of a ring below the stem's end.
	const hy = 22.0
	h := (x-cx)*(x-cx) + (y-hy)*(y-hy)
	hook := y >= hy && h <= outer*outer && h >= inner*inner && x >= cx-outer+1
	return ring || stem || hook
}

// handleFavicon answers GET and HEAD /favicon.ico with the icon, in every
// state and without the API key.
func handleFavicon(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "/favicon.ico takes GET, not "+string(ctx.Method()), "")
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return
	}
	ctx.Response.Header.Set("Cache-Control", "public, max-age=86400")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("image/x-icon")
	ctx.SetBody(favicon())
}
