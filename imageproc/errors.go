package imageproc

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them (test
// with errors.Is) together with context such as the format and the size.
var (
	// ErrFormat: the data is not a PNG, JPEG, GIF or WebP file.
	ErrFormat = errors.New("imageproc: unsupported image format")
	// ErrCorrupt: the file is truncated or malformed.
	ErrCorrupt = errors.New("imageproc: corrupt image")
	// ErrTooLarge: the file declares more pixels than allowed.
	ErrTooLarge = errors.New("imageproc: image too large")
	// ErrAspectRatio: the longer side is more than 200 times the shorter one
	// (smart_resize's limit).
	ErrAspectRatio = errors.New("imageproc: aspect ratio too extreme")
	// ErrConfig: the preprocessor configuration is missing or invalid. This
	// is a server-side error, not an input error.
	ErrConfig = errors.New("imageproc: invalid preprocessor config")
)

// IsInputError reports whether err was caused by the image supplied (and so
// deserves a client error such as HTTP 400) rather than by the server.
func IsInputError(err error) bool {
	return errors.Is(err, ErrFormat) || errors.Is(err, ErrCorrupt) ||
		errors.Is(err, ErrTooLarge) || errors.Is(err, ErrAspectRatio)
}
