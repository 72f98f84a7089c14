//go:build !linux

package cpu

// populateTable does nothing where the kernel has no MADV_POPULATE_READ
// (see advise_linux.go): the table's pages fault in as tokens need them.
func populateTable([]byte) {}
