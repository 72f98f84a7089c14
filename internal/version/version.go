// Package version reports which govinfer this is, from the build
// information the Go toolchain writes into every binary: for the command
// line (govinfer --version), the logs and /v1/models.
package version

import (
	"runtime/debug"
)

// String returns govinfer's version: the module's version where the
// binary was built from a tagged or pseudo-versioned module ("v0.4.0",
// "v0.0.0-20250101120000-0123456789ab"), else "devel" followed by the
// checkout's revision where the build recorded one ("devel-0123456789ab",
// "-dirty" added for uncommitted changes), else plain "devel".
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is String for the build information bi.
func fromBuildInfo(bi *debug.BuildInfo) string {
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return v
}
