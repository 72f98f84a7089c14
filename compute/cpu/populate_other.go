//go:build !linux

package cpu

// populateTable does nothing where the kernel has no MADV_POPULATE_READ
// (see populate_linux.go): the table's pages fault in as tokens need them.
func populateTable([]byte) {}

// populate does nothing here: the pages fault in when first read.
func populate([]byte) {}
