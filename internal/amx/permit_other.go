//go:build noasm || !linux || !amd64

package amx

// Permitted reports false: this build uses no AMX tiles.
func Permitted() bool { return false }
