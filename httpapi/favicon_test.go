package httpapi

import (
	"bytes"
	"encoding/binary"
	"image/png"
	"net/http"
	"strings"
	"testing"
)

// TestFavicon: /favicon.ico, asked for by browsers on every page, answers
// a 32x32 icon (a PNG in an ICO container) without a key and without a
// log line.
func TestFavicon(t *testing.T) {
	var log syncBuffer
	s := startServer(t, Config{APIKey: "secret", Log: &log})
	resp, err := http.Get("http://" + s.Addr() + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	data := body.Bytes()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/x-icon" || len(data) < 22 {
		t.Fatalf("status %d, type %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(data))
	}
	var dir [3]uint16
	binary.Read(bytes.NewReader(data), binary.LittleEndian, &dir)
	size, offset := binary.LittleEndian.Uint32(data[14:]), binary.LittleEndian.Uint32(data[18:])
	if dir != [3]uint16{0, 1, 1} || data[6] != 32 || data[7] != 32 || int(offset+size) != len(data) {
		t.Fatalf("ICO header %v, entry % x", dir, data[6:22])
	}
	img, err := png.Decode(bytes.NewReader(data[offset:]))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 32 || b.Dy() != 32 {
		t.Errorf("icon %v, want 32x32", b)
	}
	// Corners transparent, the middle of the stem white, the square blue.
	if _, _, _, a := img.At(0, 0).RGBA(); a != 0 {
		t.Errorf("corner alpha %d", a)
	}
	if r, g, b, _ := img.At(21, 18).RGBA(); r>>8 < 0xf0 || g>>8 < 0xf0 || b>>8 < 0xf0 {
		t.Errorf("the stem is not white: %x %x %x", r>>8, g>>8, b>>8)
	}
	if r, _, b, _ := img.At(3, 16).RGBA(); r>>8 != 0x09 || b>>8 != 0xda {
		t.Errorf("the square is not the accent blue: %x %x", r>>8, b>>8)
	}
	if strings.Contains(log.String(), "favicon") {
		t.Errorf("the favicon was logged:\n%s", log.String())
	}
}
