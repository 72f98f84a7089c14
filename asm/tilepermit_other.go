//go:build noasm || !linux || !amd64

package asm

// tileDataPermitted reports false: this build uses no AMX tiles.
func tileDataPermitted() bool { return false }
