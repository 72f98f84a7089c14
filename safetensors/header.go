package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header this package reads or writes, in
// bytes. Real checkpoints have headers of a few hundred kilobytes at most.
const MaxHeaderSize = 100 << 20

// metadataKey is the header key of the free-form string metadata.
const metadataKey = "__metadata__"

// entry is one validated tensor record of a header.
type entry struct {
	dtype      DType
	shape      []int
	begin, end int64 // byte offsets into the data region
}

// header is a validated safetensors header.
type header struct {
	entries  map[string]entry
	names    []string // sorted
	metadata map[string]string
}

// rawEntry is a tensor record as it appears in the JSON; pointers tell a
// missing field from a zero one.
type rawEntry struct {
	DType   *string  `json:"dtype"`
	Shape   *[]int64 `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

// parse validates a whole safetensors file held in buf (8-byte little-endian
// header length, JSON header, data region) and returns its header and the
// offset of the data region in buf. Errors are *FormatError with Path set to
// path.
func parse(path string, buf []byte) (header, int, error) {
	fail := func(tensor, format string, args ...any) (header, int, error) {
		return header{}, 0, &FormatError{Path: path, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if len(buf) < 8 {
		return fail("", "truncated: %d bytes, fewer than the 8-byte header length", len(buf))
	}
	n := binary.LittleEndian.Uint64(buf)
	switch {
	case n > MaxHeaderSize:
		return fail("", "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	case n > uint64(len(buf)-8):
		return fail("", "truncated: header length %d but only %d bytes follow it", n, len(buf)-8)
	}
	start := 8 + int(n)
	h, err := parseHeader(buf[8:start], int64(len(buf)-start))
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return header{}, 0, err
	}
	return h, start, nil
}

// parseHeader validates the JSON header hdr of a file whose data region is
// dataSize bytes long. Every tensor must lie inside the data region, have a
// byte length that matches its dtype and shape, and the tensors together must
// cover the data region exactly, without overlaps or gaps.
func parseHeader(hdr []byte, dataSize int64) (header, error) {
	fail := func(tensor, format string, args ...any) (header, error) {
		return header{}, &FormatError{Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return fail("", "header does not start with '{'")
	}
	if !utf8.Valid(hdr) {
		return fail("", "header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if _, err := dec.Token(); err != nil {
		return fail("", "header is not JSON: %v", err)
	}
	h := header{entries: make(map[string]entry)}
	seenMetadata := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("", "header is not JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok { // cannot happen for a well-formed object; be safe anyway
			return fail("", "header is not JSON: object key %v", tok)
		}
		if name == metadataKey {
			if seenMetadata {
				return fail("", "duplicate %s", metadataKey)
			}
			seenMetadata = true
			if err := dec.Decode(&h.metadata); err != nil {
				return fail("", "%s: %s", metadataKey, decodeProblem(err))
			}
			continue
		}
		if _, dup := h.entries[name]; dup {
			return fail(name, "listed twice in the header")
		}
		if name == "" {
			return fail("", "tensor with an empty name")
		}
		var raw rawEntry
		if err := dec.Decode(&raw); err != nil {
			return fail(name, "%s", decodeProblem(err))
		}
		e, msg := checkEntry(raw, dataSize)
		if msg != "" {
			return fail(name, "%s", msg)
		}
		h.entries[name] = e
		h.names = append(h.names, name)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fail("", "header is not JSON: %v", err)
	}
	if rest := hdr[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return fail("", "header has %d bytes of trailing data after the JSON object", len(rest))
	}
	slices.Sort(h.names)
	if err := checkCoverage(h, dataSize); err != nil {
		return header{}, err
	}
	return h, nil
}

// decodeProblem describes an error from decoding one header value.
func decodeProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "header is not JSON: it ends too soon"
	case errors.As(err, &syn):
		return "header is not JSON: " + err.Error()
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("bad header entry: %s holds a JSON %s of the wrong type", typ.Field, typ.Value)
	case errors.As(err, &typ):
		return fmt.Sprintf("bad header entry: unexpected JSON %s", typ.Value)
	}
	return "bad header entry: " + err.Error()
}

// checkEntry validates one tensor record on its own; it returns the problem
// as a message, or "" if there is none.
func checkEntry(raw rawEntry, dataSize int64) (entry, string) {
	switch {
	case raw.DType == nil:
		return entry{}, "missing dtype"
	case raw.Shape == nil:
		return entry{}, "missing shape"
	case raw.Offsets == nil:
		return entry{}, "missing data_offsets"
	}
	e := entry{dtype: DType(*raw.DType)}
	size := e.dtype.Size()
	if size == 0 {
		return entry{}, fmt.Sprintf("unsupported dtype %s", quote(*raw.DType))
	}
	shape := *raw.Shape
	e.shape = make([]int, len(shape))
	count := int64(1)
	for i, d := range shape {
		if d < 0 {
			return entry{}, fmt.Sprintf("negative dimension %d in shape %v", d, shape)
		}
		if d > math.MaxInt || (d != 0 && count > math.MaxInt64/d) {
			return entry{}, fmt.Sprintf("shape %v has too many elements", shape)
		}
		count *= d
		e.shape[i] = int(d)
	}
	if count > math.MaxInt64/int64(size) || count*int64(size) > math.MaxInt {
		return entry{}, fmt.Sprintf("shape %v has too many elements", shape)
	}
	offs := *raw.Offsets
	if len(offs) != 2 {
		return entry{}, fmt.Sprintf("data_offsets has %d values, want 2 (begin, end)", len(offs))
	}
	e.begin, e.end = offs[0], offs[1]
	switch {
	case e.begin < 0 || e.end < 0:
		return entry{}, fmt.Sprintf("negative data_offsets %v", offs)
	case e.begin > e.end:
		return entry{}, fmt.Sprintf("data_offsets %v begin after they end", offs)
	case e.end > dataSize:
		return entry{}, fmt.Sprintf("data_offsets %v reach past the end of the %d-byte data region (file truncated?)", offs, dataSize)
	case e.end-e.begin != count*int64(size):
		return entry{}, fmt.Sprintf("dtype %s with shape %v needs %d bytes, but data_offsets %v hold %d",
			e.dtype, shape, count*int64(size), offs, e.end-e.begin)
	}
	return e, ""
}

// checkCoverage verifies that the tensors tile the data region exactly.
func checkCoverage(h header, dataSize int64) error {
	order := slices.Clone(h.names)
	slices.SortFunc(order, func(a, b string) int {
		ea, eb := h.entries[a], h.entries[b]
		if ea.begin != eb.begin {
			return cmp.Compare(ea.begin, eb.begin)
		}
		if ea.end != eb.end {
			return cmp.Compare(ea.end, eb.end)
		}
		return strings.Compare(a, b)
	})
	var pos int64
	prev := ""
	for _, name := range order {
		e := h.entries[name]
		switch {
		case e.begin < pos:
			return &FormatError{Tensor: name, Msg: fmt.Sprintf("data_offsets [%d, %d] overlap tensor %s, which ends at %d", e.begin, e.end, quote(prev), pos)}
		case e.begin > pos:
			return &FormatError{Tensor: name, Msg: fmt.Sprintf("data_offsets [%d, %d] leave a gap of %d unused bytes before it", e.begin, e.end, e.begin-pos)}
		}
		if e.end > pos || prev == "" {
			prev = name
		}
		pos = e.end
	}
	if pos != dataSize {
		return &FormatError{Msg: fmt.Sprintf("tensors cover %d bytes of the %d-byte data region; the rest is unused", pos, dataSize)}
	}
	return nil
}
