package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		name     string
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"go test", "", nil, "devel"},
		{"go build without VCS", "(devel)", nil, "devel"},
		{"a clean checkout", "(devel)", vcs(rev, "false"), "devel-0123456789ab"},
		{"a modified checkout", "(devel)", vcs(rev, "true"), "devel-0123456789ab-dirty"},
		{"go install at a tag", "v0.4.0", nil, "v0.4.0"},
		{"a stamped build", "v0.0.0-20250101120000-0123456789ab+dirty", vcs(rev, "true"), "v0.0.0-20250101120000-0123456789ab+dirty"},
		{"a short revision", "", vcs("abc", "false"), "devel-abc"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/govinfer/govinfer", Version: c.main}, Settings: c.settings}
		if got := fromBuildInfo(bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if String() == "" {
		t.Error("String() is empty")
	}
}
