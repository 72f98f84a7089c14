//go:build noasm || !(amd64 || arm64)

package asm

// archImpl leaves the pure-Go kernels in place: this build has no assembly.
func archImpl(k *impl, f Features, nBlock int) Features { return Features{} }
