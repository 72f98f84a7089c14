package lineedit

import (
	"unicode"

	"golang.org/x/text/width"
)

// RuneWidth is the number of terminal cells r takes: 2 for East Asian wide
// and full-width characters, 0 for combining marks and control characters,
// else 1.
func RuneWidth(r rune) int {
	switch {
	case r < 0x20 || r == 0x7f:
		return 0
	case unicode.In(r, unicode.Mn, unicode.Me):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// StringWidth is the number of cells s takes on one row.
func StringWidth(s string) int {
	n := 0
	for _, r := range s {
		n += RuneWidth(r)
	}
	return n
}
