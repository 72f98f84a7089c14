//go:build !unix

package prefixdisk

const lockName = "lock"

// lockDir does not lock where flock is missing: two processes on one
// directory there are not detected.
func lockDir(dir string) (func(), error) { return func() {}, nil }
